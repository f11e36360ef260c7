"""The default recommendation of any retriever: its ranking, cut by a set size or a policy."""

from __future__ import annotations

from collections.abc import Sequence

from dtdr_agents.foundation.selection import TOP_K, SelectionPolicy, select
from dtdr_agents.foundation.types import END_OF_PLAN, Ranking
from dtdr_agents.recommend.record import Recommendation, Stage

DEFAULT_POLICY = TOP_K
"""The selection policy a retriever without a set-size model recommends with: the papers'
top-k protocol (`TOP_K`, exactly the 5 best tools); the name is kept for compatibility."""


def policy_name(policy: SelectionPolicy) -> str:
    """A short description of a selection policy, e.g. ``"SelectionPolicy(k=5)"``."""
    parts = []
    for name in ("k", "threshold", "coverage"):
        value = getattr(policy, name)
        if value is not None:
            parts.append(f"{name}={value}")
    if policy.min_k != 1:
        parts.append(f"min_k={policy.min_k}")
    return f"SelectionPolicy({', '.join(parts)})"


def recommend_from_ranking(
    ranking: Ranking,
    *,
    size: int | None = None,
    policy: SelectionPolicy | None = None,
    history: Sequence[str] = (),
    size_source: str = "learned set size",
) -> Recommendation:
    """A `Recommendation` from a ranking: the best `size` tools, or `policy`'s selection.

    Tools already called (`history`) stay in the set: the set is the best `size` tools plus
    the called ones outside them (a call the ranking did not expect widens the set). A ranking
    that fell back (the request looked out of distribution) gives an empty recommendation
    that says why.

    Args:
        ranking: The retriever's ranking for the request.
        size: How many tools to recommend (wins over `policy`).
        policy: The selection policy when no size is given (default `DEFAULT_POLICY`).
        history: Tools already called for this request.
        size_source: How `size` was decided, for `Recommendation.policy`.
    """
    if size is not None and size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    pol = policy or DEFAULT_POLICY
    described = f"{size_source} ({size})" if size is not None else policy_name(pol)
    if ranking.fallback:
        return Recommendation(
            (),
            (),
            fallback=True,
            reason=ranking.fallback_reason or "the request looks out of distribution",
            policy=described,
            explanation={**ranking.explanation, "policy": described},
        )
    called = [h for h in dict.fromkeys(history) if h in ranking.names and h != END_OF_PLAN]
    if size is not None:
        ranked = [n for n in ranking.ranked_names() if n != END_OF_PLAN]
        chosen = [n for n in ranked[:size] if n not in called]
    else:
        chosen = [n for n in select(ranking, pol).names if n not in called]
    names = [*called, *chosen]
    if not names:  # never empty in distribution: the best tool at least
        names = [n for n in ranking.ranked_names() if n != END_OF_PLAN][:1]
    stages: dict[str, Stage] = {n: ("history" if n in called else "ranking") for n in names}
    why = {n: ("already called in this request" if n in called else ranking.why(n)) for n in names}
    return Recommendation(
        tuple(names),
        tuple(ranking.probability(n) for n in names),
        why=why,
        stages=stages,
        policy=described,
        explanation={**ranking.explanation, "policy": described},
    )
