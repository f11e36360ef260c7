"""`SelectionPolicy.max_schema_tokens`: a budget on the bound tools' schema tokens."""

from __future__ import annotations

import dataclasses

import pytest
from langchain_core.tools import BaseTool

from dtdr_agents.foundation.selection import SelectionPolicy
from dtdr_agents.runtime import StepSelector
from dtdr_agents.runtime.prompting import get_token_counter, tool_schema_tokens
from langchain_dtdr.testing import DemoSetup, ScriptedChatModel, demo_setup, langchain_tools
from langgraph_dtdr import create_dtdr_agent

K = 5
BASE = SelectionPolicy(threshold=None)  # the 5 best tools, zero-probability ones included


@pytest.fixture(scope="module")
def demo() -> DemoSetup:
    return demo_setup("dtdr-c", encoder="tfidf")


@pytest.fixture(scope="module")
def tools(demo: DemoSetup) -> list[BaseTool]:
    return langchain_tools(demo.tools)


def tokens_of(demo: DemoSetup, names: tuple[str, ...]) -> int:
    counter = get_token_counter()
    tools = [demo.tools.get(n) for n in names]
    return sum(tool_schema_tokens(t, counter) for t in tools if t is not None)


def test_the_budget_is_checked_when_built() -> None:
    for bad in (0, -5, 1.5, float("nan"), "100"):
        with pytest.raises(ValueError, match=r"SelectionPolicy\.max_schema_tokens"):
            SelectionPolicy(max_schema_tokens=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="binds every tool"):
        SelectionPolicy(mode="soft", max_schema_tokens=100)


def test_the_runtime_binds_the_best_first_prefix_within_budget(demo: DemoSetup) -> None:
    query = demo.test[0].query
    free = StepSelector(demo.tools, demo.retriever, policy=dataclasses.replace(BASE))
    step = free.select(query)
    assert len(step.selection.names) == K
    best = step.selection.names
    per_tool = [free.schema_tokens[n] for n in best]
    budget = sum(per_tool[:2]) + per_tool[2] // 2  # room for the two best, not the third
    policy = dataclasses.replace(BASE, max_schema_tokens=budget)
    capped = StepSelector(demo.tools, demo.retriever, policy=policy).select(query)
    assert capped.selection.names == best[:2]
    assert set(capped.bound) == set(best[:2])
    assert capped.bound_tokens == tokens_of(demo, capped.bound) <= budget
    # the best tool alone over budget: it is still bound (never an empty tool list)
    tiny = dataclasses.replace(BASE, max_schema_tokens=1)
    alone = StepSelector(demo.tools, demo.retriever, policy=tiny).select(query)
    assert alone.bound == best[:1]
    # always_include is bound first and counts against the budget
    extra = next(n for n in demo.tools.names if n not in best)
    with_extra = dataclasses.replace(policy, always_include=(extra,))
    step = StepSelector(demo.tools, demo.retriever, policy=with_extra).select(query)
    assert extra in step.bound
    assert step.bound_tokens <= budget or step.bound == (extra,)
    # the wider re-selection keeps the budget
    wide = StepSelector(demo.tools, demo.retriever, policy=policy).select(query, wide=True)
    assert wide.bound_tokens <= budget


def test_append_restarts_when_the_grown_list_is_over_budget(demo: DemoSetup) -> None:
    request = demo.test[0]
    plain = dataclasses.replace(BASE, cache="append")
    selector = StepSelector(demo.tools, demo.retriever, policy=plain)
    first = selector.select(request.query)
    budget = first.bound_tokens + 1
    policy = dataclasses.replace(plain, max_schema_tokens=budget)
    capped = StepSelector(demo.tools, demo.retriever, policy=policy)
    step, grown = capped.select(request.query), first
    over = 0
    for call in request.calls:
        step = capped.select(request.query, (*step.history, call), previous=step)
        grown = selector.select(request.query, (*grown.history, call), previous=grown)
        over += grown.bound_tokens > budget
        assert step.bound_tokens <= budget or len(step.selection.names) == 1
    assert over  # the plain append list did outgrow the budget


def test_the_langgraph_agent_binds_within_budget(demo: DemoSetup, tools: list[BaseTool]) -> None:
    request = demo.test[0]
    budget = 150
    policy = dataclasses.replace(BASE, max_schema_tokens=budget, widen_on_answer=False)
    model = ScriptedChatModel(responses=["done"])
    graph = create_dtdr_agent(model, tools, demo.retriever, policy=policy).compile()
    state = graph.invoke({"messages": [("user", request.query)]})
    bound = model.bound_tools[0]
    record = state["tool_selections"][0]
    assert tuple(record["bound"]) == bound
    assert record["tokens"]["bound_tools"] == tokens_of(demo, bound)
    assert tokens_of(demo, bound) <= budget or len(bound) == 1
    free = create_dtdr_agent(
        ScriptedChatModel(responses=["done"]),
        tools,
        demo.retriever,
        policy=dataclasses.replace(policy, max_schema_tokens=None),
    ).compile()
    unbounded = free.invoke({"messages": [("user", request.query)]})["tool_selections"][0]
    assert len(unbounded["bound"]) > len(bound)  # the budget did cut the list


def test_the_llama_index_retriever_returns_tools_within_budget(demo: DemoSetup) -> None:
    from llama_index_dtdr import DTDRObjectRetriever
    from llama_index_dtdr.testing import llama_tools

    budget = 150
    policy = dataclasses.replace(BASE, max_schema_tokens=budget)
    retriever = DTDRObjectRetriever(llama_tools(demo.tools), demo.retriever, policy=policy)
    names = tuple(t.metadata.name for t in retriever.retrieve(demo.test[0].query))
    assert names and (tokens_of(demo, names) <= budget or len(names) == 1)
    free = DTDRObjectRetriever(llama_tools(demo.tools), demo.retriever)
    assert len(free.retrieve(demo.test[0].query)) > len(names)


def test_the_end_to_end_protocol_selects_within_budget(demo: DemoSetup) -> None:
    """`ProtocolBuilder.retrieve` applies the policy's schema budget (it raised a ValueError)."""
    from dtdr_agents.evaluation.e2e.protocol import ProtocolBuilder

    counter = get_token_counter()
    free = ProtocolBuilder(demo.train, demo.test[:3], demo.tools, counter=counter, policy=BASE)
    step = free.steps[0]
    best, _ = free.retrieve(demo.retriever, step)
    assert len(best) == K
    per_tool = [free.schema_tokens[n] for n in best]
    budget = sum(per_tool[:2]) + per_tool[2] // 2
    policy = dataclasses.replace(BASE, max_schema_tokens=budget)
    capped = ProtocolBuilder(demo.train, demo.test[:3], demo.tools, counter=counter, policy=policy)
    names, _ = capped.retrieve(demo.retriever, step)
    assert names == best[:2]
