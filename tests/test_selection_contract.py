"""One selection path (issue 41, item 4): every entry point selects what `select` selects.

One `SelectionPolicy` with every field set runs through every entry point (the runtime's
`StepSelector`, the LangChain `DTDRRetriever`, the LangGraph ``select_tools`` node, the
LangChain middleware, LlamaIndex and the MCP proxy's session, in process), at steps in and out
of distribution, and each must return the names `select(ranking, POLICY, schema_tokens=...)`
returns. Adding an entry point is one `EntryPoint` line in `ENTRY_POINTS`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from dtdr_agents.foundation.selection import SelectionPolicy, select
from dtdr_agents.runtime import StepSelector
from dtdr_agents.runtime.prompting import catalogue_schema_tokens, get_token_counter
from langchain_dtdr.testing import DemoSetup, demo_setup

OOD = "qwxz vbnm plokij zzyqx"  # no word of the TF-IDF vocabulary: DTDR-C falls back


def _policy(demo: DemoSetup) -> SelectionPolicy:
    """Every field of `SelectionPolicy` set, the bounds tight enough to bite."""
    return SelectionPolicy(
        k=6,
        threshold=0.001,
        coverage=0.999,
        min_k=1,
        always_include=(demo.tools.names[-1],),
        include_end=False,
        respect_fallback=True,
        include_zero=True,
        fallback_k=1,
        max_tools=3,
        mode="hard",
        cache="off",
        cache_cap=12,
        widen_k=8,
        widen_on_unbound=True,
        widen_on_answer=False,  # the middleware's handler answers: no wider second call
        on_unbound="reject",
        max_rejections=2,
        ignore_unknown_history=True,
        max_schema_tokens=700,
    )


Case = tuple[str, tuple[str, ...]]


@dataclass(frozen=True)
class EntryPoint:
    """A way a user selects tools: `run(demo, policy, query, history)` -> the names bound.

    Attributes:
        name: Shown in the test id.
        run: Selects through the entry point.
        reserved: Slots of `max_tools` the entry point binds tools of its own in.
        needs: A module it needs (skipped without it).
    """

    name: str
    run: Callable[[DemoSetup, SelectionPolicy, str, tuple[str, ...]], Sequence[str]]
    reserved: int = 0
    needs: str | None = None


def _step_selector(demo: DemoSetup, policy: SelectionPolicy, q: str, h: tuple[str, ...]) -> Any:
    return StepSelector(demo.tools, demo.retriever, policy=policy).select(q, h).bound


def _langchain_retriever(demo: DemoSetup, policy: SelectionPolicy, q: str, h: Any) -> Any:
    from langchain_dtdr import DTDRRetriever

    docs = DTDRRetriever(retriever=demo.retriever, policy=policy).invoke(q, history=list(h))
    return [d.metadata["name"] for d in docs]


def _messages(demo: DemoSetup, query: str, history: Sequence[str]) -> list[Any]:
    from langchain_core.messages import HumanMessage, ToolMessage

    from langchain_dtdr.testing import call_tool

    messages: list[Any] = [HumanMessage(query)]
    for i, name in enumerate(history):
        messages.append(call_tool(name, demo.args_for(name), id=f"call_{i}"))
        messages.append(ToolMessage("ok", name=name, tool_call_id=f"call_{i}"))
    return messages


def _langgraph_node(demo: DemoSetup, policy: SelectionPolicy, q: str, h: Any) -> Any:
    from langchain_dtdr.selector import ToolSelector
    from langchain_dtdr.testing import langchain_tools
    from langgraph_dtdr import create_select_tools_node

    node = create_select_tools_node(
        ToolSelector(langchain_tools(demo.tools), demo.retriever, policy=policy)
    )
    return node.invoke({"messages": _messages(demo, q, h)})["selected_tools"]


def _middleware(demo: DemoSetup, policy: SelectionPolicy, q: str, h: Any) -> Any:
    from langchain.agents.middleware import ModelRequest, ModelResponse
    from langchain_core.messages import AIMessage

    from langchain_dtdr import DTDRMiddleware
    from langchain_dtdr.testing import ScriptedChatModel, langchain_tools

    tools = langchain_tools(demo.tools)
    seen: list[list[str]] = []

    def handler(request: ModelRequest[Any]) -> ModelResponse[Any]:
        seen.append([t.name for t in request.tools])  # type: ignore[union-attr]
        return ModelResponse(result=[AIMessage("done")])

    request = ModelRequest(
        model=ScriptedChatModel(responses=["done"]),
        messages=_messages(demo, q, h),
        tools=list(tools),
        state={"messages": []},
    )
    DTDRMiddleware(demo.retriever, policy=policy).wrap_model_call(request, handler)
    return seen[0]


def _llama_index(demo: DemoSetup, policy: SelectionPolicy, q: str, h: Any) -> Any:
    from llama_index_dtdr import DTDRObjectRetriever
    from llama_index_dtdr.testing import llama_tools

    retriever = DTDRObjectRetriever(llama_tools(demo.tools), demo.retriever, policy=policy)
    if not h:  # what a FunctionAgent asks: the tools for the user message
        return [t.metadata.name for t in retriever.retrieve(q)]
    return retriever.select(q, h).bound  # what DTDRFunctionAgent asks after calls


def _mcp_proxy(demo: DemoSetup, policy: SelectionPolicy, q: str, h: Any) -> Any:
    from mcp import types

    from mcp_dtdr.session import ProxyConfig, ProxySession, _selector

    upstream = {
        t.name: types.Tool(name=t.name, description=t.description, input_schema=dict(t.parameters))
        for t in demo.tools
    }
    config = ProxyConfig(policy=policy)
    session = ProxySession(
        _selector(demo.tools, demo.retriever, config, strict=True), upstream, search_k=3
    )
    session.set_task(q)
    for name in h:
        session.record_call(name)
    return session.exposed()


def _pydantic_ai_messages(q: str, h: Sequence[str]) -> list[Any]:
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    messages: list[Any] = [ModelRequest(parts=[UserPromptPart(q)])]
    for i, name in enumerate(h):
        messages.append(ModelResponse(parts=[ToolCallPart(name, {}, tool_call_id=f"c{i}")]))
        messages.append(ModelRequest(parts=[ToolReturnPart(name, "ok", tool_call_id=f"c{i}")]))
    return messages


def _pydantic_ai(demo: DemoSetup, policy: SelectionPolicy, q: str, h: Any) -> Any:
    from pydantic_ai_dtdr import prepare_tools
    from pydantic_ai_dtdr.testing import pydantic_tools

    prepare = prepare_tools(demo.retriever, policy=policy)
    defs = [t.tool_def for t in pydantic_tools(demo.tools)]
    return [d.name for d in prepare.filter(prepare.select(_pydantic_ai_messages(q, h)), defs)]


def _pydantic_ai_search(demo: DemoSetup, policy: SelectionPolicy, q: str, h: Any) -> Any:
    from pydantic_ai_dtdr import search_strategy

    strategy = search_strategy(demo.retriever, policy=policy)
    return strategy.search(_pydantic_ai_messages(q, h), [], demo.tools.names)


def _openai_agents(demo: DemoSetup, policy: SelectionPolicy, q: str, h: Any) -> Any:
    from agents import Agent

    from openai_agents_dtdr import DTDRToolSelection
    from openai_agents_dtdr.testing import agents_tools

    selection = DTDRToolSelection(demo.retriever, policy=policy)
    agent = selection.agent(Agent(name="a", tools=list[Any](agents_tools(demo.tools))))
    calls = [
        {"type": "function_call", "name": n, "call_id": f"c{i}", "arguments": "{}"}
        for i, n in enumerate(h)
    ]
    run = selection.context([{"role": "user", "content": q}, *calls])  # type: ignore[list-item]
    return [t.name for t in agent.tools if t.is_enabled(run, agent)]  # type: ignore[operator,union-attr]


def _openai_agents_mcp(demo: DemoSetup, policy: SelectionPolicy, q: str, h: Any) -> Any:
    from agents import Agent
    from agents.mcp import ToolFilterContext
    from mcp import types

    from openai_agents_dtdr import DTDRToolSelection

    selection = DTDRToolSelection(demo.retriever, policy=policy)
    run = selection.context(q)
    run.calls.extend(h)
    ctx = ToolFilterContext(run_context=run, agent=Agent(name="a"), server_name="s")
    tools = [types.Tool(name=t.name, input_schema=dict(t.parameters)) for t in demo.tools]
    return [t.name for t in tools if selection.tool_filter(ctx, t)]


def _tool_search(demo: DemoSetup, policy: SelectionPolicy, q: str, h: Any) -> Any:
    from dtdr_agents.runtime.tool_search import ToolSearchBackend

    return ToolSearchBackend(demo.retriever, policy=policy).search(q, h)


ENTRY_POINTS: list[EntryPoint] = [
    EntryPoint("StepSelector", _step_selector),
    EntryPoint("DTDRRetriever", _langchain_retriever, needs="langchain_core"),
    EntryPoint("langgraph select_tools", _langgraph_node, needs="langgraph"),
    EntryPoint("DTDRMiddleware", _middleware, needs="langchain"),
    EntryPoint("LlamaIndex", _llama_index, needs="llama_index"),
    EntryPoint("MCP proxy session", _mcp_proxy, reserved=2, needs="mcp"),
    EntryPoint("Pydantic AI prepare_tools", _pydantic_ai, needs="pydantic_ai"),
    EntryPoint("Pydantic AI ToolSearch strategy", _pydantic_ai_search, needs="pydantic_ai"),
    EntryPoint("Agents SDK is_enabled", _openai_agents, needs="agents"),
    EntryPoint("Agents SDK MCP tool_filter", _openai_agents_mcp, needs="agents"),
    EntryPoint("tool-search backend", _tool_search),
]
"""Every entry point; add one line per new stack."""


@pytest.fixture(scope="module")
def demo() -> DemoSetup:
    return demo_setup("dtdr-c", encoder="tfidf")


@pytest.fixture(scope="module")
def cases(demo: DemoSetup) -> list[Case]:
    """Steps in distribution (first step, after calls) and out of distribution."""
    out: list[Case] = []
    for d in demo.test[:4]:
        out += [(d.query, ()), (d.query, tuple(d.calls[:1]))]
    return [*out, (OOD, ()), (OOD, tuple(demo.test[0].calls[:1]))]


def expected(demo: DemoSetup, policy: SelectionPolicy, case: Case, reserved: int = 0) -> set[str]:
    tokens = catalogue_schema_tokens(demo.tools, get_token_counter())
    ranking = demo.retriever.rank(case[0], case[1], ignore_unknown=True)
    return set(select(ranking, policy, schema_tokens=tokens, reserved=reserved).names)


def test_every_field_of_the_policy_shapes_the_selection(demo: DemoSetup, cases: list[Case]) -> None:
    """The contract is not vacuous: removing any bound changes some case's selection."""
    policy = _policy(demo)
    assert demo.retriever.rank(OOD).fallback
    base = [expected(demo, policy, c) for c in cases]
    for change in (
        {"max_schema_tokens": None},
        {"max_tools": None},
        {"fallback_k": 32},
        {"always_include": ()},
        {"k": 2},
    ):
        relaxed = dataclasses.replace(policy, **change)
        assert any(expected(demo, relaxed, c) != b for c, b in zip(cases, base, strict=True)), (
            change
        )


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=lambda e: e.name)
def test_every_entry_point_selects_what_select_selects(
    demo: DemoSetup, cases: list[Case], entry: EntryPoint
) -> None:
    if entry.needs is not None:
        pytest.importorskip(entry.needs)
    policy = _policy(demo)
    for case in cases:
        names = list(entry.run(demo, policy, *case))
        assert len(names) == len(set(names)), (entry.name, case, names)
        assert set(names) == expected(demo, policy, case, entry.reserved), (entry.name, case)


def test_the_langchain_retriever_applies_the_schema_budget(demo: DemoSetup) -> None:
    """The issue's case: k=8 with a budget of 1 token binds one tool everywhere."""
    from langchain_dtdr import DTDRRetriever

    policy = SelectionPolicy(k=8, max_schema_tokens=1)
    query = demo.test[0].query
    docs = DTDRRetriever(retriever=demo.retriever, policy=policy).invoke(query)
    step = StepSelector(demo.tools, demo.retriever, policy=policy).select(query)
    assert len(docs) == len(step.bound) == 1
    assert docs[0].metadata["name"] == step.bound[0]
