"""Turning a ranking into the set of tools to bind: top-k, threshold, coverage, fallback."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dtdr_agents.foundation.checks import check_number
from dtdr_agents.foundation.errors import UnknownToolError
from dtdr_agents.foundation.types import END_OF_PLAN, Ranking


@dataclass(frozen=True)
class SelectionPolicy:
    """How many of the ranked tools to keep. Criteria combine: the strictest one wins.

    `min_k` never adds zero-probability tools (the retriever saw no evidence for them); set
    `include_zero=False` to drop them from `k` as well.

    Attributes:
        k: Keep at most the `k` best tools.
        threshold: Keep tools whose probability is above this (the DTDR paper's alpha).
        coverage: Keep the smallest prefix whose cumulative probability reaches this.
        min_k: Keep at least this many tools among those with a non-zero probability (so a
            selection can be empty when no tool has any, e.g. when the retriever is certain
            the plan is complete).
        always_include: Names added to every selection (not counted against `k`).
        include_end: Keep the end-of-plan token if it ranks inside the cut (it is never bound
            to a model; callers may use it as a hint that the plan is complete).
        respect_fallback: When the ranking says the query is out of distribution, keep the
            ranking's top `fallback_k` tools instead of applying `k`, `threshold` and
            `coverage` (the retriever's evidence is not to be trusted there).
        fallback_k: How many tools an out-of-distribution selection keeps (the ranking's
            best, which falls back to zero-shot relevance); None keeps every tool.
        max_tools: A hard cap on the selection's size, `always_include` included (for
            example a provider's limit on the tools of one request); None: no cap.
        include_zero: Let `k` (and `coverage`) keep zero-probability tools, in catalogue
            order after the others, e.g. to return exactly `k` documents; False keeps only
            tools with some probability.
    """

    k: int | None = 5
    threshold: float | None = None
    coverage: float | None = None
    min_k: int = 1
    always_include: tuple[str, ...] = ()
    include_end: bool = False
    respect_fallback: bool = True
    include_zero: bool = True
    fallback_k: int | None = 32
    max_tools: int | None = None

    def __post_init__(self) -> None:
        check_number(self.k, "SelectionPolicy.k", low=1, integer=True, optional=True)
        check_number(self.min_k, "SelectionPolicy.min_k", low=0, integer=True)
        check_number(
            self.threshold,
            "SelectionPolicy.threshold",
            low=0,
            high=1,
            high_open=True,
            optional=True,
        )
        check_number(
            self.coverage, "SelectionPolicy.coverage", low=0, high=1, low_open=True, optional=True
        )
        for name in ("fallback_k", "max_tools"):
            check_number(
                getattr(self, name), f"SelectionPolicy.{name}", low=1, integer=True, optional=True
            )
        given: Any = self.always_include
        single = isinstance(given, str | bytes) or not isinstance(given, Iterable)
        names = (given,) if single else tuple(given)
        if single or not all(isinstance(n, str) for n in names):
            raise ValueError(
                "SelectionPolicy.always_include must be a list of tool names, got "
                f"{self.always_include!r:.80}"
            )
        object.__setattr__(self, "always_include", names)


@dataclass(frozen=True)
class Selection:
    """The tools chosen for one step.

    Attributes:
        names: Selected tool names, best first (then `always_include` extras).
        probabilities: The ranking's probability of each selected name.
        fallback: True when the query looked out of distribution, so the ranking's top
            `SelectionPolicy.fallback_k` tools were returned; `reason` says why.
        reason: Why the fallback fired, or None.
        end_probability: The ranking's probability that the plan is complete.
    """

    names: tuple[str, ...]
    probabilities: tuple[float, ...]
    fallback: bool = False
    reason: str | None = None
    end_probability: float = 0.0
    why: dict[str, str] = field(default_factory=dict)


def _cut(probs: np.ndarray, policy: SelectionPolicy) -> int:
    """How many of the sorted probabilities `probs` the policy keeps."""
    positive = int(np.count_nonzero(probs > 0))  # sorted descending: these come first
    n = len(probs) if policy.include_zero else positive
    keep = n
    if policy.k is not None:
        keep = min(keep, policy.k)
    if policy.threshold is not None:
        keep = min(keep, int(np.count_nonzero(probs > policy.threshold)))
    if policy.coverage is not None:
        total = probs.sum()
        cum = np.cumsum(probs) / total if total > 0 else np.ones(n)
        keep = min(keep, int(np.searchsorted(cum, policy.coverage - 1e-12) + 1))
    return max(keep, min(policy.min_k, positive))


def select(ranking: Ranking, policy: SelectionPolicy | None = None) -> Selection:
    """Apply `policy` to `ranking`.

    The end-of-plan token is ranked like a tool but only returned when `include_end` is set;
    `always_include` names must be candidates of the ranking. An out-of-distribution ranking
    keeps its top `fallback_k`; the result never holds more than `max_tools` names.
    """
    policy = policy or SelectionPolicy()
    unknown = [n for n in policy.always_include if n not in ranking.names or n == END_OF_PLAN]
    if unknown:
        raise UnknownToolError(
            f"always_include names tools not in the catalogue: {unknown}", tuple(unknown)
        )
    order = ranking.order
    if not policy.include_end:
        order = order[np.asarray(ranking.names, dtype=object)[order] != END_OF_PLAN]
    sorted_probs = ranking.probabilities[order]
    end_p = ranking.probability(END_OF_PLAN)
    if ranking.fallback and policy.respect_fallback:
        chosen: list[int] = [int(i) for i in order[: policy.fallback_k]]
    else:
        chosen = [int(i) for i in order[: _cut(sorted_probs, policy)]]
    names = [ranking.names[i] for i in chosen]
    extras = [n for n in dict.fromkeys(policy.always_include) if n not in set(names)]
    if policy.max_tools is not None:  # the cap holds always; always_include is kept first
        extras = extras[: policy.max_tools]
        names = names[: max(0, policy.max_tools - len(extras))]
    names += extras
    return Selection(
        names=tuple(names),
        probabilities=tuple(ranking.probability(n) for n in names),
        fallback=ranking.fallback and policy.respect_fallback,
        reason=ranking.fallback_reason if ranking.fallback else None,
        end_probability=end_p,
        why={n: ranking.why(n) for n in names},
    )
