"""Benchmarking tool-set recommendation: TRACC, size error, set-size calibration, latency.

Two protocols on set-valued data (RecTools, MetaTool):

- ``"bench"``: the bench's seeded 70/30 split (`dtdr_agents.datasets.load_train_test`);
- ``"ptr"``: the PTR repository's own, where the first 100 queries of the file are the test
  set and the rest are the history (demonstrations).

Latency is per `recommend` call with the request's embedding cached (the test requests are
encoded once, in batch, before timing), as an agent encodes its request once.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from dtdr_agents.evaluation.metrics import set_recall, tracc
from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.recommend.size import TARGETS

Protocol = Literal["bench", "ptr"]
PTR_TEST_SIZE = 100
"""The PTR code tests the first 100 queries of each file."""

ABLATIONS: dict[str, dict[str, Any]] = {
    "w/o stage 1": {"use_bundles": False},
    "w/o stage 2": {"use_coverage": False},
    "w/o stage 3": {"use_rerank": False},
}
"""PTR's Table 2 ablations as `PTRRecommender` parameters."""


def ptr_protocol_split(
    demos: Sequence[Demonstration], n_test: int = PTR_TEST_SIZE
) -> tuple[list[Demonstration], list[Demonstration]]:
    """(history, test): the first `n_test` demonstrations are the test set (PTR's code)."""
    if not 0 < n_test < len(demos):
        raise ValueError(f"n_test must be in (0, {len(demos)}), got {n_test}")
    return list(demos[n_test:]), list(demos[:n_test])


@dataclass
class RecommendScore:
    """Scores of one retriever's recommendations on a test set.

    Attributes:
        retriever: The retriever id (with the ablation, if any).
        tracc: Mean TRACC of the recommended sets.
        size_error: Mean ``| |B| - |A| |``.
        set_recall: Mean ``|A ∩ B| / |A|`` (TRACC's first factor).
        exact_size: Fraction of requests with ``|B| = |A|``.
        latency_ms: p50 / p99 / mean of one `recommend` call (embedding cached).
        fit_s: Seconds in `fit`.
        policy: How the set sizes were decided.
        calibration: For set-size models: target coverage -> achieved on the test requests.
        n: Test requests.
    """

    retriever: str
    tracc: float = float("nan")
    size_error: float = float("nan")
    set_recall: float = float("nan")
    exact_size: float = float("nan")
    latency_ms: dict[str, float] = field(default_factory=dict)
    fit_s: float = 0.0
    policy: str = ""
    calibration: list[dict[str, float]] = field(default_factory=list)
    n: int = 0


def score_recommendations(model: Any, test: Sequence[Demonstration], name: str) -> RecommendScore:
    """Time and score `model.recommend` on every test request (a fitted retriever)."""
    encoder = getattr(model, "encoder_", None)
    if encoder is not None:
        encoder.encode([d.query for d in test])  # the request's embedding is cached
    traccs, errors, recalls, exact, times = [], [], [], [], []
    policies: dict[str, None] = {}
    for demo in test:
        t0 = time.perf_counter()
        rec = model.recommend(demo.query)
        times.append((time.perf_counter() - t0) * 1000.0)
        truth = frozenset(demo.calls)
        traccs.append(tracc(rec.names, truth))
        recalls.append(set_recall(rec.names, truth))
        errors.append(abs(len(rec.names) - len(truth)))
        exact.append(len(rec.names) == len(truth))
        policies[rec.policy.split(" (")[0]] = None
    arr = np.asarray(times)
    score = RecommendScore(
        name,
        tracc=float(np.mean(traccs)),
        size_error=float(np.mean(errors)),
        set_recall=float(np.mean(recalls)),
        exact_size=float(np.mean(exact)),
        latency_ms={
            "p50": float(np.percentile(arr, 50)),
            "p99": float(np.percentile(arr, 99)),
            "mean": float(statistics.fmean(times)),
        },
        policy="; ".join(policies),
        n=len(test),
    )
    size_distribution = getattr(model, "size_distribution", None)
    if callable(size_distribution):
        dists = np.array([size_distribution(d.query) for d in test])
        sizes = np.array([len(frozenset(d.calls)) for d in test])
        cum = np.cumsum(dists, axis=1)
        for target in TARGETS:
            n_c = np.argmax(cum >= target - 1e-12, axis=1)
            score.calibration.append({"target": target, "achieved": float(np.mean(sizes <= n_c))})
    return score


def run_recommend_bench(
    train: Sequence[Demonstration],
    test: Sequence[Demonstration],
    tools: Toolset,
    retriever_ids: Sequence[str],
    *,
    ablations: bool = False,
    **params: Any,
) -> list[RecommendScore]:
    """Fit each retriever (and PTR's ablations) on `train` and score its recommendations.

    Args:
        train: Demonstrations (the history).
        test: Test requests with their tool sets.
        tools: The catalogue.
        retriever_ids: `make_retriever` ids.
        ablations: Also run PTR's Table 2 ablations for each `ptr` id.
        **params: Passed to `make_retriever` (leniently: e.g. `encoder`, `seed`, `chat_model`).
    """
    from dtdr_agents.retrievers import make_retriever

    out: list[RecommendScore] = []
    for rid in retriever_ids:
        variants: list[tuple[str, dict[str, Any]]] = [(rid, {})]
        if ablations and rid.split(":")[0] == "ptr":
            variants += [(f"{rid} {label}", flags) for label, flags in ABLATIONS.items()]
        for name, flags in variants:
            model = make_retriever(rid, lenient=True, **params, **flags)
            t0 = time.perf_counter()
            model.fit(train, tools)
            fit_s = time.perf_counter() - t0
            score = score_recommendations(model, test, name)
            score.fit_s = fit_s
            out.append(score)
    return out


def format_scores(scores: Sequence[RecommendScore]) -> str:
    """A Markdown table of the scores, then each set-size model's calibration."""
    lines = [
        "| retriever | tracc | size_error | set_recall | exact_size | p50_ms | p99_ms | fit_s "
        "| policy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for s in scores:
        lines.append(
            f"| {s.retriever} | {s.tracc:.3f} | {s.size_error:.3f} | {s.set_recall:.3f} | "
            f"{s.exact_size:.3f} | {s.latency_ms.get('p50', float('nan')):.3f} | "
            f"{s.latency_ms.get('p99', float('nan')):.3f} | {s.fit_s:.1f} | {s.policy} |"
        )
    for s in scores:
        if s.calibration and " w/o " not in s.retriever:  # ablations share the size model
            pairs = "; ".join(
                f"target {c['target']:.2f} -> achieved {c['achieved']:.3f}" for c in s.calibration
            )
            lines.append(f"\nset-size calibration of {s.retriever} on the test requests: {pairs}")
    return "\n".join(lines)
