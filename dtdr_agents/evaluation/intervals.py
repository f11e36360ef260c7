"""Means over seeds with 95% bootstrap intervals over requests, and paired differences.

Every figure of a seeded run is the mean over its seeds of the figure of each seed. Its interval
resamples *requests*, not steps (the steps of one request are not independent): each bootstrap
replicate draws requests with replacement, recomputes the figure of every seed on the drawn
requests, and averages over seeds. When every seed scores the same test requests (a fixed
split), one draw serves all seeds; when each seed draws its own split, each seed is resampled on
its own. A paired difference draws the same requests for both retrievers.

Figures are ratios of per-request sums, so a replicate is exact and vectorised: `tool_mrr` and
`tool_top1` are sums over a request's tool steps divided by its tool steps, and `stop_f1` is
``2 TP / (2 TP + FP + FN)`` over a request's steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from dtdr_agents.evaluation.protocol import EvalResult, ScoredStep

N_BOOTSTRAP = 2000
"""Bootstrap replicates per interval."""

LEVEL = 0.95
"""Coverage of the intervals (percentile bootstrap)."""


def _tool(metric: str) -> Callable[[ScoredStep], tuple[float, float]]:
    def pick(row: ScoredStep) -> tuple[float, float]:
        return (row.tool[metric], 1.0) if row.tool is not None else (0.0, 0.0)

    return pick


def _stop_f1(row: ScoredStep) -> tuple[float, float]:
    if row.stop_gold is None:
        return 0.0, 0.0
    tp = float(bool(row.stop_gold and row.stop_pred))
    fp = float(bool(not row.stop_gold and row.stop_pred))
    fn = float(bool(row.stop_gold and not row.stop_pred))
    return 2 * tp, 2 * tp + fp + fn


RATIO_STATS: dict[str, Callable[[ScoredStep], tuple[float, float]]] = {
    "tool_mrr": _tool("tool_mrr"),
    "tool_top1": _tool("tool_top1"),
    "stop_f1": _stop_f1,
}
"""The figures with intervals: each step's (numerator, denominator) contribution."""


@dataclass(frozen=True)
class Estimate:
    """A figure over seeds: its mean, its interval and the figure of each seed."""

    mean: float
    ci: tuple[float, float]
    per_seed: tuple[float, ...]


def request_sums(result: EvalResult, stat: str, n_requests: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-request (numerator, denominator) sums of `stat` over the result's scored steps."""
    pick = RATIO_STATS[stat]
    num = np.zeros(n_requests)
    den = np.zeros(n_requests)
    for row in result.rows:
        a, b = pick(row)
        num[row.query] += a
        den[row.query] += b
    return num, den


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """The ratio of the sums along the last axis; NaN where the denominator's sum is 0."""
    top, bottom = num.sum(axis=-1), den.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), np.nan)


def _n_requests(runs: Sequence[EvalResult]) -> list[int]:
    return [max((r.query for r in run.rows), default=-1) + 1 for run in runs]


