"""Compare retrievers on a dataset: the library behind `dtdr-agents bench`.

Every retriever is fitted on the same demonstrations and scored by the same teacher-forced
protocol (`dtdr_agents.evaluation.protocol`). Embeddings are cached on disk between runs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dtdr_agents.datasets.base import Dataset
from dtdr_agents.evaluation.protocol import EvalResult, fit_and_evaluate
from dtdr_agents.foundation.encoders import Encoder
from dtdr_agents.foundation.types import Demonstration
from dtdr_agents.retrievers import ToolRetriever, make_retriever
from dtdr_agents.retrievers.registry import unavailable_reason


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


def _score(model: ToolRetriever, train: Sequence[Demonstration], test: Dataset) -> EvalResult:
    return fit_and_evaluate(model, train, test.demos, test.tools, set_valued=test.set_valued)


ABLATIONS: tuple[str, ...] = ("history_length", "n_clusters", "n_demos")
"""The ablations `run_ablations` can run (`n_demos` is the learning curve)."""

LEARNING_CURVE_SIZES: tuple[int, ...] = (0, 1, 2, 5, 10, 20, 50, 100, 300, 1000, 3000)
"""Demonstration counts of the learning curve (plus all of them)."""


def run_ablations(
    train: Dataset,
    test: Dataset,
    *,
    encoder: Encoder,
    seed: int,
    which: Sequence[str] = ABLATIONS,
) -> dict[str, dict[int, dict[str, EvalResult]]]:
    """DTDR-C and DTDR-L by history length, clusters and demonstrations (Figure 6).

    The demonstrations ablation (`n_demos`) is also the learning curve (0, 1, 2, 5, 10, 20,
    50, 100, 300, ..., all) of the zero-shot (`bm25`, `qts`), learned (`dtdr-c`,
    `dtdr-l-s`) and `hybrid` retrievers, on nested seeded random samples of the training
    split (not its first N: a file sorted by plan length, like Seal-Tools' `dev`, would start
    with one-call plans only).
    `which` picks ablations from `ABLATIONS`.
    """
    from dtdr_agents.retrievers import DTDRC

    unknown = [w for w in which if w not in ABLATIONS]
    if unknown or not which:
        raise ValueError(f"ablations must be among {', '.join(ABLATIONS)}, got {list(which)}")
    demos = list(train.demos)
    n = len(demos)
    out: dict[str, dict[int, dict[str, EvalResult]]] = {
        key: {} for key in ABLATIONS if key in which
    }
    if "history_length" in which:
        _history_length_ablation(out, demos, test, encoder, seed)
    if "n_clusters" in which:
        for k in sorted(
            {1, 2, 5, 10, 20, max(1, n // 20), max(1, n // 10), max(1, n // 5), max(1, n // 2)}
        ):
            if k <= n:
                out["n_clusters"][k] = {
                    "dtdr-c": _score(DTDRC(n_clusters=k, encoder=encoder, seed=seed), demos, test)
                }
    if "n_demos" in which:
        _learning_curve(out, demos, test, encoder, seed)
    return out


def _history_length_ablation(
    out: dict[str, dict[int, dict[str, EvalResult]]],
    demos: list[Demonstration],
    test: Dataset,
    encoder: Encoder,
    seed: int,
) -> None:
    from dtdr_agents.retrievers import DTDRC, DTDRL

    for length in range(6):
        out["history_length"][length] = {
            "dtdr-c": _score(DTDRC(order=length, encoder=encoder, seed=seed), demos, test),
            "dtdr-l-s": _score(
                DTDRL(history="structured", history_length=length, encoder=encoder, seed=seed),
                demos,
                test,
            ),
        }
        _note("history length", length, out["history_length"][length])


def _learning_curve(
    out: dict[str, dict[int, dict[str, EvalResult]]],
    demos: list[Demonstration],
    test: Dataset,
    encoder: Encoder,
    seed: int,
) -> None:
    from dtdr_agents.retrievers import DTDRC, DTDRL
    from dtdr_agents.retrievers.baselines import BM25Retriever, QTSRetriever
    from dtdr_agents.retrievers.hybrid import HybridRetriever

    n = len(demos)
    order = np.random.default_rng(seed).permutation(n)  # nested samples: 10 within 50 within ...
    graph = [list(edge) for edge in test.tool_graph] if test.tool_graph else None  # as bench's
    for size in sorted({s for s in (*LEARNING_CURVE_SIZES, n) if s <= n}):
        sub = [demos[i] for i in sorted(order[:size])]  # in file order
        row: dict[str, EvalResult] = {
            "hybrid": _score(HybridRetriever(encoder=encoder, seed=seed, graph=graph), sub, test)
        }
        # the others fit on none too (query-only natively, learned ones in their zero-shot
        # state), but at 0 the curve keeps to hybrid, as the published curves do;
        # `bench --n-demos 0` scores any retriever on none
        if size:
            row["bm25"] = _score(BM25Retriever(), sub, test)
            row["qts"] = _score(QTSRetriever(encoder=encoder), sub, test)
            row["dtdr-c"] = _score(DTDRC(encoder=encoder, seed=seed), sub, test)
            row["dtdr-l-s"] = _score(
                DTDRL(history="structured", encoder=encoder, seed=seed), sub, test
            )
        out["n_demos"][size] = row
        _note("demonstrations", size, row)


def _note(title: str, x: int, row: Mapping[str, EvalResult]) -> None:
    figures = ", ".join(
        f"{rid} {r.tool_metrics.get('tool_mrr', float('nan')):.3f}" for rid, r in row.items()
    )
    print(f"ablation {title} {x}: tool_mrr {figures}", file=sys.stderr)


@dataclass
class SeededRun:
    """Every seed's results of one bench run.

    Attributes:
        seeds: The seeds, in order.
        runs: Retriever id -> one result per seed (seeds where it was skipped are absent).
        skipped: Retriever id -> why it could not run.
        ablations: One `run_ablations` result per seed (empty without ablations).
        same_requests: Whether every seed scored the same test requests (a fixed split).
        train: The first seed's demonstrations (for the report header).
        test: The first seed's test set.
    """

    seeds: list[int]
    runs: dict[str, list[EvalResult]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    ablations: list[dict[str, dict[int, dict[str, EvalResult]]]] = field(default_factory=list)
    same_requests: bool = True
    train: Dataset | None = None
    test: Dataset | None = None


def run_seeded(
    load: Callable[[int], tuple[Dataset, Dataset]],
    retriever_ids: Sequence[str],
    seeds: Sequence[int],
    *,
    encoder: Encoder,
    ablations: Sequence[str] = (),
    **kwargs: Any,
) -> SeededRun:
    """`run_bench` (and `run_ablations`) once per seed.

    `load(seed)` gives that seed's (demonstrations, test): a drawn split is drawn with the
    seed, a published split is the same for every seed, and then the seed varies the fits
    (k-means, weight initialisation, demonstration order, cross-fit folds). `kwargs` reach
    `run_bench`.
    """
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    out = SeededRun(list(seeds))
    first_queries: list[str] | None = None
    for seed in seeds:
        print(f"seed {seed}", file=sys.stderr)
        train, test = load(seed)
        queries = [d.query for d in test.demos]
        if first_queries is None:
            first_queries, out.train, out.test = queries, train, test
        elif queries != first_queries:
            out.same_requests = False
        results, skipped = run_bench(
            train, test, retriever_ids, encoder=encoder, seed=seed, **kwargs
        )
        for rid, result in results.items():
            out.runs.setdefault(rid, []).append(result)
        out.skipped.update(skipped)
        if ablations:
            out.ablations.append(
                run_ablations(train, test, encoder=encoder, seed=seed, which=ablations)
            )
    return out
