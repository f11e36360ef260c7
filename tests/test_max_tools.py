"""`SelectionPolicy.max_tools` bounds every bound list; the providers' published presets."""

from __future__ import annotations

import dataclasses

import pytest

from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.selection import PROVIDER_MAX_TOOLS, SelectionPolicy, for_provider
from dtdr_agents.retrievers import make_retriever
from dtdr_agents.runtime import StepSelector


@pytest.fixture(scope="module")
def setup():  # type: ignore[no-untyped-def]
    data = make_demo_dataset(n=120, seed=2)
    return data, make_retriever("dtdr-c", encoder="tfidf").fit(data.demos[:100], data.tools)


def test_presets_are_the_published_limits() -> None:
    assert PROVIDER_MAX_TOOLS == {"openai": 128, "vertexai": 64}
    assert for_provider("openai").max_tools == 128
    assert for_provider("vertexai", k=8, max_tools=10).max_tools == 10
    with pytest.raises(ValueError, match="above openai's limit of 128"):
        for_provider("openai", max_tools=200)
    with pytest.raises(ValueError, match="no max_tools preset for provider 'acme'"):
        for_provider("acme")


def test_no_binder_binds_more_than_max_tools(setup) -> None:  # type: ignore[no-untyped-def]
    data, retriever = setup
    cap = 4
    for cache in ("off", "append", "set"):
        policy = SelectionPolicy(k=4, threshold=None, cache=cache, max_tools=cap, widen_k=8)
        selector = StepSelector(data.tools, retriever, policy=policy)
        for demo in data.demos[100:]:
            previous = None
            for t in range(len(demo.calls) + 1):
                history = list(demo.calls[:t])
                step = selector.select(demo.query, history, previous=previous)
                wide = selector.select(demo.query, history, previous=step, wide=True)
                assert len(step.bound) <= cap and len(wide.bound) <= cap, (cache, step.bound)
                previous = step
    uncapped = SelectionPolicy(k=4, threshold=None, cache="append", widen_k=8)
    grown = StepSelector(data.tools, retriever, policy=uncapped)
    sizes = []
    for demo in data.demos[100:]:
        previous = None
        for t in range(len(demo.calls) + 1):
            previous = grown.select(demo.query, list(demo.calls[:t]), previous=previous)
            sizes.append(len(previous.bound))
    assert max(sizes) > cap  # without the cap the appended list does grow past it


def test_a_mode_that_binds_every_tool_is_refused_over_the_cap(setup) -> None:  # type: ignore[no-untyped-def]
    data, retriever = setup
    policy = dataclasses.replace(SelectionPolicy(mode="soft"), max_tools=10)
    with pytest.raises(
        ValueError, match=r"max_tools is 10 but mode 'soft' binds every tool \(21\)"
    ):
        StepSelector(data.tools, retriever, policy=policy)


def test_the_mcp_proxy_counts_its_meta_tools_against_the_cap() -> None:
    pytest.importorskip("mcp")
    from types import SimpleNamespace

    from mcp_dtdr.names import _META_TOOLS
    from mcp_dtdr.session import _State

    policy = SelectionPolicy(k=4, max_tools=5, always_include=("e",))
    catalogue = SimpleNamespace(selector=SimpleNamespace(policy=policy))
    step = SimpleNamespace(bound=("a", "b", "c", "d"))
    state = _State(catalogue=catalogue, step=step, found=("f",))  # type: ignore[arg-type]
    assert len(_META_TOOLS) == 2
    assert state.exposed() == ("a", "b", "c")  # 3 upstream tools + 2 meta-tools = 5
    free = dataclasses.replace(policy, max_tools=None)
    catalogue.selector.policy = free
    assert state.exposed() == ("a", "b", "c", "d", "e", "f")