def _draws(sizes: Sequence[int], same_requests: bool, n_boot: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if same_requests and len(set(sizes)) == 1:
        shared = rng.integers(0, sizes[0], size=(n_boot, sizes[0]))
        return [shared for _ in sizes]
    return [rng.integers(0, n, size=(n_boot, n)) for n in sizes]


def _interval(replicates: np.ndarray, level: float) -> tuple[float, float]:
    finite = replicates[np.isfinite(replicates)]
    if not finite.size:
        return (float("nan"), float("nan"))
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(finite, [tail, 100.0 - tail])
    return (float(lo), float(hi))


def _replicates(
    runs: Sequence[Sequence[EvalResult]],
    stat: str,
    sign: Sequence[float],
    *,
    same_requests: bool,
    n_boot: int,
    seed: int,
) -> tuple[list[float], np.ndarray]:
    """Per seed, the signed sum over `runs` of `stat` (point) and of its bootstrap replicates.

    `runs[j][i]` is retriever j's run of seed i; every retriever of a seed is resampled on the
    same requests.
    """
    sizes = _n_requests(runs[0])
    for other in runs[1:]:
        if len(other) != len(runs[0]) or _n_requests(other) != sizes:
            raise ValueError(
                f"a paired difference needs the same seeds and requests: {sizes} and "
                f"{_n_requests(other)} requests per seed"
            )
    draws = _draws(sizes, same_requests, n_boot, seed)
    points: list[float] = []
    reps = np.zeros((len(sizes), n_boot))
    for i, (idx, n) in enumerate(zip(draws, sizes, strict=True)):
        point = 0.0
        for s, per_seed in zip(sign, runs, strict=True):
            num, den = request_sums(per_seed[i], stat, n)
            point += s * float(_ratio(num, den))
            reps[i] += s * _ratio(num[idx], den[idx])
        points.append(point)
    return points, reps


def estimate(
    runs: Sequence[EvalResult],
    stat: str,
    *,
    same_requests: bool,
    n_boot: int = N_BOOTSTRAP,
    level: float = LEVEL,
    seed: int = 0,
) -> Estimate:
    """Mean of `stat` over the seeds' `runs`, with its bootstrap interval over requests."""
    if not runs:
        raise ValueError("estimate needs at least one run")
    points, reps = _replicates(
        [runs], stat, [1.0], same_requests=same_requests, n_boot=n_boot, seed=seed
    )
    return Estimate(float(np.mean(points)), _interval(reps.mean(axis=0), level), tuple(points))


def paired_difference(
    a_runs: Sequence[EvalResult],
    b_runs: Sequence[EvalResult],
    stat: str,
    *,
    same_requests: bool,
    n_boot: int = N_BOOTSTRAP,
    level: float = LEVEL,
    seed: int = 0,
) -> Estimate:
    """`stat` of A minus B (paired: the same seeds and the same resampled requests).

    Raises:
        ValueError: If A and B do not have runs of the same seeds over the same requests.
    """
    if not a_runs:
        raise ValueError("a paired difference needs at least one run")
    points, reps = _replicates(
        [a_runs, b_runs], stat, [1.0, -1.0], same_requests=same_requests, n_boot=n_boot, seed=seed
    )
    return Estimate(float(np.mean(points)), _interval(reps.mean(axis=0), level), tuple(points))


def verdict(diff: Estimate) -> str:
    """The verdict on A - B: "beats" or "loses to" where its interval excludes 0.

    Otherwise "no clear difference".
    """
    lo, hi = diff.ci
    if lo > 0:
        return "beats"
    if hi < 0:
        return "loses to"
    return "no clear difference"


def _sum_arrays(num: ArrayLike, den: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    top = np.asarray(num, dtype=np.float64)
    bottom = np.asarray(den, dtype=np.float64)
    if top.shape != bottom.shape or top.ndim != 1:
        raise ValueError(
            f"per-unit sums need two 1-D arrays of one length, got {top.shape} and {bottom.shape}"
        )
    return top, bottom


def _point(value: np.ndarray) -> float:
    return float(value) if np.isfinite(value) else float("nan")


def unit_ratio_estimate(
    num: ArrayLike,
    den: ArrayLike,
    *,
    n_boot: int = N_BOOTSTRAP,
    level: float = LEVEL,
    seed: int = 0,
) -> Estimate:
    """A ratio of sums over units (e.g. test plans), with its bootstrap interval over units.

    `num[i]` and `den[i]` are unit i's contributions; the figure is ``sum(num) / sum(den)``
    (NaN when the denominator sums to 0) and each replicate draws the units with replacement.
    """
    top, bottom = _sum_arrays(num, den)
    if not top.size:
        return Estimate(float("nan"), (float("nan"), float("nan")), (float("nan"),))
    (idx,) = _draws([top.size], True, n_boot, seed)
    point = _point(_ratio(top, bottom))
    reps = _ratio(top[idx], bottom[idx])
    return Estimate(point, _interval(reps, level), (point,))


def paired_unit_ratio(
    a: tuple[ArrayLike, ArrayLike],
    b: tuple[ArrayLike, ArrayLike],
    *,
    quotient: bool = False,
    n_boot: int = N_BOOTSTRAP,
    level: float = LEVEL,
    seed: int = 0,
) -> Estimate:
    """A's ratio of sums minus B's (or A's over B's, `quotient`), paired over the same units.

    `a` and `b` are (numerators, denominators) per unit, unit i being the same (e.g. the same
    test plan) in both; each replicate draws one set of units for both. Replicates whose value
    is not finite (B's figure 0 in a quotient) are left out of the interval.

    Raises:
        ValueError: If A and B do not have the same number of units.
    """
    a_num, a_den = _sum_arrays(*a)
    b_num, b_den = _sum_arrays(*b)
    if a_num.size != b_num.size:
        raise ValueError(
            f"a paired comparison needs the same units: {a_num.size} and {b_num.size} units"
        )
    if not a_num.size:
        return Estimate(float("nan"), (float("nan"), float("nan")), (float("nan"),))
    (idx,) = _draws([a_num.size], True, n_boot, seed)

    def combine(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        if not quotient:
            return np.asarray(x - y, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(np.where(y != 0, x / np.where(y != 0, y, 1.0), np.nan))

    point = _point(combine(_ratio(a_num, a_den), _ratio(b_num, b_den)))
    reps = combine(_ratio(a_num[idx], a_den[idx]), _ratio(b_num[idx], b_den[idx]))
    return Estimate(point, _interval(reps, level), (point,))
