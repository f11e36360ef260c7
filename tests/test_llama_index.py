"""LlamaIndex integration through real HTTP: a `FunctionAgent` with `OpenAILike` talking to the
loopback OpenAI chat-completions server (tests/openai_server.py).

The server plays each request's recorded plan and records every request body; the assertions
are made server-side: each request carried exactly the tools selected for its step, computed
independently with the core `rank` + `select`.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("llama_index.core")
pytest.importorskip("llama_index.llms.openai_like")

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai_like import OpenAILike
from loopback import demo, no_proxies, server
from openai_server import OpenAIChatServer, history_of, tool_names

from dtdr_agents.foundation.errors import InvalidToolError
from dtdr_agents.foundation.selection import SelectionPolicy, select
from dtdr_agents.runtime import BindingPolicy, CatalogueMismatchError, run_report
from langchain_dtdr.testing import DemoSetup
from llama_index_dtdr import RECORDS_KEY, DTDRFunctionAgent, DTDRObjectRetriever
from llama_index_dtdr.testing import llama_tools

K = 3
pytestmark = [
    pytest.mark.usefixtures("no_proxies"),
    # LlamaIndex's workflow inspects the agent's attributes, which pydantic flags as deprecated
    pytest.mark.filterwarnings("ignore::DeprecationWarning:inspect"),
]
FIXTURES = (demo, no_proxies, server)  # shared fixtures (tests/loopback.py)


@pytest.fixture(scope="module")
def tools(demo: DemoSetup) -> list[FunctionTool]:
    return llama_tools(demo.tools)


def llm(server: OpenAIChatServer) -> OpenAILike:
    return OpenAILike(
        model="test-model",
        api_base=server.base_url,
        api_key="test",
        is_chat_model=True,
        is_function_calling_model=True,
        max_retries=0,
        timeout=30,
    )


def expected_tools(demo: DemoSetup, query: str, history: list[str]) -> list[str]:
    sel = select(demo.retriever.rank(query, tuple(history)), SelectionPolicy(k=K, threshold=0.0))
    return [n for n in demo.tools.names if n in sel.names]


@pytest.mark.parametrize("streaming", [True, False])
async def test_function_agent_binds_the_selection_of_every_step(
    demo: DemoSetup, tools: list[FunctionTool], server: OpenAIChatServer, streaming: bool
) -> None:
    request = demo.test[0]
    agent = DTDRFunctionAgent.from_tools(
        tools, demo.retriever, k=K, llm=llm(server), streaming=streaming
    )
    handler = agent.run(user_msg=request.query)
    result = await handler
    assert str(result.response.content).startswith("Done:")
    assert [c.tool_name for c in result.tool_calls] == list(request.calls)
    assert not any(c.tool_output.is_error for c in result.tool_calls)
    requests = server.requests
    assert len(requests) == len(request.calls) + 1
    for body in requests:
        asked, history = history_of(body)
        assert asked == request.query
        assert tool_names(body) == expected_tools(demo, request.query, history)
    records = await handler.ctx.store.get(RECORDS_KEY)
    assert [r["bound"] for r in records] == [tool_names(b) for b in requests]
    report = run_report(records)
    assert report.model_calls == len(requests)
    assert report.bound_tokens == sum(r["tokens"]["bound_tools"] for r in records)


async def test_plain_function_agent_with_the_object_retriever(
    demo: DemoSetup, tools: list[FunctionTool], server: OpenAIChatServer
) -> None:
    """LlamaIndex's own agent passes only the user message: the same tools at every step.

    The tool calls still run: the retriever answers LlamaIndex's look-up by exact tool name.
    """
    request = demo.test[2]
    retriever = DTDRObjectRetriever(tools, demo.retriever, k=K)
    agent = FunctionAgent(tool_retriever=retriever, llm=llm(server))
    result = await agent.run(user_msg=request.query)
    first = expected_tools(demo, request.query, [])
    assert all(tool_names(body) == first for body in server.requests)
    assert result.tool_calls and not any(c.tool_output.is_error for c in result.tool_calls)
    looked_up = retriever.retrieve(request.calls[0])
    assert [t.metadata.name for t in looked_up] == [request.calls[0]]
    assert [t.metadata.name for t in retriever.retrieve(request.query)] == first


async def test_unbound_calls_are_refused_then_stopped(
    demo: DemoSetup, tools: list[FunctionTool]
) -> None:
    request = demo.test[0]
    wide = select(demo.retriever.rank(request.query, ()), SelectionPolicy(k=2 * K))
    stray = next(n for n in reversed(demo.tools.names) if n not in wide.names)

    def stubborn(body: dict[str, Any]) -> dict[str, Any]:
        return {"tool_calls": [{"name": stray, "arguments": {}}]}

    with OpenAIChatServer(stubborn) as srv:
        agent = DTDRFunctionAgent.from_tools(
            tools,
            demo.retriever,
            k=K,
            binding=BindingPolicy(widen_on_answer=False, max_rejections=1),
            llm=llm(srv),
        )
        with pytest.raises(Exception, match="after 1 such calls were rejected"):
            await agent.run(user_msg=request.query)
        bodies = srv.requests
    assert stray not in tool_names(bodies[0])
    assert len(bodies[1]["tools"]) > len(bodies[0]["tools"])  # the one wider re-selection
    refused = [m for body in bodies for m in body["messages"] if m.get("role") == "tool"]
    assert refused and "is not available at this step" in str(refused[0]["content"])


def test_bad_input_fails_at_construction(demo: DemoSetup, tools: list[FunctionTool]) -> None:
    with pytest.raises(InvalidToolError, match="duplicate tool name 'compose_email'"):
        DTDRObjectRetriever([*tools, tools[2]], demo.retriever)
    with pytest.raises(CatalogueMismatchError):
        DTDRObjectRetriever(tools[:5], demo.retriever)
    with pytest.raises(TypeError, match="must be a LlamaIndex tool"):
        DTDRObjectRetriever([*tools, "x"], demo.retriever)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="DTDRObjectRetriever"):
        DTDRFunctionAgent(
            tools=tools, llm=OpenAILike(model="m", api_key="x", is_function_calling_model=True)
        )


def test_no_retriever_means_hybrid_fitted_on_the_tools_alone(
    demo: DemoSetup, tools: list[FunctionTool]
) -> None:
    request = demo.test[2]
    retriever = DTDRObjectRetriever(tools, k=K)
    first = retriever.select(request.query)
    assert first.explanation["method"] == "hybrid" and "zero_shot" in first.explanation
    assert 0 < len(first.bound) <= K + 1
    after = retriever.select(request.query, request.calls[:1], previous=first)
    assert after.history == tuple(request.calls[:1])
