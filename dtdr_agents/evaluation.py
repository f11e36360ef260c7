"""The one evaluation protocol: teacher-forced steps, acceptable next tools, timed ranking.

Every retriever is scored the same way: at each step of a test plan it ranks the tools given
the query and the recorded calls so far (teacher forcing); the step's acceptable tools come from
the plan's dependency edges (or the recorded order); end-of-plan is the last step. Query-only
retrievers rank once per query and reuse that ranking at every step (DTDR paper, Algorithm 7).
Set-valued datasets have one step per query whose acceptable set is the whole tool set; the
end-of-plan token is left out of their rankings (a set has no end to predict).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dtdr_agents.metrics import DEFAULT_KS, group_mean, mean_metrics, step_metrics, tracc
from dtdr_agents.progress import Progress, no_progress
from dtdr_agents.recommend import Recommendation, recommend_from_ranking
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.types import END_OF_PLAN, Demonstration, Ranking, Step, Toolset


class _Prefixer:
    """Ranked-name prefixes long enough for exact metrics, without a Python loop over all tools.

    Every metric looks only at the top `max(ks)` names and at the positions of the acceptable
    ones, so a step needs the ranking up to its last acceptable tool (at least `max(ks)`).
    """

    def __init__(self, min_len: int) -> None:
        self.min_len = min_len
        self._names: tuple[str, ...] | None = None
        self._index: dict[str, int] = {}

    def __call__(self, ranking: Ranking, acceptable: frozenset[str], drop_end: bool) -> list[str]:
        if ranking.names is not self._names:  # retrievers reuse one names tuple across steps
            self._names = ranking.names
            self._index = {name: i for i, name in enumerate(ranking.names)}
        order = ranking.order
        if drop_end:
            order = order[order != self._index[END_OF_PLAN]]
        positions = np.empty(len(ranking.names), dtype=np.int64)
        positions[order] = np.arange(len(order))
        wanted = [self._index[n] for n in acceptable if n in self._index]
        if drop_end:
            wanted = [i for i in wanted if ranking.names[i] != END_OF_PLAN]
        last = int(positions[wanted].max()) + 1 if wanted else len(order)
        return [ranking.names[int(i)] for i in order[: max(last, self.min_len)]]


def recommend_for(retriever: ToolRetriever, query: str) -> Recommendation:
    """`retriever.recommend(query)`, or its default-policy recommendation if it has none."""
    own = getattr(retriever, "recommend", None)
    if callable(own):
        rec = own(query, (), ignore_unknown=True)
        assert isinstance(rec, Recommendation)
        return rec
    return recommend_from_ranking(retriever.rank(query, (), ignore_unknown=True))


def set_metrics(recommended: Sequence[str], relevant: frozenset[str]) -> dict[str, float]:
    """TRACC of the recommended set and its size error ``| |B| - |A| |`` (set-valued data)."""
    return {
        "tracc": tracc(recommended, relevant),
        "size_error": float(abs(len(set(recommended)) - len(relevant))),
    }


def eval_steps(demo: Demonstration, *, set_valued: bool = False) -> list[Step]:
    """The steps a demonstration is scored on."""
    if set_valued:
        return [Step((), frozenset(demo.calls), demo.calls[0] if demo.calls else END_OF_PLAN)]
    return demo.steps()


@dataclass
class EvalResult:
    """Scores of one retriever on one test set.

    Attributes:
        retriever_id: Which retriever.
        metrics: Mean of every per-step metric (`mrr`, `top1`, `f1`, `recall@5`, ...).
        n_queries: Test queries scored.
        n_steps: Steps scored.
        fit_s: Seconds spent in `fit` (None when the retriever came fitted).
        ms_per_step: Mean ranking time per step in milliseconds (query-only retrievers
            spread their one call over the query's steps).
        latency_ms: p50 / p99 / mean of single `rank` calls, in milliseconds.
        by_plan_length: Metrics grouped by the number of calls in the plan.
        by_step: Metrics grouped by step index (0 = first call).
        rows: Per-step rows (query index, step index, plan length, metrics).
        recommend_policy: How the scored recommendations chose their size (set-valued data:
            `tracc` and `size_error` score the recommended set itself).
        recommend_ms: p50 / p99 / mean of single `recommend` calls, in milliseconds.
        error: The error that stopped this retriever, if any (results so far are kept).
    """

    retriever_id: str
    metrics: dict[str, float] = field(default_factory=dict)
    n_queries: int = 0
    n_steps: int = 0
    fit_s: float | None = None
    ms_per_step: float = 0.0
    latency_ms: dict[str, float] = field(default_factory=dict)
    by_plan_length: dict[int, dict[str, float]] = field(default_factory=dict)
    by_step: dict[int, dict[str, float]] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    recommend_policy: str | None = None
    recommend_ms: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    def summary(self) -> dict[str, Any]:
        """The JSON summary: metrics, ms_per_step, fit_s, counts (and error if any)."""
        out: dict[str, Any] = dict(self.metrics)
        out.update(
            {
                "ms_per_step": self.ms_per_step,
                "fit_s": self.fit_s,
                "n_queries": self.n_queries,
                "n_steps": self.n_steps,
                "latency_ms": self.latency_ms,
            }
        )
        if self.recommend_policy is not None:
            out["recommend_policy"] = self.recommend_policy
            out["recommend_ms"] = self.recommend_ms
        if self.error:
            out["error"] = self.error
        return out


def evaluate(
    retriever: ToolRetriever,
    test: Sequence[Demonstration],
    *,
    set_valued: bool = False,
    ks: Sequence[int] = DEFAULT_KS,
    progress: Progress | None = None,
    retriever_id: str | None = None,
) -> EvalResult:
    """Score a fitted retriever on `test` with the teacher-forced protocol.

    A failure on one query stops this retriever but keeps the rows scored so far; the error
    is recorded in the result instead of being raised.
    """
    rid = retriever_id or retriever.retriever_id or type(retriever).__name__
    result = EvalResult(rid)
    wrap = progress or no_progress
    calls_ms: list[float] = []
    rec_ms: list[float] = []
    policies: dict[str, None] = {}
    rank_total = 0.0
    prefix = _Prefixer(max(ks))
    encoder = retriever.encoder_
    if encoder is not None:  # a real agent encodes the request once; warm that cache in batch
        encoder.encode([d.query for d in test])
    try:
        for qi, demo in enumerate(wrap(test, rid, len(test))):
            steps = eval_steps(demo, set_valued=set_valued)
            once: Ranking | None = None
            for si, step in enumerate(steps):
                if once is None or retriever.uses_history:
                    t0 = time.perf_counter()
                    ranking = retriever.rank(demo.query, step.history, ignore_unknown=True)
                    dt = (time.perf_counter() - t0) * 1000.0
                    calls_ms.append(dt)
                    rank_total += dt
                    once = ranking
                ranked = prefix(once, step.acceptable, drop_end=set_valued)
                row = step_metrics(ranked, step.acceptable, ks=ks)
                if set_valued:  # score the recommended set itself: TRACC and size error
                    t0 = time.perf_counter()
                    rec = recommend_for(retriever, demo.query)
                    rec_ms.append((time.perf_counter() - t0) * 1000.0)
                    policies[rec.policy.split(" (")[0]] = None
                    row.update(set_metrics(rec.names, step.acceptable))
                result.rows.append({"query": qi, "step": si, "plan_length": len(demo.calls), **row})
            result.n_queries += 1
    except Exception as exc:  # keep the rows so far; report the failure
        result.error = f"{type(exc).__name__}: {exc} (after {result.n_queries} queries)"
    scored = result.rows
    result.n_steps = len(scored)
    if scored:
        metric_rows = [
            {k: v for k, v in r.items() if k not in ("query", "step", "plan_length")}
            for r in scored
        ]
        result.metrics = mean_metrics(metric_rows)
        result.by_plan_length = dict(
            sorted(group_mean(metric_rows, [r["plan_length"] for r in scored]).items())
        )
        result.by_step = dict(sorted(group_mean(metric_rows, [r["step"] for r in scored]).items()))
        result.ms_per_step = rank_total / len(scored)
    if policies:
        result.recommend_policy = "; ".join(policies)
    if rec_ms:
        result.recommend_ms = _latency(rec_ms)
    if calls_ms:
        arr = np.asarray(calls_ms)
        result.latency_ms = {
            "p50": float(np.percentile(arr, 50)),
            "p99": float(np.percentile(arr, 99)),
            "mean": float(statistics.fmean(calls_ms)),
        }
    return result


def _latency(values_ms: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(values_ms)
    return {
        "p50": float(np.percentile(arr, 50)),
        "p99": float(np.percentile(arr, 99)),
        "mean": float(statistics.fmean(values_ms)),
    }


def fit_and_evaluate(
    retriever: ToolRetriever,
    train: Sequence[Demonstration],
    test: Sequence[Demonstration],
    tools: Toolset,
    **kwargs: Any,
) -> EvalResult:
    """Fit `retriever` on `train` (timed) and `evaluate` it on `test`; failures are recorded."""
    rid = kwargs.get("retriever_id") or retriever.retriever_id or type(retriever).__name__
    t0 = time.perf_counter()
    try:
        retriever.fit(train, tools)
    except Exception as exc:
        return EvalResult(
            rid, fit_s=time.perf_counter() - t0, error=f"fit failed: {type(exc).__name__}: {exc}"
        )
    fit_s = time.perf_counter() - t0
    result = evaluate(retriever, test, **kwargs)
    result.fit_s = fit_s
    return result
