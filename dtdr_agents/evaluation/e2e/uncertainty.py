"""Bootstrap intervals over test plans for the end-to-end figures, and paired comparisons.

Every figure of a (retriever, mode) cell is a ratio of sums over test plans (FSA: right answers
over answers; SR: right plans over fully answered plans; prompt tokens and latency: totals over
steps), so its interval resamples *plans* (the steps of one plan are not independent) with
`dtdr_agents.evaluation.intervals.unit_ratio_estimate`. A comparison of two cells draws the same
plans for both (`paired_unit_ratio`): every cell of a run scores the same test plans.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from dtdr_agents.evaluation.e2e.protocol import NO_RETRIEVER
from dtdr_agents.evaluation.intervals import (
    LEVEL,
    N_BOOTSTRAP,
    Estimate,
    paired_unit_ratio,
    unit_ratio_estimate,
)

FIGURES = (
    "fsa",
    "sr",
    "sr_full",
    "no_call_rate",
    "prompt_tokens",
    "usage_prompt_tokens",
    "latency_ms",
)
"""Figures with an interval: as `summarize` computes them (``latency_ms`` is the mean)."""

BASELINE_CELL = (NO_RETRIEVER, "no_icl")
"""The all-tools, no-ICL cell the retrievers are compared with."""

BM25 = "bm25"
"""The lexical baseline each other retriever is compared with, mode by mode."""

TARGET_RETRIEVER = "hybrid"
"""The retriever of the issue's targets (SR >= 1.5x no-ICL, >= bm25, prompt <= 1/4)."""

SR_RATIO_TARGET = 1.5
PROMPT_RATIO_TARGET = 0.25


def _no_call(row: Mapping[str, Any]) -> bool:
    """An answer that carries no tool call (text, including a text end of plan)."""
    return row["kind"] != "malformed" and int(row.get("n_calls") or 0) == 0


