"""Compare retrievers on a dataset: the library behind `dtdr-agents bench`.

Every retriever is fitted on the same demonstrations and scored by the same teacher-forced
protocol (`dtdr_agents.evaluation`). Embeddings are cached on disk between runs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from dtdr_agents.datasets.base import Dataset
from dtdr_agents.encoders import Encoder
from dtdr_agents.evaluation import EvalResult, fit_and_evaluate
from dtdr_agents.retrievers import ToolRetriever, make_retriever
from dtdr_agents.retrievers.registry import unavailable_reason
from dtdr_agents.types import Demonstration


def build_retriever(
    rid: str,
    *,
    encoder: Encoder,
    seed: int,
    dataset: Dataset,
    chat_model: Any = None,
    **context: Any,
) -> tuple[ToolRetriever | None, str | None]:
    """A retriever for `rid` set up for `dataset`, or (None, reason) when it cannot run here.

    The context (encoder, seed, the dataset's tool graph, a chat model, and any `context`
    keywords such as a planner) reaches every retriever of the id's tree that accepts it.
    """
    params: dict[str, Any] = {"encoder": encoder, "seed": seed, **context}
    if dataset.tool_graph:
        params["graph"] = [list(edge) for edge in dataset.tool_graph]
    if chat_model is not None:
        params["chat_model"] = chat_model
    try:
        retriever = make_retriever(rid, lenient=True, **params)
    except ValueError as exc:
        return None, str(exc)
    reason = unavailable_reason(retriever)
    if reason:
        return None, reason
    return retriever, None


def run_bench(
    train: Dataset,
    test: Dataset,
    retriever_ids: Sequence[str],
    *,
    encoder: Encoder,
    seed: int = 0,
    chat_model: Any = None,
    progress: Any = None,
    context: dict[str, Any] | None = None,
) -> tuple[dict[str, EvalResult], dict[str, str]]:
    """Fit and score each retriever; returns (results, skipped id -> reason).

    `context` holds extra constructor keywords for the retrievers that accept them (for
    example a ToolQP planner).
    """
    results: dict[str, EvalResult] = {}
    skipped: dict[str, str] = {}
    for rid in retriever_ids:
        retriever, reason = build_retriever(
            rid, encoder=encoder, seed=seed, dataset=train, chat_model=chat_model, **(context or {})
        )
        if retriever is None:
            skipped[rid] = reason or "unavailable"
            print(f"skipping {rid}: {skipped[rid]}", file=sys.stderr)
            continue
        print(f"fitting {rid} ...", file=sys.stderr)
        results[rid] = fit_and_evaluate(
            retriever,
            train.demos,
            test.demos,
            train.tools,
            set_valued=test.set_valued,
            progress=progress,
            retriever_id=rid,
        )
    return results, skipped


def _mrr(model: ToolRetriever, train: Sequence[Demonstration], test: Dataset) -> float:
    result = fit_and_evaluate(model, train, test.demos, test.tools, set_valued=test.set_valued)
    return float(result.metrics.get("mrr", float("nan")))


ABLATIONS: tuple[str, ...] = ("history_length", "n_clusters", "n_demos")
"""The ablations `run_ablations` can run (`n_demos` is the learning curve)."""

LEARNING_CURVE_SIZES: tuple[int, ...] = (0, 10, 50, 100, 300, 1000, 3000)
"""Demonstration counts of the learning curve (plus all of them)."""


def run_ablations(
    train: Dataset,
    test: Dataset,
    *,
    encoder: Encoder,
    seed: int,
    which: Sequence[str] = ABLATIONS,
) -> dict[str, Any]:
    """MRR of DTDR-C and DTDR-L by history length, clusters and demonstrations (Figure 6).

    The demonstrations ablation (`n_demos`) is also the learning curve (0, 10, 50, 100, 300,
    ..., all) of the zero-shot (`bm25`, `qts`), learned (`dtdr-c`, `dtdr-l-s`) and `hybrid`
    retrievers, on nested seeded random samples of the training split (not its first N: a
    file sorted by plan length, like Seal-Tools' `dev`, would start with one-call plans only).
    `which` picks ablations from `ABLATIONS`.
    """
    from dtdr_agents.retrievers import DTDRC

    unknown = [w for w in which if w not in ABLATIONS]
    if unknown or not which:
        raise ValueError(f"ablations must be among {', '.join(ABLATIONS)}, got {list(which)}")
    demos = list(train.demos)
    n = len(demos)
    out: dict[str, Any] = {key: {} for key in ABLATIONS if key in which}
    if "history_length" in which:
        _history_length_ablation(out, demos, test, encoder, seed)
    if "n_clusters" in which:
        for k in sorted(
            {1, 2, 5, 10, 20, max(1, n // 20), max(1, n // 10), max(1, n // 5), max(1, n // 2)}
        ):
            if k <= n:
                out["n_clusters"][k] = {
                    "dtdr-c": _mrr(DTDRC(n_clusters=k, encoder=encoder, seed=seed), demos, test)
                }
    if "n_demos" in which:
        _learning_curve(out, demos, test, encoder, seed)
    return out


def _history_length_ablation(
    out: dict[str, Any], demos: list[Demonstration], test: Dataset, encoder: Encoder, seed: int
) -> None:
    from dtdr_agents.retrievers import DTDRC, DTDRL

    for length in range(6):
        out["history_length"][length] = {
            "dtdr-c": _mrr(DTDRC(order=length, encoder=encoder, seed=seed), demos, test),
            "dtdr-l-s": _mrr(
                DTDRL(history="structured", history_length=length, encoder=encoder, seed=seed),
                demos,
                test,
            ),
        }
        print(f"ablation history length {length}: {out['history_length'][length]}", file=sys.stderr)


def _learning_curve(
    out: dict[str, Any], demos: list[Demonstration], test: Dataset, encoder: Encoder, seed: int
) -> None:
    from dtdr_agents.retrievers import DTDRC, DTDRL
    from dtdr_agents.retrievers.baselines import BM25Retriever, QTSRetriever
    from dtdr_agents.retrievers.hybrid import HybridRetriever

    n = len(demos)
    order = np.random.default_rng(seed).permutation(n)  # nested samples: 10 within 50 within ...
    for size in sorted({s for s in (*LEARNING_CURVE_SIZES, n) if s <= n}):
        sub = [demos[i] for i in sorted(order[:size])]  # in file order
        row = {"hybrid": _mrr(HybridRetriever(encoder=encoder, seed=seed), sub, test)}
        if size:  # the others need at least one demonstration (end-of-plan rate, training)
            row["bm25"] = _mrr(BM25Retriever(), sub, test)
            row["qts"] = _mrr(QTSRetriever(encoder=encoder), sub, test)
            row["dtdr-c"] = _mrr(DTDRC(encoder=encoder, seed=seed), sub, test)
            row["dtdr-l-s"] = _mrr(
                DTDRL(history="structured", encoder=encoder, seed=seed), sub, test
            )
        out["n_demos"][size] = row
        print(f"ablation demonstrations {size}: {out['n_demos'][size]}", file=sys.stderr)
