"""Why a tool was ranked where it was, in words: per tool what sets it apart, per ranking the rest.

A ranking's `why(name)` should say what distinguishes that tool (the evidence that raised or
lowered it), and the facts shared by every tool of the ranking (no demonstrations yet, the
stop rule's probability, how many candidates were scored) should be said once, from
`ranking.explanation`. `contribution_words` writes the first, `ranking_words` the second.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

FEATURE_WORDS: Mapping[str, str] = {
    # zero-shot, per tool
    "bm25_norm": "the request's words in its description",
    "bm25_rank": "its rank by the request's words",
    "dense_rel": "its closeness in meaning to the request",
    "dense_rank": "its rank by meaning",
    "unseen": "no demonstration calls it",
    "bm25_norm_unseen": "the request's words, for a tool no demonstration calls",
    "dense_rel_unseen": "its closeness in meaning, for a tool no demonstration calls",
    "log_count": "how often demonstrations call it",
    # zero-shot, against the calls so far
    "spent": "it was called already",
    "request_after_call": "the request counting less once calls are made",
    "open_sub_goal_rank": "its rank for a sub-goal not done yet",
    "graph_rank": "its rank in the tool graph after the last call",
    "artefact_flow": "the files the request names and the calls made give",
    # learned, per tool
    "chain_cluster": "what followed these calls in similar demonstrations",
    "chain_cluster_rare_key": "what followed these calls in a few similar demonstrations",
    "chain_cluster_far": "what followed these calls in demonstrations far from the request",
    "chain_all": "what followed these calls in all demonstrations",
    "chain_all_rare_key": "what followed these calls in a few demonstrations",
    "dtdr_l": "the next-tool classifier",
    "dtdr_l_fine": "the fine next-tool classifier",
    "in_history": "it was called already",
    "last_call_sim": "its closeness to the last call",
    "knn_plan": "the plans of the closest demonstrations",
    "knn_next": "the next call in the closest demonstrations",
    "knn_follow": "what follows the last call in the closest demonstrations",
    # the request's clauses against the calls so far
    "clause_rel": "its match to a clause of the request",
    "clause_open": "its match to a clause not done yet",
    "clause_next": "its match to the next clause",
    # end-of-plan
    "end": "the end-of-plan base rate",
    "end_chain_cluster": "similar demonstrations ending after these calls",
    "end_chain_all": "demonstrations ending after these calls",
    "end_dtdr_l": "the classifier's end-of-plan score",
    "end_dtdr_l_fine": "the fine classifier's end-of-plan score",
    "end_n_calls": "the number of calls made",
    "end_first_step": "no call made yet",
    "end_knn": "the closest demonstrations ending here",
    "end_knn_follow": "the closest demonstrations going on after these calls",
    "end_zero_shot": "the calls made against the sub-goals the request states",
}
"""The hybrid's features (`hybrid_combiner.FEATURES`) as evidence a user can read."""

SUMMARY_WORDS: Mapping[str, str] = {
    "zero_shot": "zero-shot model",
    "stop": "end of plan",
    "candidates": "candidate tools scored",
    "sub_goals": "sub-goals from",
    "cluster": "request cluster",
    "index": "candidate search",
    "candidate_source": "candidates from",
    "top_features": "the top tool's main evidence",
}
"""Ranking-wide explanation keys as words (other keys are shown as ``key: value``)."""


RANK_WORDS: Mapping[str, str] = {
    "bm25_rank": "by the request's words",
    "dense_rank": "by meaning",
    "open_sub_goal_rank": "for a sub-goal not done yet",
}
"""Features that are ``-log(1 + rank)`` of a 0-based rank: shown as the rank, in words."""

UNRANKED_WORDS: Mapping[str, str] = {
    "bm25_rank": "no match by the request's words",
    "dense_rank": "not among the closest in meaning",
    "open_sub_goal_rank": "not a candidate for a sub-goal not done yet",
}
"""A rank feature at the rank given to tools outside its candidate list."""

FIRST_SHOWN = ("dense_rank", "bm25_rank")
"""Ranks said when a tool is first by them: their term is 0 then, so it never shows as one."""


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _term_words(
    feature: str, value: float | None, unranked: int | None, unmatched: Collection[str] = ()
) -> str:
    """One feature as words: its rank where the feature is a rank, else what it measures."""
    if value is not None and feature in RANK_WORDS:
        rank = round(math.expm1(-value))
        if feature in unmatched or (unranked is not None and rank >= unranked):
            return UNRANKED_WORDS[feature]
        return f"ranked {_ordinal(rank + 1)} {RANK_WORDS[feature]}"
    return FEATURE_WORDS.get(feature, feature)


