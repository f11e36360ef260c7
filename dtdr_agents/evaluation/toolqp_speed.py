"""Planning overhead of ToolQP with recorded plans, the LLM and the encoder excluded.

For each request, `measure_overhead` times one cold `ToolQPRetriever.rank` call (no cached
plan): the base retriever ranks the request and each of the plan's queries, then the lists are
fused. The time spent inside the sentence encoder is measured apart and subtracted, and every
text is encoded once beforehand (so those calls are cache hits), so the figure is what planning
adds beyond the encoder: base retrievals (similarities, softmax, sorting) plus fusion.

The plans have `n_queries` queries each: the request's recorded instruction when the dataset
ships one, then clauses of the request and numbered variants, only to give every request the
same number of lists (their wording does not matter for timing).
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

from dtdr_agents.foundation.encoders import Encoder, EncoderWrapper
from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.planning.plan import SOURCE_REPLAY, Plan
from dtdr_agents.planning.planners import ReplayPlanner

_CLAUSE = re.compile(r"[.;,!?]\s+|\band\b|\bthen\b")


class TimedEncoder(EncoderWrapper):
    """Wraps an encoder and adds up the seconds spent in `encode`."""

    def __init__(self, inner: Encoder) -> None:
        super().__init__(inner)
        self.seconds = 0.0
        self.cpu_seconds = 0.0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Encode with the wrapped encoder, timing the call (wall and this thread's CPU)."""
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return self.inner.encode(texts)
        finally:
            self.seconds += time.perf_counter() - t0
            self.cpu_seconds += time.thread_time() - c0


def recorded_queries(request: str, instruction: str | None, n: int) -> tuple[str, ...]:
    """`n` distinct query texts for `request` (see the module docstring)."""
    out: list[str] = []
    if instruction:
        out.append(" ".join(instruction.split()))
    out += [c.strip() for c in _CLAUSE.split(request) if c and len(c.strip()) > 3]
    out = list(dict.fromkeys(out))[:n]
    i = 1
    while len(out) < n:
        out.append(f"{request} (sub-goal {i})")
        i += 1
    return tuple(out)


@dataclass
class OverheadResult:
    """Per-request planning overhead in milliseconds (encoder time subtracted).

    `overhead_ms` is wall-clock time; `cpu_overhead_ms` is the ranking thread's CPU time,
    which other processes on a loaded machine do not inflate.
    """

    overhead_ms: list[float] = field(default_factory=list)
    cpu_overhead_ms: list[float] = field(default_factory=list)
    total_ms: list[float] = field(default_factory=list)
    encoder_ms: list[float] = field(default_factory=list)
    n_tools: int = 0
    n_queries: int = 0
    blas_threads: int | None = None

    @staticmethod
    def _pct(values: Sequence[float], q: float) -> float:
        return float(np.percentile(np.asarray(values), q)) if values else float("nan")

    def summary(self) -> dict[str, Any]:
        """p50 / p99 / mean of the overhead, and p50 of the total and encoder time."""
        return {
            "requests": len(self.overhead_ms),
            "tools": self.n_tools,
            "queries_per_request": self.n_queries,
            "blas_threads": self.blas_threads,
            "overhead_ms": {
                "p50": self._pct(self.overhead_ms, 50),
                "p99": self._pct(self.overhead_ms, 99),
                "mean": statistics.fmean(self.overhead_ms) if self.overhead_ms else float("nan"),
            },
            "cpu_overhead_ms": {
                "p50": self._pct(self.cpu_overhead_ms, 50),
                "p99": self._pct(self.cpu_overhead_ms, 99),
            },
            "total_ms_p50": self._pct(self.total_ms, 50),
            "encoder_ms_p50": self._pct(self.encoder_ms, 50),
        }


