"""Fallbacks that do what they say (issue 41, item 5): `rank`'s output, ``cache="append"``."""

from __future__ import annotations

import json

import pytest

from dtdr_agents.cli import main
from dtdr_agents.foundation.selection import SelectionPolicy
from dtdr_agents.runtime import StepSelector
from langchain_dtdr.testing import DemoSetup, demo_setup

OOD = "qwxz vbnm plokij zzyqx"  # no word of the TF-IDF vocabulary: DTDR-C falls back


@pytest.fixture(scope="module")
def demo() -> DemoSetup:
    return demo_setup("dtdr-c", encoder="tfidf")


@pytest.mark.parametrize("cache_cap", [64, 200])
def test_append_never_binds_more_than_fallback_k_out_of_distribution(
    demo: DemoSetup, cache_cap: int
) -> None:
    fallback_k = 4
    policy = SelectionPolicy(k=3, fallback_k=fallback_k, cache="append", cache_cap=cache_cap)
    selector = StepSelector(demo.tools, demo.retriever, policy=policy)
    plan = demo.test[0].calls
    step = selector.select(OOD)
    assert step.selection.fallback and len(step.bound) == 4
    union = set(step.bound)
    for t in range(1, len(plan) + 1):
        step = selector.select(OOD, plan[:t], previous=step)
        assert step.selection.fallback
        assert len(step.bound) <= fallback_k, (t, step.bound)
        union |= set(step.selection.names)
    assert len(union) > fallback_k  # the steps' selections differ: a grown list would


def test_append_still_grows_in_distribution(demo: DemoSetup) -> None:
    policy = SelectionPolicy(k=3, fallback_k=4, cache="append", cache_cap=64)
    selector = StepSelector(demo.tools, demo.retriever, policy=policy)
    request = demo.test[0]
    step = selector.select(request.query)
    sizes = [len(step.bound)]
    for t in range(1, len(request.calls) + 1):
        step = selector.select(request.query, request.calls[:t], previous=step)
        assert step.prefix_kept
        sizes.append(len(step.bound))
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory, demo: DemoSetup) -> str:
    folder = tmp_path_factory.mktemp("rank") / "model"
    demo.retriever.save(folder)
    return str(folder)


def test_rank_json_says_exactly_what_is_selected(model: str, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["rank", "--model", model, "--query", OOD, "-k", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fallback"] and out["selected_by"] == "fallback_k"
    assert len(out["selected"]) == 21  # fallback_k (32) is above the 21 tools: every tool
    assert [r["name"] for r in out["ranking"]] == out["selected"]


def test_rank_text_says_exactly_what_is_selected(model: str, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["rank", "--model", model, "--query", OOD, "-k", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "offer all tools" not in lines[0]
    assert lines[0].startswith("note: out of distribution (") and "best 21 tools" in lines[0]
    assert len(lines) == 1 + 21  # the note, then one line per selected tool


def test_rank_in_distribution_is_the_top_k(model: str, demo: DemoSetup, capsys) -> None:  # type: ignore[no-untyped-def]
    query = demo.test[0].query
    assert main(["rank", "--model", model, "--query", query, "-k", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not out["fallback"] and out["selected_by"] == "k"
    assert len(out["ranking"]) == len(out["selected"]) == 3
