"""Tool names in LlamaIndex: sanitised names mapped back, and LlamaIndex tools in `fit`.

LlamaIndex offers a tool to the model under ``ToolMetadata.to_openai_tool``'s name, where every
character outside ``[a-zA-Z0-9_-]`` becomes ``_``; the model calls it by that name. The agent
runs offline with LlamaIndex's own `MockFunctionCallingLLM` (scripted to call the names it is
offered, the way an OpenAI model does) and through real HTTP with `OpenAILike` and the loopback
server (where LlamaIndex's OpenAI client itself sends the sanitised names).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from dtdr_agents.foundation.errors import InvalidToolError
from dtdr_agents.foundation.selection import SelectionPolicy, select
from dtdr_agents.foundation.types import Demonstration, Tool, Toolset
from dtdr_agents.retrievers import make_retriever
from dtdr_agents.retrievers.base import ToolRetriever
from llama_index_dtdr import RECORDS_KEY, DTDRFunctionAgent, DTDRObjectRetriever
from llama_index_dtdr.retriever import model_name

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:inspect")

K = 3
SPECS = {  # catalogue name -> (description, the name LlamaIndex offers the model)
    "météo du jour": ("Weather forecast for a city today.", "m_t_o_du_jour"),
    "calendar.add event": ("Add an event to the calendar.", "calendar_add_event"),
    "Übersetzen text": ("Translate a text into German.", "_bersetzen_text"),
    "翻訳": ("Translate a text into Japanese.", "__"),
    "send_email": ("Send an email to a contact.", "send_email"),
    "web search": ("Search the web for pages.", "web_search"),
}
QUERY = (
    "Get the weather forecast for Oslo today, add a picnic event to my calendar, "
    "and translate the invitation text into German"
)
PLAN = [  # what the model calls: the names it was offered
    ("m_t_o_du_jour", {"city": "Oslo"}),
    ("calendar_add_event", {"title": "picnic"}),
    ("_bersetzen_text", {"text": "invitation"}),
]


def make_tool(name: str) -> FunctionTool:
    """A LlamaIndex tool named `name` whose function reports which tool ran."""
    description = SPECS[name][0]

    def run(city: str = "", title: str = "", text: str = "") -> str:
        args = {k: v for k, v in {"city": city, "title": title, "text": text}.items() if v}
        return json.dumps({"tool": name, "args": args}, ensure_ascii=False, sort_keys=True)

    return FunctionTool.from_defaults(fn=run, name=name, description=description)


@pytest.fixture(scope="module")
def tools() -> list[FunctionTool]:
    return [make_tool(n) for n in SPECS]


@pytest.fixture(scope="module")
def retriever(tools: list[FunctionTool]) -> ToolRetriever:
    demos = [
        Demonstration(QUERY, ("météo du jour", "calendar.add event", "Übersetzen text")),
        Demonstration("Email the weather forecast to Ana", ("météo du jour", "send_email")),
        Demonstration("Search the web and translate it into Japanese", ("web search", "翻訳")),
    ]
    return make_retriever("bm25").fit(demos, tools)


class ScriptedModel:
    """Answers `MockFunctionCallingLLM` requests: the next planned call, then a final answer.

    Records the names each request offered the model (what an OpenAI model would see).
    """

    def __init__(self, plan: Sequence[tuple[str, dict[str, Any]]]) -> None:
        self.plan = list(plan)
        self.offered: list[list[str]] = []

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        offered = [model_name(t) for t in kwargs.get("tools") or []]
        self.offered.append(offered)
        done = sum(m.role == MessageRole.TOOL for m in messages)
        if done >= len(self.plan):
            return ChatMessage(role=MessageRole.ASSISTANT, content="Done.")
        name, args = self.plan[done]
        assert name in offered, (name, offered)  # a model only calls what it is offered
        block = ToolCallBlock(tool_call_id=f"call-{done}", tool_name=name, tool_kwargs=args)
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])


def test_llama_index_sanitises_names_as_the_specs_say(tools: list[FunctionTool]) -> None:
    """The rule the agent maps back: LlamaIndex's own (checked, not assumed)."""
    assert {t.metadata.name: model_name(t) for t in tools} == {n: s[1] for n, s in SPECS.items()}