def plan_sums(
    rows: Iterable[Mapping[str, Any]], n_plans: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per test plan, the (numerator, denominator) of every figure in `FIGURES`.

    Args:
        rows: The step rows of one cell (``plan`` in ``range(n_plans)``), parameter filling
            scored (``args``) where it was asked.
        n_plans: Test plans of the run (a plan the cell never asked counts zero everywhere).

    Raises:
        ValueError: For a row whose ``plan`` is outside ``range(n_plans)``.
    """
    sums = {f: (np.zeros(n_plans), np.zeros(n_plans)) for f in FIGURES}
    by_plan: dict[int, list[Mapping[str, Any]]] = {}
    for row in rows:
        plan = int(row["plan"])
        if not 0 <= plan < n_plans:
            raise ValueError(f"step row of plan {plan} is outside the run's {n_plans} test plans")
        by_plan.setdefault(plan, []).append(row)

    def add(figure: str, plan: int, num: float, den: float) -> None:
        sums[figure][0][plan] += num
        sums[figure][1][plan] += den

    for plan, plan_rows in by_plan.items():
        answered = [r for r in plan_rows if r["kind"] != "error"]
        add("fsa", plan, sum(bool(r["correct"]) for r in answered), len(answered))
        add("no_call_rate", plan, sum(_no_call(r) for r in answered), len(answered))
        add("prompt_tokens", plan, sum(int(r["prompt_tokens"]) for r in plan_rows), len(plan_rows))
        usage = [int(r["usage_prompt_tokens"]) for r in answered if r.get("usage_prompt_tokens")]
        add("usage_prompt_tokens", plan, sum(usage), len(usage))
        latency = [float(r["latency_ms"]) for r in answered if r.get("latency_ms") is not None]
        add("latency_ms", plan, sum(latency), len(latency))
        if len(answered) == len(plan_rows):
            add("sr", plan, all(bool(r["correct"]) for r in plan_rows), 1)
            scorable = all(r.get("has_arguments") for r in plan_rows) and not any(
                isinstance(r.get("args"), Mapping) and "error" in r["args"] for r in plan_rows
            )
            if scorable:
                right = all(
                    bool(r["correct"])
                    and (bool(r.get("is_end")) or bool((r.get("args") or {}).get("match")))
                    for r in plan_rows
                )
                add("sr_full", plan, right, 1)
    return sums


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def estimate_json(est: Estimate, units: int) -> dict[str, Any]:
    """An `Estimate` as JSON: ``value``, ``ci`` [lo, hi] (None where undefined), ``plans``."""
    lo, hi = (_finite(v) for v in est.ci)
    return {
        "value": _finite(est.mean),
        "ci": None if lo is None or hi is None else [lo, hi],
        "plans": units,
    }


def cell_intervals(
    rows: Iterable[Mapping[str, Any]],
    n_plans: int,
    *,
    n_boot: int = N_BOOTSTRAP,
    seed: int = 0,
) -> dict[str, Any]:
    """Every figure of one cell with its bootstrap interval over plans.

    Returns:
        Figure -> ``{"value", "ci", "plans"}`` (``plans``: plans that count in the figure),
        plus ``level`` and ``n_boot``.
    """
    out: dict[str, Any] = {"level": LEVEL, "n_boot": n_boot}
    for figure, (num, den) in plan_sums(rows, n_plans).items():
        est = unit_ratio_estimate(num, den, n_boot=n_boot, seed=seed)
        out[figure] = estimate_json(est, int(np.count_nonzero(den)))
    return out


COMPARED = (
    ("fsa_diff", "fsa", False),
    ("sr_diff", "sr", False),
    ("sr_full_diff", "sr_full", False),
    ("sr_ratio", "sr", True),
    ("sr_full_ratio", "sr_full", True),
    ("no_call_rate_diff", "no_call_rate", False),
    ("prompt_tokens_ratio", "prompt_tokens", True),
    ("usage_prompt_tokens_ratio", "usage_prompt_tokens", True),
    ("latency_ms_ratio", "latency_ms", True),
)
"""(name, figure, quotient) of a paired comparison: A - B, or A / B for a quotient."""


def compare_cells(
    a_rows: Iterable[Mapping[str, Any]],
    b_rows: Iterable[Mapping[str, Any]],
    n_plans: int,
    *,
    n_boot: int = N_BOOTSTRAP,
    seed: int = 0,
) -> dict[str, Any]:
    """Cell A against cell B over the same resampled plans: each `COMPARED` figure."""
    a_sums = plan_sums(a_rows, n_plans)
    b_sums = plan_sums(b_rows, n_plans)
    out: dict[str, Any] = {}
    for name, figure, quotient in COMPARED:
        a, b = a_sums[figure], b_sums[figure]
        est = paired_unit_ratio(a, b, quotient=quotient, n_boot=n_boot, seed=seed)
        out[name] = estimate_json(est, int(np.count_nonzero((a[1] > 0) & (b[1] > 0))))
    return out


def compare_counted_prompts(
    a_rows: Iterable[Mapping[str, Any]],
    b_sizes: Iterable[tuple[int, int]],
    n_plans: int,
    *,
    n_boot: int = N_BOOTSTRAP,
    seed: int = 0,
) -> dict[str, Any]:
    """Cell A's prompt tokens over those of a cell B that was counted but never run.

    Args:
        a_rows: The step rows of cell A.
        b_sizes: (plan, prompt tokens) of each of B's steps, counted by the same token counter.
        n_plans: Test plans of the run.
        n_boot: Bootstrap replicates.
        seed: Seed of the resampling (the same as A's other comparisons).

    Returns:
        ``prompt_tokens_ratio`` (A / B over the same resampled plans) and ``counted``, naming
        the figure that is counted rather than measured.
    """
    num, den = np.zeros(n_plans), np.zeros(n_plans)
    for plan, tokens in b_sizes:
        if not 0 <= plan < n_plans:
            raise ValueError(f"counted step of plan {plan} is outside the run's {n_plans} plans")
        num[plan] += tokens
        den[plan] += 1
    a = plan_sums(a_rows, n_plans)["prompt_tokens"]
    est = paired_unit_ratio(a, (num, den), quotient=True, n_boot=n_boot, seed=seed)
    units = int(np.count_nonzero((a[1] > 0) & (den > 0)))
    return {"prompt_tokens_ratio": estimate_json(est, units), "counted": ["prompt_tokens_ratio"]}


def comparison_pairs(
    pairs: Sequence[tuple[str, str]],
) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """The default (A, B) comparisons of a run's cells.

    Every retriever's cell against the no-ICL baseline, and every cell of another retriever
    against `BM25` in the same mode (where the run has that mode for bm25).
    """
    out: list[tuple[tuple[str, str], tuple[str, str]]] = []
    for rid, mode in pairs:
        if rid == NO_RETRIEVER:
            continue
        if BASELINE_CELL in pairs:
            out.append(((rid, mode), BASELINE_CELL))
        if rid != BM25 and (BM25, mode) in pairs:
            out.append(((rid, mode), (BM25, mode)))
    return out


def targets(comparisons: Sequence[Mapping[str, Any]], sr_key: str) -> list[dict[str, Any]]:
    """The issue's targets for `TARGET_RETRIEVER`'s cells, read off the comparisons.

    Args:
        comparisons: The report's comparisons (``a``, ``b``, the `COMPARED` figures, or
            ``skipped``).
        sr_key: ``"sr_full"`` where parameter filling is scored, else ``"sr"``.

    Returns:
        One entry per target: ``cell``, ``target``, ``value``, ``ci``, ``met`` (the point meets
        it; None when it cannot be computed), ``clear`` (the whole interval meets it), or
        ``skipped`` with the reason.
    """
    out: list[dict[str, Any]] = []
    for comp in comparisons:
        a, b = comp["a"], comp["b"]
        if a.split("/")[0] != TARGET_RETRIEVER:
            continue
        checks: list[tuple[str, str, float, bool]] = []
        if b == "/".join(BASELINE_CELL):
            checks.append(
                (
                    f"{sr_key} {a} >= {SR_RATIO_TARGET}x {b}",
                    f"{sr_key}_ratio",
                    SR_RATIO_TARGET,
                    True,
                )
            )
            checks.append(
                (
                    f"prompt tokens {a} <= {PROMPT_RATIO_TARGET} x {b}",
                    "prompt_tokens_ratio",
                    PROMPT_RATIO_TARGET,
                    False,
                )
            )
        elif b.split("/")[0] == BM25:
            checks.append((f"{sr_key} {a} >= {b}", f"{sr_key}_diff", 0.0, True))
        for label, key, bound, at_least in checks:
            entry: dict[str, Any] = {"cell": a, "against": b, "target": label}
            if key in comp.get("counted", ()):
                entry["counted"] = f"{b}'s prompts counted, not sent"
            elif "skipped" in comp:
                entry["skipped"] = comp["skipped"]
                out.append(entry)
                continue
            figure = comp.get(key) or {}
            value, ci = figure.get("value"), figure.get("ci")
            entry.update(figure=key, value=value, ci=ci)
            if value is None:
                entry.update(met=None, clear=None)
            else:
                entry["met"] = value >= bound if at_least else value <= bound
                entry["clear"] = (
                    None if ci is None else (ci[0] >= bound if at_least else ci[1] <= bound)
                )
            out.append(entry)
    return out


__all__ = [
    "BASELINE_CELL",
    "BM25",
    "COMPARED",
    "FIGURES",
    "TARGET_RETRIEVER",
    "cell_intervals",
    "compare_cells",
    "comparison_pairs",
    "estimate_json",
    "plan_sums",
    "targets",
]
