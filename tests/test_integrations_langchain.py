"""The LangChain integration: the retriever (with LangChain's standard suite), turn reading,
the tool selector, the `create_agent` middleware and the recorder callback.

DTDR-C is fitted once per test session on 300 demo demonstrations with the real
all-MiniLM-L6-v2 encoder (`langchain_dtdr.testing.demo_setup` is cached per process).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_tests.integration_tests import RetrieversIntegrationTests
from pydantic import ValidationError

from dtdr_agents.foundation.errors import InvalidToolError, NotFittedError, UnknownToolError
from dtdr_agents.foundation.selection import SelectionPolicy, select
from dtdr_agents.foundation.types import END_OF_PLAN, Toolset
from dtdr_agents.retrievers import make_retriever
from dtdr_agents.runtime import BindingPolicy, StepRecord
from dtdr_agents.runtime.prompting import CharApproxCounter
from dtdr_agents.runtime.recording import DemonstrationRecorder
from langchain_dtdr import (
    CatalogueMismatchError,
    DTDRMiddleware,
    DTDRRecorderCallback,
    DTDRRetriever,
    NoRequestError,
    ToolSelector,
    UnboundToolCallError,
    current_turn,
    merge_selection_records,
)
from langchain_dtdr.testing import (
    DemoSetup,
    PlanFollower,
    ScriptedChatModel,
    call_tool,
    demo_setup,
    langchain_tools,
)

K = 3
QUERY = "Summarize the report Q3.pdf and email the summary to Ann Lee"


@pytest.fixture(scope="module")
def demo() -> DemoSetup:
    return demo_setup("dtdr-c")


@pytest.fixture(scope="module")
def tools(demo: DemoSetup) -> list[BaseTool]:
    return langchain_tools(demo.tools)


# ---------------------------------------------------------------- LangChain's standard suite
class TestDTDRRetrieverStandard(RetrieversIntegrationTests):
    """`langchain-tests` RetrieversIntegrationTests, offline (the retriever needs no service)."""

    @property
    def retriever_constructor(self) -> type[DTDRRetriever]:
        return DTDRRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"retriever": demo_setup("dtdr-c").retriever}

    @property
    def retriever_query_example(self) -> str:
        return QUERY


# ---------------------------------------------------------------------------- retriever
def test_one_document_per_tool_with_metadata(demo: DemoSetup) -> None:
    retriever = DTDRRetriever(retriever=demo.retriever, k=K)
    history = ["open_file", "summarize_pdf"]
    docs = retriever.invoke(QUERY, k=K, history=history)
    ranking = demo.retriever.rank(QUERY, history)
    want = select(ranking, SelectionPolicy(k=K, respect_fallback=False))
    assert [d.metadata["name"] for d in docs] == list(want.names)
    assert [d.id for d in docs] == list(want.names)
    assert [d.metadata["rank"] for d in docs] == [1, 2, 3]
    probs = [d.metadata["probability"] for d in docs]
    assert probs == sorted(probs, reverse=True)
    assert probs == pytest.approx([ranking.probability(n) for n in want.names])
    for doc in docs:
        tool = demo.tools.get(doc.metadata["name"])
        assert tool is not None and doc.page_content == tool.description
        assert doc.metadata["why"] == ranking.why(doc.metadata["name"])
        assert doc.metadata["method"] == "dtdr-c"
        assert doc.metadata["fallback"] is False
        json.dumps(doc.metadata)


def test_history_changes_the_ranking(demo: DemoSetup) -> None:
    retriever = DTDRRetriever(retriever=demo.retriever, k=1)
    request = demo.test[0]
    tops = [
        retriever.invoke(request.query, history=list(request.calls[:i]))[0].metadata["name"]
        for i in range(len(request.calls))
    ]
    assert tops == list(request.calls)  # DTDR-C follows the plan step by step
    assert (
        retriever.invoke(request.query, history=",".join(request.calls[:3]))[0].metadata["name"]
        == request.calls[3]
    )


async def test_async_matches_sync(demo: DemoSetup) -> None:
    retriever = DTDRRetriever(retriever=demo.retriever)
    sync_docs = retriever.invoke(QUERY, k=4, history=["open_file"])
    async_docs = await retriever.ainvoke(QUERY, k=4, history=["open_file"])
    assert async_docs == sync_docs
    assert len(sync_docs) == 4


def test_k_validation_threshold_and_end(demo: DemoSetup) -> None:
    with pytest.raises(ValidationError):
        DTDRRetriever(retriever=demo.retriever, k=0)
    retriever = DTDRRetriever(retriever=demo.retriever)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        retriever.invoke(QUERY, k=0)
    request = demo.test[2]
    done = DTDRRetriever(retriever=demo.retriever, include_end=True, k=2)
    docs = done.invoke(request.query, history=list(request.calls))
    assert docs[0].metadata["name"] == END_OF_PLAN
    assert docs[0].page_content.startswith("End of plan")
    sparse = DTDRRetriever(retriever=demo.retriever, k=10, threshold=0.0)
    assert len(sparse.invoke(request.query, history=list(request.calls[:1]))) < 10


def test_bad_retrievers_and_history(demo: DemoSetup) -> None:
    with pytest.raises(NotFittedError, match="not fitted"):
        DTDRRetriever(retriever=make_retriever("dtdr-c"))
    with pytest.raises((TypeError, ValidationError)):
        DTDRRetriever(retriever="dtdr-c")
    retriever = DTDRRetriever(retriever=demo.retriever)
    with pytest.raises(UnknownToolError, match="teleport"):
        retriever.invoke(QUERY, history=["teleport"])
    lenient = DTDRRetriever(retriever=demo.retriever, ignore_unknown=True)
    assert lenient.invoke(QUERY, history=["teleport"]) == retriever.invoke(QUERY)
    assert "retriever" not in repr(retriever)  # Field(repr=False)


def test_from_demonstrations_and_load(demo: DemoSetup, tmp_path: Path) -> None:
    built = DTDRRetriever.from_demonstrations(
        demo.train, demo.tools, retriever="dr", k=2, tags=["dtdr"]
    )
    assert built.retriever.retriever_id == "dr"
    assert built.k == 2 and built.tags == ["dtdr"]
    assert len(built.invoke("text Bob", history=["get_phone_number"])) == 2
    built.retriever.save(tmp_path / "model")
    loaded = DTDRRetriever.load(tmp_path / "model", k=2)
    assert loaded.invoke("text Bob", history=["get_phone_number"]) == built.invoke(
        "text Bob", history=["get_phone_number"]
    )


class _Events(BaseCallbackHandler):
    def __init__(self) -> None:
        self.documents: list[Document] = []

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.documents.extend(documents)


def test_retriever_runs_are_traced_with_why(demo: DemoSetup) -> None:
    events = _Events()
    retriever = DTDRRetriever(retriever=demo.retriever, k=2)
    retriever.invoke(QUERY, {"callbacks": [events]}, history=["open_file"])
    assert len(events.documents) == 2
    assert all("cluster=" in d.metadata["why"] for d in events.documents)


# ------------------------------------------------------------------------ turn reading
def test_current_turn() -> None:
    messages = [
        SystemMessage("sys"),
        HumanMessage("first request"),
        call_tool("a", id="1"),
        ToolMessage("r", tool_call_id="1", name="a"),
        AIMessage("answer 1"),
        HumanMessage([{"type": "text", "text": "second request"}]),
        HumanMessage("and a follow-up"),
        AIMessage(
            "",
            tool_calls=[
                {"name": "b", "args": {}, "id": "2", "type": "tool_call"},
                {"name": "c", "args": {}, "id": "3", "type": "tool_call"},
            ],
        ),
        ToolMessage("r", tool_call_id="2", name="b"),
        ToolMessage("boom", tool_call_id="3", name="c", status="error"),
        call_tool("d", id="4"),
    ]
    turn = current_turn(messages)
    assert turn.request == "second request"  # the first human message of the turn
    assert turn.steps == (("b", "c"), ("d",))
    assert turn.history == ("b", "c", "d")
    assert (turn.finished, turn.errors) == (False, 1)
    done = current_turn([*messages, ToolMessage("r", tool_call_id="4", name="d"), AIMessage("ok")])
    assert done.finished and done.request == "second request"
    first = current_turn(messages[:5])
    assert (first.request, first.history, first.finished) == ("first request", ("a",), True)
    with pytest.raises(NoRequestError, match="no human message"):
        current_turn([SystemMessage("x")])
    with pytest.raises(NoRequestError, match="no text"):
        current_turn([HumanMessage("  ")])


# ---------------------------------------------------------------------------- selector
def test_selector_steps(demo: DemoSetup, tools: list[BaseTool]) -> None:
    selector = ToolSelector(
        tools,
        demo.retriever,
        policy=SelectionPolicy(k=K, threshold=0.0),
        token_counter=CharApproxCounter(),
    )
    request = demo.test[0]
    step = selector.select(request.query, request.calls[:3])
    assert step.bound == ("create_zoom_meeting",)  # zero-probability tools are dropped
    record = step.to_record()
    assert record["step"] == 3 and record["selected"] == ["create_zoom_meeting"]
    assert record["tokens"]["counter"] == "approx:chars/4"
    assert record["tokens"]["saved"] > 0
    assert record["explanation"]["key"] == ["get_email_address"] * 3
    json.dumps(record)
    meta = step.metadata()
    assert meta["dtdr_bound_tools"] == ["create_zoom_meeting"]
    assert "cluster=" in meta["dtdr_why"]["create_zoom_meeting"]
    wide = selector.widen(step, "test")
    assert wide is not None and wide.widened and len(wide.bound) == 2 * K
    assert wide.to_record()["widen_reason"] == "test"
    assert [t.name for t in selector.tools_for(["web_search", "get_weather"])] == [
        "web_search",
        "get_weather",
    ]  # in the order given (the step's bound order)
    assert StepRecord.from_record(record).to_record() == record  # typed round trip
    assert StepRecord.from_record(wide.to_record()).to_record() == wide.to_record()
    with pytest.raises(ValueError, match="lacks the key 'bound'"):
        StepRecord.from_record({k: v for k, v in record.items() if k != "bound"})
    with pytest.raises(UnknownToolError):
        selector.tools_for(["teleport"])


def test_selector_rejects_bad_input(demo: DemoSetup, tools: list[BaseTool]) -> None:
    with pytest.raises(InvalidToolError, match="duplicate tool name"):
        ToolSelector([*tools, tools[0]], demo.retriever)
    with pytest.raises(CatalogueMismatchError, match="fitted on another tool catalogue"):
        ToolSelector(tools[:5], demo.retriever)
    with pytest.raises(ValueError, match="widen_k"):
        ToolSelector(
            tools, demo.retriever, policy=SelectionPolicy(k=4), binding=BindingPolicy(widen_k=2)
        )
    selector = ToolSelector(tools, demo.retriever)
    with pytest.raises(UnknownToolError, match="teleport"):
        selector.select(QUERY, ["teleport"])


def test_prepare_messages_and_record_reducer() -> None:
    msgs = ToolSelector.prepare_messages([HumanMessage("hi")], "static", "", "dynamic")
    assert [m.type for m in msgs] == ["system", "human"]
    assert msgs[0].content == "static\n\ndynamic"
    merged = ToolSelector.prepare_messages([SystemMessage("base"), HumanMessage("hi")], "x")
    assert merged[0].content == "base\n\nx" and len(merged) == 2
    assert ToolSelector.prepare_messages([HumanMessage("hi")], None, "") == [HumanMessage("hi")]
    a = {"history": [], "widened": False}
    b = {"history": ["x"], "widened": False}
    w = {"history": [], "widened": True}
    assert merge_selection_records([a, b], [a]) == [a]  # a new turn restarts the list
    assert merge_selection_records([a], [w, b]) == [a, w, b]


# --------------------------------------------------------------------------- middleware
def expected(demo: DemoSetup, query: str, history: Any, k: int = K) -> tuple[str, ...]:
    sel = select(demo.retriever.rank(query, tuple(history)), SelectionPolicy(k=k, threshold=0.0))
    return tuple(n for n in demo.tools.names if n in sel.names)


def test_middleware_rewrites_the_tools_of_every_call(
    demo: DemoSetup, tools: list[BaseTool]
) -> None:
    request = demo.test[2]
    model = ScriptedChatModel(responder=PlanFollower(demo.plans(), demo.tools))
    agent = create_agent(model, tools, middleware=[DTDRMiddleware(demo.retriever, k=K)])
    state = agent.invoke({"messages": [("user", request.query)]})
    assert state["messages"][-1].content.startswith("Done:")
    assert len(model.calls) == len(request.calls) + 1
    for i, call in enumerate(model.calls):
        assert call.tools == expected(demo, request.query, request.calls[:i])
    assert [r["bound"] for r in state["tool_selections"]] == [list(b) for b in model.bound_tools]


async def test_middleware_async(demo: DemoSetup, tools: list[BaseTool]) -> None:
    request = demo.test[1]
    model = ScriptedChatModel(responder=PlanFollower(demo.plans(), demo.tools))
    agent = create_agent(model, tools, middleware=[DTDRMiddleware(demo.retriever, k=K)])
    await agent.ainvoke({"messages": [("user", request.query)]})
    for i, call in enumerate(model.calls):
        assert call.tools == expected(demo, request.query, request.calls[:i])


@pytest.mark.parametrize("mode", ["soft", "hard_weighted"])
def test_middleware_modes(demo: DemoSetup, tools: list[BaseTool], mode: str) -> None:
    request = demo.test[2]
    model = ScriptedChatModel(responder=PlanFollower(demo.plans(), demo.tools))
    middleware = DTDRMiddleware(demo.retriever, k=K, mode=mode)  # type: ignore[arg-type]
    agent = create_agent(model, tools, middleware=[middleware], system_prompt="Be helpful.")
    agent.invoke({"messages": [("user", request.query)]})
    for i, call in enumerate(model.calls):
        preferred = expected(demo, request.query, request.calls[:i])
        assert call.tools == (demo.tools.names if mode == "soft" else preferred)
        assert call.system.startswith("Be helpful.\n\n")
        assert all(name in call.system for name in preferred)


def test_middleware_widens_then_rejects(demo: DemoSetup, tools: list[BaseTool]) -> None:
    request = demo.test[0]
    first = expected(demo, request.query, ())
    model = ScriptedChatModel(
        responses=[call_tool("web_search"), call_tool("web_search"), "giving up"]
    )
    middleware = DTDRMiddleware(demo.retriever, k=K, binding=BindingPolicy(widen_on_answer=False))
    agent = create_agent(model, tools, middleware=[middleware])
    state = agent.invoke({"messages": [("user", request.query)]})
    assert model.bound_tools[0] == first
    assert set(model.bound_tools[1]) > set(first)  # the one wider re-selection
    rejected = next(m for m in state["messages"] if isinstance(m, ToolMessage))
    assert rejected.status == "error" and "not available at this step" in str(rejected.content)

    raising = DTDRMiddleware(
        demo.retriever, k=K, binding=BindingPolicy(widen_on_answer=False, on_unbound="raise")
    )
    model = ScriptedChatModel(responses=[call_tool("web_search"), call_tool("web_search")])
    with pytest.raises(UnboundToolCallError):
        create_agent(model, tools, middleware=[raising]).invoke(
            {"messages": [("user", request.query)]}
        )


class _ModelMetadata(BaseCallbackHandler):
    def __init__(self) -> None:
        self.metadata: list[dict[str, Any]] = []

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.metadata.append(dict(kwargs.get("metadata") or {}))


def test_middleware_traces_why(demo: DemoSetup, tools: list[BaseTool]) -> None:
    request = demo.test[1]
    capture = _ModelMetadata()
    model = ScriptedChatModel(responder=PlanFollower(demo.plans(), demo.tools))
    agent = create_agent(model, tools, middleware=[DTDRMiddleware(demo.retriever, k=K)])
    agent.invoke({"messages": [("user", request.query)]}, {"callbacks": [capture]})
    assert len(capture.metadata) == len(model.calls)
    for meta, call in zip(capture.metadata, model.calls, strict=True):
        assert tuple(meta["dtdr_bound_tools"]) == call.tools
        assert all("cluster=" in why for why in meta["dtdr_why"].values())


def test_middleware_catalogue_checks(demo: DemoSetup, tools: list[BaseTool]) -> None:
    with pytest.raises(CatalogueMismatchError):
        DTDRMiddleware(demo.retriever, tools=tools[:10])
    agent = create_agent(
        ScriptedChatModel(responses=["x"]), tools[:10], middleware=[DTDRMiddleware(demo.retriever)]
    )
    with pytest.raises(CatalogueMismatchError):  # found at the first call
        agent.invoke({"messages": [("user", QUERY)]})
    with pytest.raises(ValueError, match="on_unbound"):
        DTDRMiddleware(demo.retriever, binding=BindingPolicy(on_unbound="skip"))  # type: ignore[arg-type]


def test_middleware_recorder_callback(
    demo: DemoSetup, tools: list[BaseTool], tmp_path: Path
) -> None:
    request = demo.test[2]
    recorder = DemonstrationRecorder(tmp_path / "runs.jsonl", tools=Toolset(demo.tools))
    model = ScriptedChatModel(responder=PlanFollower(demo.plans(), demo.tools))
    agent = create_agent(model, tools, middleware=[DTDRMiddleware(demo.retriever, k=K)])
    agent.invoke(
        {"messages": [("user", request.query)]}, {"callbacks": [DTDRRecorderCallback(recorder)]}
    )
    lines = [json.loads(line) for line in recorder.path.read_text().splitlines()]
    assert [(d["query"], d["calls"]) for d in lines] == [(request.query, list(request.calls))]
