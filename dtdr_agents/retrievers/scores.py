"""What a retriever's scoring returns, and the small numeric helpers every retriever shares.

`Scores` (probabilities over the fitted labels and why), `ExplainedRanking` (a `Ranking` whose
`why(name)` leads with that tool's own features), the softmax and the parameter checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from dtdr_agents.foundation.checks import check_number
from dtdr_agents.foundation.errors import ModelLoadError
from dtdr_agents.foundation.types import Ranking

PRIOR_TEMPERATURE = 0.05
"""Softmax temperature of the query-similarity prior over cosine similarities."""


@dataclass
class Scores:
    """What a retriever's `_score` returns: probabilities over `labels_` and why.

    Attributes:
        probabilities: One value per fitted label (fit catalogue, then end-of-plan); sums to 1.
            With `over_current`, one value per tool of the current catalogue, then end-of-plan
            (composites, which rank over their base's current catalogue).
        explanation: Method, cluster, Markov key, backoff level, ...
        ood_reason: Why the query looks out of distribution, or None.
        over_current: Whether `probabilities` are over the current catalogue already.
        notes: Per-tool reasons to show in the ranking (`Ranking.why`), in place of the rest.
        tool_why: One tool's own features as short text (its Markov count, its similarity,
            its feature contributions, ...), by its index in `probabilities`; `Ranking.why`
            shows it first, so tools do not all read the same. Called only for the tools
            whose `why` is asked for.
        replaces: Keys of `explanation` that `tool_why` stands in for in `Ranking.why`
            (they describe one tool, e.g. the top one); the explanation keeps them.
    """

    probabilities: np.ndarray
    explanation: dict[str, Any] = field(default_factory=dict)
    ood_reason: str | None = None
    over_current: bool = False
    notes: dict[str, str] = field(default_factory=dict)
    tool_why: Callable[[int], str] | None = None
    replaces: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class ExplainedRanking(Ranking):
    """A `Ranking` whose `why(name)` leads with that tool's own features.

    Attributes:
        tool_why: A tool's own features as text, by its index in `names`.
        replaces: Explanation keys left out of `why` (the own features stand in for them).
    """

    tool_why: Callable[[int], str] | None = field(default=None, repr=False)
    replaces: tuple[str, ...] = ()

    @cached_property
    def _index_of(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.names)}

    def why(self, name: str) -> str:
        """`name`'s probability, its own features, then what the ranking shares."""
        i = self._index_of.get(name)
        if name in self.notes or self.tool_why is None or i is None:
            return super().why(name)
        own = self.tool_why(i)
        skip = {"method", *self.replaces}
        shared = ", ".join(f"{k}={v}" for k, v in self.explanation.items() if k not in skip)
        inside = "; ".join(part for part in (own, shared) if part)
        method = self.explanation.get("method", "retriever")
        return f"{method} p={self.probability(name):.3f}" + (f" ({inside})" if inside else "")


def check_quantile(value: Any, name: str = "ood_quantile") -> None:
    """A quantile parameter is None or a number in (0, 1]."""
    check_number(value, name, low=0.0, high=1.0, low_open=True, optional=True)


def check_threshold(value: Any, name: str, *, upper: float | None) -> None:
    """For `_set_state`: a saved threshold is None or a finite number in [0, upper]."""
    try:
        check_number(value, f"field 'state.{name}'", low=0.0, high=upper, optional=True)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from None


def softmax(x: np.ndarray) -> np.ndarray:
    """Numerically stable softmax over the last axis (float64)."""
    z = np.asarray(x, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    out: np.ndarray = e / e.sum(axis=-1, keepdims=True)
    return out


def with_end(tool_probs: np.ndarray, end_rate: float) -> np.ndarray:
    """Tool probabilities (summing to 1) scaled to `1 - end_rate`, then the end-of-plan rate."""
    return np.append(np.asarray(tool_probs, dtype=np.float64) * (1.0 - end_rate), end_rate)


def score_why(scores: np.ndarray, label: str, fmt: str) -> Callable[[int], str]:
    """`Scores.tool_why` for a per-tool score array (the end-of-plan token has its rate)."""

    def why(i: int) -> str:
        if i >= len(scores):
            return "end-of-plan base rate"
        return f"{label}={scores[i]:{fmt}}"

    return why


def similarity_probabilities(similarities: np.ndarray, temperature: float | None) -> np.ndarray:
    """Turn query-tool similarities into a distribution over the tools.

    Args:
        similarities: One score per tool (cosine similarities, BM25 scores, ...).
        temperature: Softmax temperature: `softmax(similarities / temperature)`. None
            normalises the positive part instead, `max(s, 0) / sum(max(s, 0))`, as Algorithm 7
            normalises the retained similarities (uniform when no score is positive).

    Returns:
        Probabilities over the tools (float64, summing to 1).
    """
    s = np.asarray(similarities, dtype=np.float64)
    if temperature is None:
        w = np.clip(s, 0.0, None)
        total = w.sum()
        if total <= 0.0:
            return np.full(len(s), 1.0 / len(s))
        out: np.ndarray = w / total
        return out
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 or None, got {temperature!r}")
    return softmax(s / temperature)


__all__ = [
    "PRIOR_TEMPERATURE",
    "ExplainedRanking",
    "Scores",
    "check_quantile",
    "check_threshold",
    "score_why",
    "similarity_probabilities",
    "softmax",
    "with_end",
]
