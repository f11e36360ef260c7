"""Integration through real HTTP: a loopback OpenAI chat-completions server (tests/openai_server.py)
driven by the real `openai` client and by `langchain-openai`'s ChatOpenAI inside the graph.

The server follows each request's recorded plan (it calls the next planned tool when it was
offered); the assertions are made on the server side: every request carried exactly the tools
the retriever selects for that step, computed independently with the core `rank` + `select`.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from langchain.agents import create_agent
from langchain_core.tools import BaseTool
from langchain_openai import ChatOpenAI
from loopback import demo, no_proxies, server
from openai_server import OpenAIChatServer, history_of, tool_names

from dtdr_agents.foundation.selection import SelectionPolicy, select
from langchain_dtdr import DTDRMiddleware
from langchain_dtdr.testing import DemoSetup, langchain_tools
from langgraph_dtdr import create_dtdr_agent

K = 3
pytestmark = pytest.mark.usefixtures("no_proxies")
FIXTURES = (demo, no_proxies, server)  # shared fixtures (tests/loopback.py)


@pytest.fixture(scope="module")
def tools(demo: DemoSetup) -> list[BaseTool]:
    return langchain_tools(demo.tools)


def expected_tools(demo: DemoSetup, query: str, history: list[str]) -> list[str]:
    sel = select(demo.retriever.rank(query, tuple(history)), SelectionPolicy(k=K, threshold=0.0))
    return [n for n in demo.tools.names if n in sel.names]


def assert_server_saw_the_selection(
    demo: DemoSetup, requests: list[dict[str, Any]], query: str
) -> None:
    plan = demo.plans()[query]
    assert len(requests) == len(plan) + 1
    for body in requests:
        asked, history = history_of(body)
        assert asked == query
        assert tool_names(body) == expected_tools(demo, query, history)


def test_openai_client_loop_without_langchain(demo: DemoSetup, server: OpenAIChatServer) -> None:
    """The core alone drives a real OpenAI client: rank, select, send only those tools."""
    request = demo.test[0]
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": request.query}]
    history: list[str] = []
    for _ in range(10):  # bounded
        sel = select(
            demo.retriever.rank(request.query, history), SelectionPolicy(k=K, threshold=0.0)
        )
        offered = [t.to_openai() for t in demo.tools if t.name in sel.names]
        reply = (
            client.chat.completions.create(
                model="test-model",
                messages=messages,
                tools=offered,  # type: ignore[arg-type]
            )
            .choices[0]
            .message
        )
        if not reply.tool_calls:
            break
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls:
            history.append(call.function.name)
            json.loads(call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "ok"})
    assert history == list(request.calls)
    assert reply.content and reply.content.startswith("Done:")
    assert_server_saw_the_selection(demo, server.requests, request.query)


@pytest.mark.parametrize("index", [0, 1])
def test_graph_with_chat_openai(
    demo: DemoSetup, tools: list[BaseTool], server: OpenAIChatServer, index: int
) -> None:
    request = demo.test[index]
    llm = ChatOpenAI(model="test-model", base_url=server.base_url, api_key="test", max_retries=0)
    graph = create_dtdr_agent(llm, tools, demo.retriever, k=K).compile()
    state = graph.invoke({"messages": [("user", request.query)]})
    assert state["messages"][-1].content.startswith("Done:")
    assert [m.name for m in state["messages"] if m.type == "tool"] == list(request.calls)
    assert_server_saw_the_selection(demo, server.requests, request.query)
    # the graph's own records agree with what went over the wire
    assert [r["bound"] for r in state["tool_selections"]] == [
        tool_names(b) for b in server.requests
    ]


async def test_graph_streams_through_chat_openai(
    demo: DemoSetup, tools: list[BaseTool], server: OpenAIChatServer
) -> None:
    request = demo.test[2]
    llm = ChatOpenAI(model="test-model", base_url=server.base_url, api_key="test", max_retries=0)
    graph = create_dtdr_agent(llm, tools, demo.retriever, k=K).compile()
    tokens: list[str] = []
    async for mode, chunk in graph.astream(
        {"messages": [("user", request.query)]}, stream_mode=["updates", "messages"]
    ):
        if mode == "messages":
            tokens.append(str(chunk[0].content))
    assert all(body.get("stream") for body in server.requests)  # server-sent events
    assert "".join(tokens).endswith(f"Done: {' -> '.join(request.calls)}.")
    assert_server_saw_the_selection(demo, server.requests, request.query)


def test_create_agent_middleware_with_chat_openai(
    demo: DemoSetup, tools: list[BaseTool], server: OpenAIChatServer
) -> None:
    request = demo.test[1]
    llm = ChatOpenAI(model="test-model", base_url=server.base_url, api_key="test", max_retries=0)
    agent = create_agent(llm, tools, middleware=[DTDRMiddleware(demo.retriever, k=K)])
    state = agent.invoke({"messages": [("user", request.query)]})
    assert state["messages"][-1].content.startswith("Done:")
    assert_server_saw_the_selection(demo, server.requests, request.query)


def test_soft_mode_sends_every_tool_and_the_guidelines(
    demo: DemoSetup, tools: list[BaseTool], server: OpenAIChatServer
) -> None:
    request = demo.test[2]
    llm = ChatOpenAI(model="test-model", base_url=server.base_url, api_key="test", max_retries=0)
    graph = create_dtdr_agent(llm, tools, demo.retriever, k=K, mode="soft_weighted").compile()
    graph.invoke({"messages": [("user", request.query)]})
    for body in server.requests:
        _, history = history_of(body)
        assert tool_names(body) == list(demo.tools.names)
        system = body["messages"][0]
        assert system["role"] == "system" and "Soft Mask guidelines" in system["content"]
        for name in expected_tools(demo, request.query, history):
            assert f"'function': '{name}'" in system["content"]