def contribution_words(
    terms: Iterable[tuple[str, float] | tuple[str, float, float]],
    firsts: Iterable[str] = (),
    unranked: int | None = None,
    unmatched: Collection[str] = (),
) -> str:
    """A tool's evidence as words, strongest first, the raw term after each.

    Args:
        terms: (feature, contribution to the tool's score[, the feature's value]) triples;
            zero contributions are left out. With the value, a rank feature reads as the rank.
        firsts: Rank features by which the tool is first (said among what raised it).
        unranked: The rank a rank feature gives tools outside its candidate list (None: none).
        unmatched: Rank features whose ranker did not match the tool at all (said as "no
            match" whatever the rank).

    Returns:
        E.g. ``"raised by ranked 1st by meaning, its rank in the tool graph after the last
        call (graph_rank=+1.39); lowered by ranked 3rd by the request's words
        (bm25_rank=-1.39)"``, or "" with no evidence.
    """
    raised = [f"ranked 1st {RANK_WORDS[f]}" for f in firsts]
    lowered: list[str] = []
    for feature, contribution, *value in sorted(terms, key=lambda t: -abs(t[1])):
        if contribution == 0.0:
            continue
        words = _term_words(feature, value[0] if value else None, unranked, unmatched)
        (raised if contribution > 0 else lowered).append(f"{words} ({feature}={contribution:+.2f})")
    parts = [f"raised by {', '.join(raised)}"] if raised else []
    parts += [f"lowered by {', '.join(lowered)}"] if lowered else []
    return "; ".join(parts)


def tool_words(
    features: Sequence[str],
    values: np.ndarray,
    weights: np.ndarray,
    n_terms: int,
    *,
    unranked: int | None = None,
) -> str:
    """A candidate's `why` from its feature row: its `n_terms` largest contributions in words.

    Args:
        features: The feature names, in column order.
        values: The candidate's feature values.
        weights: The combiner's weights (a contribution is value x weight).
        n_terms: How many contributions to show at most.
        unranked: The rank given to tools outside a rank feature's list (the hybrid's
            `candidates`): said as "no match" rather than as a rank. A tool whose
            `bm25_norm` is 0 (no word of the request) is said so by `bm25_rank` too.
    """
    contrib = np.asarray(values, dtype=np.float64) * weights
    top = [int(j) for j in np.argsort(-np.abs(contrib), kind="stable")[:n_terms]]
    index = {name: j for j, name in enumerate(features)}
    is_end = "end" in index and values[index["end"]] != 0.0  # end-of-plan has no ranks
    firsts = [
        f
        for f in FIRST_SHOWN
        if not is_end and f in index and values[index[f]] == 0.0 and weights[index[f]] > 0.0
    ]
    terms = ((features[j], float(contrib[j]), float(values[j])) for j in top)
    no_words = "bm25_norm" in index and not is_end and values[index["bm25_norm"]] == 0.0
    return contribution_words(terms, firsts, unranked, ("bm25_rank",) if no_words else ())


def ranking_words(explanation: Mapping[str, Any]) -> str:
    """What a ranking's tools share, said once for the ranking.

    E.g. ``"hybrid: zero-shot model (0 demonstrations: nothing to cross-fit); end of plan:
    zero-shot stop rule p=0.119; 4 candidate tools scored; sub-goals from: clauses"``.
    """
    parts: list[str] = []
    for key, value in explanation.items():
        if key == "method":
            continue
        shown = ", ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
        if key == "candidates":
            parts.append(f"{shown} {SUMMARY_WORDS[key]}")
        elif key == "zero_shot":
            parts.append(f"{SUMMARY_WORDS[key]} ({shown})")
        else:
            parts.append(f"{SUMMARY_WORDS.get(key, key)}: {shown}")
    method = explanation.get("method")
    text = "; ".join(parts)
    return f"{method}: {text}" if method and text else str(method or text)


__all__ = [
    "FEATURE_WORDS",
    "FIRST_SHOWN",
    "RANK_WORDS",
    "SUMMARY_WORDS",
    "UNRANKED_WORDS",
    "contribution_words",
    "ranking_words",
    "tool_words",
]