def measure_overhead(
    train: Sequence[Demonstration],
    test: Sequence[Demonstration],
    tools: Toolset,
    *,
    base: Any,
    instructions: dict[str, str] | None = None,
    n_queries: int = 5,
    warmup: int = 5,
    fusion: str = "peak",
    blas_threads: int | None = 1,
) -> OverheadResult:
    """Time ToolQP's planning overhead on `test` requests with `n_queries`-query plans.

    Args:
        train: Demonstrations the base is fitted on.
        test: The requests to time (each once, cold).
        tools: The catalogue.
        base: An unfitted base retriever using a sentence encoder (e.g. `QTSRetriever`).
        instructions: Request text -> a recorded instruction, used as the first query.
        n_queries: Recorded queries per request.
        warmup: Requests ranked first and not timed.
        fusion: "peak" or "rrf".
        blas_threads: BLAS threads while timing (None: leave the library's setting). One
            thread is the right setting for one-request latency: a (1 x 384) by (384 x n)
            product gains nothing from threads, and on a loaded machine waiting for a second
            BLAS thread costs milliseconds.

    Returns:
        The per-request figures.
    """
    from dtdr_agents.retrievers.toolqp import ToolQPRetriever

    plans = {}
    for demo in test:
        queries = recorded_queries(demo.query, (instructions or {}).get(demo.query), n_queries)
        plans[demo.query.strip()] = Plan(demo.query.strip(), queries, queries, "", SOURCE_REPLAY)
    model = ToolQPRetriever(base=base, planner=ReplayPlanner(plans), fusion=fusion)  # type: ignore[arg-type]
    model.fit(train, tools)
    inner = base.encoder_
    if inner is None:
        raise ValueError("measure_overhead needs a base retriever with a sentence encoder")
    texts = [t for plan in plans.values() for t in (plan.request, *plan.queries)]
    inner.encode(texts)  # every later encoder call is a cache hit
    timed = TimedEncoder(inner)
    base.encoder_ = timed
    result = OverheadResult(n_tools=len(tools), n_queries=n_queries, blas_threads=blas_threads)
    limits = threadpool_limits(blas_threads, user_api="blas") if blas_threads else nullcontext()
    try:
        with limits:
            for i, demo in enumerate(test):
                timed.seconds = timed.cpu_seconds = 0.0
                t0, c0 = time.perf_counter(), time.thread_time()
                model.rank(demo.query)
                total, cpu = time.perf_counter() - t0, time.thread_time() - c0
                if i < warmup:
                    continue
                result.cpu_overhead_ms.append(max(0.0, cpu - timed.cpu_seconds) * 1000.0)
                result.total_ms.append(total * 1000.0)
                result.encoder_ms.append(timed.seconds * 1000.0)
                result.overhead_ms.append((total - timed.seconds) * 1000.0)
    finally:
        base.encoder_ = inner
    return result


def format_overhead(result: OverheadResult, label: str) -> str:
    """One human-readable block of the figures."""
    s = result.summary()
    o = s["overhead_ms"]
    c = s["cpu_overhead_ms"]
    return (
        f"toolqp planning overhead on {label}: {s['requests']} requests, {s['tools']} tools, "
        f"{s['queries_per_request']} recorded queries per request, LLM excluded, "
        f"BLAS threads {s['blas_threads'] or 'library default'}\n"
        f"  overhead beyond the encoder (base retrievals + fusion): p50 {o['p50']:.3f} ms, "
        f"p99 {o['p99']:.3f} ms, mean {o['mean']:.3f} ms (wall clock)\n"
        f"  same, CPU time of the ranking thread: p50 {c['p50']:.3f} ms, p99 {c['p99']:.3f} ms\n"
        f"  whole rank call p50 {s['total_ms_p50']:.3f} ms, of which encoder (cache hits) "
        f"p50 {s['encoder_ms_p50']:.3f} ms"
    )


__all__ = [
    "OverheadResult",
    "TimedEncoder",
    "format_overhead",
    "measure_overhead",
    "recorded_queries",
]
