"""Property-based tests of selection policies and of history handling."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dtdr_agents import END_OF_PLAN, Ranking, SelectionPolicy, UnknownToolError, select
from dtdr_agents.foundation.selection import DEFAULT, TOP_K
from dtdr_agents.foundation.types import as_history
from dtdr_agents.retrievers.markov import START, history_key

NAMES = tuple(f"t{i}" for i in range(12))


@st.composite
def rankings(draw):
    n = draw(st.integers(min_value=1, max_value=len(NAMES)))
    weights = draw(st.lists(st.floats(0.0, 1.0), min_size=n + 1, max_size=n + 1))
    p = np.asarray(weights) + 1e-9
    return Ranking((*NAMES[:n], END_OF_PLAN), p / p.sum())


policies = st.builds(
    SelectionPolicy,
    k=st.one_of(st.none(), st.integers(1, 15)),
    threshold=st.one_of(st.none(), st.floats(0.0, 0.99)),
    coverage=st.one_of(st.none(), st.floats(0.01, 1.0)),
    min_k=st.integers(0, 3),
    include_end=st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(rankings(), policies)
def test_selection_invariants(ranking, policy):
    chosen = select(ranking, policy)
    names = chosen.names
    assert len(set(names)) == len(names)
    assert set(names) <= set(ranking.names)
    if not policy.include_end:
        assert END_OF_PLAN not in names
    candidates = len(ranking.names) - (0 if policy.include_end else 1)
    # at least min_k tools with probability, never above k (unless min_k asks for more)
    assert len(names) >= min(policy.min_k, candidates)  # all probabilities here are > 0
    if policy.k is not None:
        assert len(names) <= max(policy.k, policy.min_k)
    probs = [ranking.probability(n) for n in names]
    assert probs == sorted(probs, reverse=True)
    # every unselected candidate is no more probable than every selected one
    rest = [n for n in ranking.names if n not in names and (policy.include_end or n != END_OF_PLAN)]
    if names and rest:
        assert max(ranking.probability(n) for n in rest) <= min(probs) + 1e-12
    if policy.threshold is not None and len(names) > policy.min_k:
        assert all(p > policy.threshold for p in probs)
    if policy.coverage is not None and (policy.k is None or len(names) < policy.k):
        pool = [
            ranking.probability(n) for n in ranking.names if policy.include_end or n != END_OF_PLAN
        ]
        share = sum(probs) / sum(pool)
        threshold_cut = policy.threshold is not None and len(names) < candidates
        assert share >= policy.coverage - 1e-9 or threshold_cut or len(names) == candidates


@settings(max_examples=100, deadline=None)
@given(rankings(), st.lists(st.sampled_from(NAMES[:1]), max_size=1), st.integers(1, 3))
def test_always_include_is_added_once(ranking, extra, k):
    chosen = select(ranking, SelectionPolicy(k=k, always_include=tuple(extra)))
    for name in extra:
        assert chosen.names.count(name) == 1


def test_always_include_must_be_in_catalogue():
    ranking = Ranking(("a", END_OF_PLAN), np.array([0.5, 0.5]))
    with pytest.raises(UnknownToolError, match="zz"):
        select(ranking, SelectionPolicy(always_include=("zz",)))


def test_fallback_returns_the_top_fallback_k_tools_and_says_why():
    ranking = Ranking(
        ("a", "b", "c", END_OF_PLAN),
        np.array([0.7, 0.2, 0.05, 0.05]),
        fallback=True,
        fallback_reason="far",
    )
    chosen = select(ranking, SelectionPolicy(k=1))
    assert chosen.names == ("a", "b", "c") and chosen.fallback and chosen.reason == "far"
    assert select(ranking, SelectionPolicy(k=1, fallback_k=2)).names == ("a", "b")
    assert select(ranking, SelectionPolicy(k=1, respect_fallback=False)).names == ("a",)


def _wide_fallback(n: int = 10_000) -> Ranking:
    names = tuple(f"tool_{i:05d}" for i in range(n))
    probs = np.random.default_rng(0).random(n + 1)
    return Ranking((*names, END_OF_PLAN), probs / probs.sum(), fallback=True, fallback_reason="far")


def test_an_out_of_distribution_request_never_exposes_the_whole_catalogue():
    ranking = _wide_fallback()
    chosen = select(ranking, SelectionPolicy(k=5))
    assert len(chosen.names) == 32 and chosen.fallback  # fallback_k's default
    best = [n for n in ranking.ranked_names() if n != END_OF_PLAN][:32]
    assert list(chosen.names) == best  # the ranking's best, not catalogue order
    assert len(select(ranking, SelectionPolicy(k=5, fallback_k=None)).names) == 10_000


def test_max_tools_caps_every_selection_always_include_first():
    ranking = _wide_fallback(200)
    extra = ("tool_00007", "tool_00008")
    capped = select(ranking, SelectionPolicy(k=50, max_tools=10, always_include=extra))
    assert len(capped.names) == 10 and capped.names[-2:] == extra
    capped = select(ranking, SelectionPolicy(k=50, fallback_k=100, max_tools=20))
    assert len(capped.names) == 20
    in_dist = Ranking(ranking.names, ranking.probabilities)
    assert len(select(in_dist, SelectionPolicy(k=50, max_tools=7)).names) == 7
    assert select(in_dist, SelectionPolicy(k=3, max_tools=1, always_include=extra)).names == (
        extra[0],
    )


def test_coverage_is_smallest_prefix_reaching_p():
    ranking = Ranking(("a", "b", "c", END_OF_PLAN), np.array([0.5, 0.3, 0.2, 0.0]))
    assert select(ranking, SelectionPolicy(k=None, coverage=0.8)).names == ("a", "b")
    assert select(ranking, SelectionPolicy(k=None, coverage=0.81)).names == ("a", "b", "c")
    assert select(ranking, SelectionPolicy(k=None, threshold=0.25)).names == ("a", "b")


@pytest.mark.parametrize(
    "bad",
    [
        {"k": 0},
        {"threshold": 1.5},
        {"coverage": 0.0},
        {"min_k": -1},
        {"fallback_k": 0},
        {"max_tools": 0},
        {"fallback_k": 2.5},
    ],
)
def test_bad_policy_names_the_field(bad):
    field = next(iter(bad))
    with pytest.raises(ValueError, match=field):
        SelectionPolicy(**bad)


@given(st.lists(st.integers(0, 20), max_size=10), st.integers(1, 6))
def test_history_key_is_last_n_left_padded(history, order):
    key = history_key(history, order)
    assert len(key) == order
    real = [k for k in key if k != START]
    assert real == history[-order:] if history else real == []
    assert key[: order - len(real)] == (START,) * (order - len(real))


@given(st.lists(st.text(alphabet="abc_", min_size=1, max_size=5), max_size=6))
def test_as_history_round_trips_comma_strings(names):
    assert as_history(",".join(names)) == tuple(n.strip() for n in names if n.strip())
    assert as_history(names) == tuple(names)
    assert as_history(None) == ()


def test_min_k_does_not_pad_with_zero_probability_tools():
    ranking = Ranking(("a", "b", END_OF_PLAN), np.array([0.0, 0.0, 1.0]))
    assert select(ranking, SelectionPolicy(k=None, threshold=0.5, min_k=1)).names == ()
    assert select(ranking, SelectionPolicy(k=3, min_k=1, include_zero=False)).names == ()
    ranking = Ranking(("a", "b", END_OF_PLAN), np.array([0.2, 0.0, 0.8]))
    assert select(ranking, SelectionPolicy(k=None, threshold=0.5, min_k=2)).names == ("a",)


def test_include_zero_returns_exactly_k():
    ranking = Ranking(("a", "b", "c", END_OF_PLAN), np.array([0.6, 0.0, 0.0, 0.4]))
    top_k = SelectionPolicy(k=2, threshold=None)
    assert select(ranking, dataclasses.replace(top_k, include_zero=False)).names == ("a",)
    assert select(ranking, top_k).names == ("a", "b")
    assert select(ranking, dataclasses.replace(TOP_K, k=2)).names == ("a", "b")


def test_the_one_default_binds_nothing_without_evidence():
    """`SelectionPolicy()` is every stack's default: zero-probability tools are never kept."""
    from dtdr_agents.recommend import DEFAULT_POLICY as RECOMMEND_TOP_K
    from dtdr_agents.runtime import DEFAULT_POLICY

    ranking = Ranking(("a", "b", "c", END_OF_PLAN), np.array([0.6, 0.0, 0.0, 0.4]))
    assert DEFAULT_POLICY == SelectionPolicy() == DEFAULT
    assert select(ranking).names == select(ranking, SelectionPolicy()).names == ("a",)
    assert RECOMMEND_TOP_K == TOP_K != DEFAULT  # a named protocol, not a second default
