"""``mode="set"``: the request's recommended tool set is bound once per turn."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.recommend import Recommendation
from dtdr_agents.retrievers import make_retriever
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.runtime import BINDERS, BindContext, BindingPolicy, StepSelector, resolve_policies


@pytest.fixture(scope="module")
def setup() -> tuple[Any, ToolRetriever]:
    data = make_demo_dataset(200, seed=1)
    model = make_retriever("ptr:qts", encoder="tfidf", folds=2).fit(data.demos, data.tools)
    return data, model


class Counting:
    """Counts `recommend` calls of a retriever (instance attribute override)."""

    def __init__(self, model: ToolRetriever) -> None:
        self.model = model
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.original = model.recommend

    def __enter__(self) -> Counting:
        def recommend(query: str, history: Any = (), **kw: Any) -> Recommendation:
            self.calls.append((query, tuple(history)))
            return self.original(query, history, **kw)

        self.model.recommend = recommend  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        del self.model.recommend


def test_mode_set_is_hard_binding_of_the_recommended_set() -> None:
    _, bind = resolve_policies(mode="set")
    assert bind.mode == "hard" and bind.cache == "set"
    assert "set" in BINDERS
    with pytest.raises(ValueError, match="contradicts"):
        resolve_policies(mode="set", cache="append")


def test_set_is_bound_once_per_turn(setup) -> None:
    data, model = setup
    demo = data.demos[0]
    selector = StepSelector(data.tools, model, binding=BindingPolicy(cache="set"))
    with Counting(model) as counter:
        first = selector.select(demo.query)
        rec = model.recommend(demo.query)
        assert first.bound == rec.names
        inside = [n for n in first.bound][:1]
        second = selector.select(demo.query, inside, previous=first)
        if set(second.selection.names) & set(first.bound):  # the plan has not moved on
            assert second.bound == first.bound
            assert len(counter.calls) == 2  # the first step and our own call above


def _ctx(step: Any, model: ToolRetriever, data: Any, **changes: Any) -> BindContext:
    base = BindContext(
        selected=step.prompt.bound,
        previous=step,
        catalogue=data.tools,
        retriever=model,
        query=step.query,
        history=step.history,
        k=5,
        cap=15,
    )
    return dataclasses.replace(base, **changes)


def test_rerecommends_when_a_call_is_outside_the_set_or_the_plan_moved_on(setup) -> None:
    data, model = setup
    demo = data.demos[0]
    selector = StepSelector(data.tools, model, binding=BindingPolicy(cache="set"))
    first = selector.select(demo.query)
    outside = next(n for n in data.tools.names if n not in first.bound)
    binder = BINDERS["set"]
    with Counting(model) as counter:
        kept = binder(_ctx(first, model, data, history=(first.bound[0],), selected=first.bound))
        assert kept == first.bound and counter.calls == []
        strayed = binder(_ctx(first, model, data, history=(outside,)))
        assert outside in strayed and counter.calls == [(demo.query, (outside,))]
        moved = binder(_ctx(first, model, data, history=(first.bound[0],), selected=(outside,)))
        assert len(counter.calls) == 2 and first.bound[0] in moved
        widened = binder(_ctx(first, model, data, selected=(outside,)))  # same step again
        assert outside in widened and set(first.bound) <= set(widened)


def test_out_of_distribution_binds_the_bounded_selection(setup) -> None:
    data, model = setup
    selector = StepSelector(data.tools, model, binding=BindingPolicy(cache="set"))
    step = selector.select(data.demos[0].query)
    far = Recommendation((), (), fallback=True, reason="far")
    selected = tuple(data.tools.names[:3])  # the step's (bounded) fallback selection
    with Counting(model):
        model.recommend = lambda *a, **k: far  # type: ignore[method-assign]
        bound = BINDERS["set"](_ctx(step, model, data, previous=None, selected=selected))
    assert bound == selected  # never the whole catalogue (SelectionPolicy.fallback_k)


def test_langgraph_agent_binds_the_set_and_rebinds_after_a_stray_call(setup) -> None:
    pytest.importorskip("langgraph")
    from langchain_dtdr.testing import ScriptedChatModel, call_tool, langchain_tools
    from langgraph_dtdr import create_dtdr_agent

    data, model = setup
    demo = data.demos[0]
    rec = model.recommend(demo.query)
    outside = next(n for n in data.tools.names if n not in rec.names)
    chat = ScriptedChatModel(
        responses=[call_tool(rec.names[0]), call_tool(outside), call_tool(outside), "done"]
    )
    graph = create_dtdr_agent(
        chat,
        langchain_tools(data.tools),
        model,
        mode="set",
        binding=None,
    ).compile()
    graph.invoke({"messages": [("user", demo.query)]})
    bound = chat.bound_tools
    assert bound[0] == rec.names  # the recommended set, bound before the first call
    assert bound[1] == rec.names  # still the same set at the next step
    assert outside in bound[2]  # the model strayed: re-recommended and widened