@pytest.mark.parametrize("streaming", [False, True])
async def test_the_agent_maps_sanitised_calls_back_to_its_tools(
    tools: list[FunctionTool], retriever: ToolRetriever, streaming: bool
) -> None:
    model = ScriptedModel(PLAN)
    agent = DTDRFunctionAgent.from_tools(
        tools,
        retriever,
        k=K,
        llm=MockFunctionCallingLLM(response_generator=model, is_chat_model=True),
        streaming=streaming,
    )
    handler = agent.run(user_msg=QUERY)
    result = await handler
    called = ["météo du jour", "calendar.add event", "Übersetzen text"]
    assert [c.tool_name for c in result.tool_calls] == called
    outputs = [json.loads(str(c.tool_output.content)) for c in result.tool_calls]
    assert not any(c.tool_output.is_error for c in result.tool_calls)
    assert [o["tool"] for o in outputs] == called  # the right function ran
    assert [o["args"] for o in outputs] == [args for _, args in PLAN]
    records = await handler.ctx.store.get(RECORDS_KEY)
    assert [r["history"] for r in records] == [called[:i] for i in range(len(called) + 1)]
    assert not any(r["widened"] for r in records)  # every call was seen as a bound tool
    for record, offered in zip(records, model.offered, strict=True):
        expected = select(
            retriever.rank(QUERY, tuple(record["history"])), SelectionPolicy(k=K, threshold=0.0)
        )
        assert sorted(record["bound"]) == sorted(expected.names)
        assert offered == [SPECS[n][1] for n in record["bound"]]  # bound, under model names


async def test_a_static_tool_with_a_space_is_mapped_too(
    tools: list[FunctionTool], retriever: ToolRetriever
) -> None:
    def note(text: str = "") -> str:
        return f"noted: {text}"

    static = FunctionTool.from_defaults(fn=note, name="take note", description="Take a note.")
    model = ScriptedModel([("take_note", {"text": "buy bread"})])
    agent = DTDRFunctionAgent(
        tool_retriever=DTDRObjectRetriever(tools, retriever, k=K),
        tools=[static],
        llm=MockFunctionCallingLLM(response_generator=model, is_chat_model=True),
    )
    result = await agent.run(user_msg=QUERY)
    assert [c.tool_name for c in result.tool_calls] == ["take note"]
    assert str(result.tool_calls[0].tool_output.content) == "noted: buy bread"


def test_names_that_sanitise_alike_are_refused(
    tools: list[FunctionTool], retriever: ToolRetriever
) -> None:
    clash = FunctionTool.from_defaults(fn=lambda: "x", name="web.search", description="Also.")
    clashing = r"'web\.search' and 'web search' both reach the model as 'web_search'"
    with pytest.raises(InvalidToolError, match=clashing):
        DTDRFunctionAgent(
            tool_retriever=DTDRObjectRetriever(tools, retriever, k=K),
            tools=[clash],
            llm=MockFunctionCallingLLM(),
        )


async def test_openai_like_over_http_calls_the_sanitised_names(
    tools: list[FunctionTool], retriever: ToolRetriever, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LlamaIndex's OpenAI client sends the sanitised names; the calls still reach the tools."""
    pytest.importorskip("llama_index.llms.openai_like")
    from llama_index.llms.openai_like import OpenAILike
    from openai_server import OpenAIChatServer, clear_proxies, history_of, tool_names

    clear_proxies(monkeypatch)

    def responder(body: dict[str, Any]) -> dict[str, Any]:
        _, history = history_of(body)
        if len(history) >= len(PLAN):
            return {"content": "Done."}
        name, args = PLAN[len(history)]
        return {"tool_calls": [{"name": name, "arguments": args}]}

    with OpenAIChatServer(responder) as srv:
        llm = OpenAILike(
            model="test-model",
            api_base=srv.base_url,
            api_key="test",
            is_chat_model=True,
            is_function_calling_model=True,
            max_retries=0,
            timeout=30,
        )
        agent = DTDRFunctionAgent.from_tools(tools, retriever, k=K, llm=llm)
        handler = agent.run(user_msg=QUERY)
        result = await handler
        bodies = srv.requests
    called = ["météo du jour", "calendar.add event", "Übersetzen text"]
    assert [c.tool_name for c in result.tool_calls] == called
    assert [json.loads(str(c.tool_output.content))["tool"] for c in result.tool_calls] == called
    records = await handler.ctx.store.get(RECORDS_KEY)
    assert [tool_names(b) for b in bodies] == [[SPECS[n][1] for n in r["bound"]] for r in records]
    assert [history_of(b)[1] for b in bodies] == [[s for s, _ in PLAN[:i]] for i in range(4)]


# ------------------------------------------------------------- fit with LlamaIndex tools
def test_tool_from_any_reads_a_llama_index_tool(tools: list[FunctionTool]) -> None:
    tool = Tool.from_any(tools[0])
    assert tool.name == "météo du jour"
    assert tool.description == "Weather forecast for a city today."
    assert tool.parameters == tools[0].metadata.get_parameters_dict()
    assert tool.parameters["properties"]["city"]["type"] == "string"
    assert Toolset(tools).names == tuple(SPECS)


def test_fit_accepts_llama_index_tools_and_ranks_them(retriever: ToolRetriever) -> None:
    assert retriever.tools_.names == tuple(SPECS)
    top = [r.name for r in retriever.rank("weather forecast for Bergen", ()).top(2)]
    assert top[0] == "météo du jour"
    schema = retriever.tools_.get("calendar.add event")
    assert schema is not None
    assert set(schema.parameters["properties"]) == {"city", "title", "text"}
    assert schema.parameters["properties"]["title"] == {
        "default": "",
        "title": "Title",
        "type": "string",
    }
