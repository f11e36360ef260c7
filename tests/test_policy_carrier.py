"""Issue 21 item 2: one carrier of selection settings, one default, one unbound-call guard."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool

from dtdr_agents.foundation.selection import SelectionPolicy, select
from dtdr_agents.recommend import DEFAULT_POLICY as RECOMMEND_DEFAULT
from dtdr_agents.runtime import (
    DEFAULT_POLICY,
    BindingPolicy,
    StepSelector,
    UnboundToolCallError,
    guard,
    rejection_text,
    resolve_policies,
    resolve_policy,
)
from dtdr_agents.runtime.guard import Reply, check_unbound, refusal
from langchain_dtdr import DTDRMiddleware, DTDRRetriever
from langchain_dtdr.testing import DemoSetup, ScriptedChatModel, call_tool, demo_setup
from langchain_dtdr.testing import langchain_tools as lc_tools
from langgraph_dtdr import create_dtdr_agent

K = 3


@pytest.fixture(scope="module")
def demo() -> DemoSetup:
    return demo_setup("dtdr-c", encoder="tfidf")


@pytest.fixture(scope="module")
def tools(demo: DemoSetup) -> list[BaseTool]:
    return lc_tools(demo.tools)


# ------------------------------------------------------------------------------ validation
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"threshold": float("nan")}, "threshold"),
        ({"threshold": -0.1}, "threshold"),
        ({"threshold": 1.5}, "threshold"),
        ({"coverage": float("nan")}, "coverage"),
        ({"coverage": 1.01}, "coverage"),
        ({"coverage": -1.0}, "coverage"),
        ({"k": -1}, "k"),
        ({"k": 2.0}, "k"),
        ({"min_k": -1}, "min_k"),
        ({"fallback_k": 0}, "fallback_k"),
        ({"max_tools": -3}, "max_tools"),
        ({"cache_cap": 0}, "cache_cap"),
        ({"widen_k": "4"}, "widen_k"),
        ({"k": 4, "widen_k": 2}, "widen_k"),
        ({"max_rejections": -1}, "max_rejections"),
        ({"mode": "loose"}, "mode"),
        ({"cache": "forever"}, "cache"),
        ({"on_unbound": "skip"}, "on_unbound"),
        ({"widen_on_answer": "yes"}, "widen_on_answer"),
        ({"include_zero": None}, "include_zero"),
        ({"always_include": "web_search"}, "always_include"),
    ],
)
def test_a_bad_value_is_a_value_error_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=rf"SelectionPolicy\.{field}"):
        SelectionPolicy(**kwargs)


def test_the_carrier_is_frozen_and_holds_every_setting() -> None:
    policy = SelectionPolicy(
        k=2, threshold=0.1, mode="soft", cache="append", widen_k=4, on_unbound="allow"
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.k = 3  # type: ignore[misc]
    names = {f.name for f in dataclasses.fields(SelectionPolicy)}
    assert set(BindingPolicy.__dataclass_fields__) <= names  # binding settings folded in


# ---------------------------------------------------------------------------- one default
def test_one_default() -> None:
    assert SelectionPolicy() == DEFAULT_POLICY  # select's and every agent's default
    # the papers' top-k protocol (e2e, recommend, `rank`) is named, not a second default
    assert dataclasses.replace(SelectionPolicy(), threshold=None) == RECOMMEND_DEFAULT
    assert resolve_policy() is DEFAULT_POLICY
    assert resolve_policy(k=4) == dataclasses.replace(DEFAULT_POLICY, k=4)


def test_every_stack_passes_the_policy_through_unchanged(
    demo: DemoSetup, tools: list[BaseTool]
) -> None:
    from llama_index_dtdr import DTDRObjectRetriever
    from llama_index_dtdr.testing import llama_tools
    from mcp_dtdr.proxy import ProxyConfig

    policy = SelectionPolicy(k=2, threshold=0.05, cache="append", widen_k=3, on_unbound="allow")
    model = ScriptedChatModel(responses=["ok", "ok"])
    graph = create_dtdr_agent(model, tools, demo.retriever, policy=policy).compile()
    state = graph.invoke({"messages": [("user", demo.test[0].query)]})
    record = state["tool_selections"][0]
    assert (record["k"], record["cache"]["mode"]) == (2, "append")
    assert DTDRMiddleware(demo.retriever, policy=policy).policy is policy
    docs = DTDRRetriever(retriever=demo.retriever, policy=policy)
    assert docs.policy is policy
    assert [d.id for d in docs.invoke(demo.test[0].query)] == list(
        select(demo.retriever.rank(demo.test[0].query, ()), policy).names
    )
    llama = DTDRObjectRetriever(llama_tools(demo.tools), demo.retriever, policy=policy)
    assert llama.selector.policy is policy
    assert ProxyConfig(policy=policy).policy is policy
    assert StepSelector(demo.tools, demo.retriever, policy=policy).policy is policy


# -------------------------------------------------------------------------------- shims
def test_binding_policy_and_binding_keyword_warn_and_still_work(demo: DemoSetup) -> None:
    with pytest.warns(DeprecationWarning, match="BindingPolicy is deprecated"):
        binding = BindingPolicy(mode="soft", on_unbound="raise")
    with pytest.warns(DeprecationWarning, match="binding= is deprecated"):
        policy = resolve_policy(SelectionPolicy(k=2), binding=binding)
    assert (policy.k, policy.mode, policy.on_unbound) == (2, "soft", "raise")
    with pytest.warns(DeprecationWarning, match="resolve_policies is deprecated"):
        sel, bind = resolve_policies(mode="set")
    assert sel is bind and (bind.mode, bind.cache) == ("hard", "set")
    with pytest.warns(DeprecationWarning, match=r"StepSelector\(binding=\.\.\.\)"):
        selector = StepSelector(demo.tools, demo.retriever, binding=binding)
    assert selector.policy == dataclasses.replace(DEFAULT_POLICY, mode="soft", on_unbound="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ValueError, match=r"binding\.mode='soft' contradicts"):
            resolve_policy(SelectionPolicy(mode="hard_weighted"), binding=binding)
        with pytest.raises(ValueError, match=r"SelectionPolicy\.widen_k"):
            BindingPolicy(widen_k=0)


# -------------------------------------------------------------------------- one guard
def test_the_guard() -> None:
    assert refusal("reject", "a", ("b",)) == rejection_text("a", ("b",))
    assert refusal("reject", "b", ("b",)) is None
    assert refusal("reject", "a", None) is None  # no step selected yet
    assert refusal("allow", "a", ("b",)) is None
    stray = Reply(calls=("a",))
    check_unbound(SelectionPolicy(on_unbound="allow"), ("b",), stray, 99)
    check_unbound(SelectionPolicy(max_rejections=2), ("b",), stray, 1)
    with pytest.raises(UnboundToolCallError, match="after 2 such calls"):
        check_unbound(SelectionPolicy(max_rejections=2), ("b",), stray, 2)
    with pytest.raises(UnboundToolCallError, match=r"not bound at this step: \['a'\]"):
        check_unbound(SelectionPolicy(on_unbound="raise"), ("b",), stray, 0)


def test_every_stack_rejects_through_the_one_guard(
    demo: DemoSetup, tools: list[BaseTool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The LangGraph tool node, the middleware and the LlamaIndex agent answer with its text."""
    from llama_index_dtdr import DTDRObjectRetriever
    from llama_index_dtdr.testing import llama_tools

    monkeypatch.setattr(guard, "rejection_text", lambda name, bound: f"GUARD {name} {len(bound)}")
    request = demo.test[0]
    policy = SelectionPolicy(k=K, widen_on_answer=False, widen_on_unbound=False)
    texts = []
    model = ScriptedChatModel(responses=[call_tool("web_search"), "ok"])
    graph = create_dtdr_agent(model, tools, demo.retriever, policy=policy).compile()
    state = graph.invoke({"messages": [("user", request.query)]})
    texts.append(next(m for m in state["messages"] if isinstance(m, ToolMessage)).content)
    model = ScriptedChatModel(responses=[call_tool("web_search"), "ok"])
    middleware = DTDRMiddleware(demo.retriever, policy=policy)
    state = create_agent(model, tools, middleware=[middleware]).invoke(
        {"messages": [("user", request.query)]}
    )
    texts.append(next(m for m in state["messages"] if isinstance(m, ToolMessage)).content)
    llama = DTDRObjectRetriever(llama_tools(demo.tools), demo.retriever, policy=policy)
    bound = llama.select(request.query).bound
    texts.append(llama.selector.refusal("web_search", bound))
    assert "web_search" not in bound
    assert texts == [f"GUARD web_search {len(bound)}"] * 3


def test_select_default_is_the_one_default(demo: DemoSetup) -> None:
    ranking = demo.retriever.rank(demo.test[0].query, ())
    assert select(ranking) == select(ranking, SelectionPolicy())
