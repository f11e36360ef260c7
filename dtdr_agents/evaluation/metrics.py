"""Retrieval metrics for tool rankings, as pure functions on plain data.

Every per-query metric takes a ranking (a sequence of tool names, best first) or a predicted
set, and the collection of relevant (acceptable) tool names, and returns one `float`. Averaging
over queries or steps is separate: see `mean_metrics` and `group_mean`. Nothing is rounded and no
input is modified.

Conventions shared by all functions:

* ``ranked`` must be an ordered sequence (a list or tuple); a `str` or a set is rejected with
  `TypeError`. The top-k list is ``ranked[:k]``. A name that repeats an earlier name keeps its
  slot but earns nothing (it is not a new tool), so the top-k *set* is ``set(ranked[:k])`` and no
  relevant tool is ever counted twice. Retriever rankings never repeat names; the rule only
  matters for hand-built lists such as an LLM's answer.
* ``relevant`` is any iterable of names (duplicates collapse); a bare `str` is rejected with
  `TypeError` because it would be read as a set of characters. An empty ``relevant`` raises
  `ValueError`: every teacher-forced step has at least one acceptable tool (the last step's is
  the end-of-plan token ``"<end_of_plan>"``), so an empty set signals a bug upstream. Relevant
  names that are absent from the ranking simply earn nothing.
* ``k`` must be an integer >= 1 (`TypeError` / `ValueError` naming ``k`` otherwise). A ``k``
  larger than the ranking is allowed: missing slots count as non-relevant, so precision@k keeps
  ``k`` as its denominator (the trec_eval convention).
* Tool names are compared with ``==``; the end-of-plan token is scored like any other name, so a
  ranking should include it as a candidate.

References:
    [DTDR] "Dynamic Tool Dependency Retrieval for Lightweight Function Calling", Section 5
    ("Metrics") and Appendix D (MRR, F1 with k = number of acceptable tools), Table 4 (top-1
    accuracy).
    [TGR] "Tool Graph Retriever", Section 4.1, Eq. (4) (Recall, NDCG, Pass Rate pass@k).
    [ToolQP] "Beyond Single-Shot: Multi-step Tool Retrieval via Query Planning", Section 4.1,
    "Benchmark and Setup" (nDCG@K and Completeness@K = 1[R@K = 1], K = 10).
    [PTR] "Task-Aligned Tool Recommendation", Section 3 and Appendix C (TRACC).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Hashable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TypeVar

__all__ = [
    "completeness_at_k",
    "dcg_at_k",
    "f1_at_k",
    "group_mean",
    "mean_metrics",
    "ndcg_at_k",
    "pass_at_k",
    "precision_at_k",
    "recall_at_k",
    "reciprocal_rank",
    "set_f1",
    "set_precision",
    "set_recall",
    "step_metrics",
    "top1_accuracy",
    "tracc",
]

G = TypeVar("G", bound=Hashable)

DEFAULT_KS: tuple[int, ...] = (5, 10)
"""The cut-offs `step_metrics` reports by default (the @5 / @10 of TGR and ToolQP)."""


# --------------------------------------------------------------------------- validation helpers


def _ranked_list(ranked: Sequence[str]) -> list[str]:
    """Copy `ranked` into a list after checking it is an ordered sequence of names."""
    if isinstance(ranked, str | bytes):
        raise TypeError(
            "ranked must be a sequence of tool names (best first), got a single string "
            f"{ranked!r:.60}; wrap it in a list"
        )
    if isinstance(ranked, AbstractSet | Mapping):
        raise TypeError(
            f"ranked must be an ordered sequence (list or tuple), got {type(ranked).__name__}; "
            "a set has no ranking order"
        )
    return list(ranked)


def _name_set(names: Iterable[str], what: str, *, allow_empty: bool) -> frozenset[str]:
    """Collect `names` into a frozenset, rejecting a bare string and (optionally) emptiness."""
    if isinstance(names, str | bytes):
        raise TypeError(
            f"{what} must be a collection of tool names, got a single string {names!r:.60}; "
            "wrap it in a list or set"
        )
    out = frozenset(names)
    if not out and not allow_empty:
        raise ValueError(
            f"{what} is empty: every step has at least one acceptable tool "
            "(the last step's is the end-of-plan token)"
        )
    return out


def _relevant_set(relevant: Iterable[str]) -> frozenset[str]:
    return _name_set(relevant, "relevant", allow_empty=False)


def _check_k(k: int, name: str = "k") -> int:
    """Return `k` as a plain int after checking it is an integer >= 1."""
    if isinstance(k, bool):
        raise TypeError(f"{name} must be an integer >= 1, got the bool {k!r}")
    try:
        value = operator.index(k)
    except TypeError:
        raise TypeError(f"{name} must be an integer >= 1, got {type(k).__name__} {k!r}") from None
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def _top_k_set(ranked: list[str], k: int) -> set[str]:
    return set(ranked[:k])


def _hits_at_k(ranked: list[str], rel: frozenset[str], k: int) -> int:
    """Number of distinct relevant names among the first `k` entries."""
    return len(_top_k_set(ranked, k) & rel)


def _harmonic(p: float, r: float) -> float:
    """Harmonic mean of two rates, 0.0 when both are 0."""
    return 0.0 if p + r == 0.0 else 2.0 * p * r / (p + r)


# --------------------------------------------------------------------------- ranking metrics


def reciprocal_rank(ranked: Sequence[str], relevant: Iterable[str]) -> float:
    """Reciprocal rank of the first acceptable tool in the ranking.

    This is the per-step term of the Mean Reciprocal Rank of [DTDR], Appendix D ("MRR measures
    the relative ranking of tools"). A step may have several acceptable tools (every call whose
    predecessors in the ground-truth DAG are done); as for Function Selection Accuracy, where a
    selection is correct if it "belongs to the set of acceptable tools", the first acceptable
    tool in the ranking counts, which is the standard multi-relevant MRR. The whole ranking is
    searched (no cut-off). Average over steps with `mean_metrics` to get MRR.

    Args:
        ranked: Tool names, best first.
        relevant: Acceptable tool names for this step (non-empty).

    Returns:
        ``1 / r`` where ``r`` is the 1-based position of the first acceptable name, or 0.0 if no
        acceptable name is ranked.

    Raises:
        TypeError, ValueError: As the module's conventions say for ``ranked`` and ``relevant``.
    """
    items = _ranked_list(ranked)
    rel = _relevant_set(relevant)
    for pos, name in enumerate(items, start=1):
        if name in rel:
            return 1.0 / pos
    return 0.0


def top1_accuracy(ranked: Sequence[str], relevant: Iterable[str]) -> float:
    """Whether the top-ranked tool is acceptable (the "Top-1 tool retrieval accuracy").

    [DTDR], Table 4 reports top-1 retrieval accuracy by plan length; the top-ranked tool counts
    as correct when it belongs to the step's set of acceptable tools, as in the paper's Function
    Selection Accuracy (Appendix D).

    Args:
        ranked: Tool names, best first.
        relevant: Acceptable tool names for this step (non-empty).

    Returns:
        1.0 if ``ranked[0]`` is acceptable, else 0.0 (also 0.0 for an empty ranking).

    Raises:
        TypeError, ValueError: As the module's conventions say for ``ranked`` and ``relevant``.
    """
    items = _ranked_list(ranked)
    rel = _relevant_set(relevant)
    return 1.0 if items and items[0] in rel else 0.0


def precision_at_k(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """Fraction of the top-``k`` slots holding a distinct relevant tool.

    Standard precision@k, the precision half of the F1 of [DTDR], Appendix D. The denominator is
    always ``k``: when the ranking is shorter than ``k`` the missing slots count as
    non-relevant, and a repeated name counts as non-relevant (see the module conventions).

    Args:
        ranked: Tool names, best first.
        relevant: Relevant tool names (non-empty).
        k: Cut-off, an integer >= 1.

    Returns:
        ``|set(ranked[:k]) ∩ relevant| / k``, in [0, 1].

    Raises:
        TypeError, ValueError: As the module's conventions say for ``ranked``, ``relevant``, ``k``.
    """
    kk = _check_k(k)
    return _hits_at_k(_ranked_list(ranked), _relevant_set(relevant), kk) / kk


def recall_at_k(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """Fraction of the relevant tools found in the top ``k``.

    Recall@K as used by [TGR], Section 4.1 (following Qu et al., 2024: "a higher Recall
    demonstrates that more required tools are successfully retrieved"), by [ToolQP] and by
    [PTR], Section 4.1. Relevant names missing from the ranking count as not retrieved.

    Args:
        ranked: Tool names, best first.
        relevant: Relevant tool names (non-empty).
        k: Cut-off, an integer >= 1.

    Returns:
        ``|set(ranked[:k]) ∩ relevant| / |relevant|``, in [0, 1]; non-decreasing in ``k``.

    Raises:
        TypeError, ValueError: As the module's conventions say for ``ranked``, ``relevant``, ``k``.
    """
    kk = _check_k(k)
    rel = _relevant_set(relevant)
    return _hits_at_k(_ranked_list(ranked), rel, kk) / len(rel)


def f1_at_k(ranked: Sequence[str], relevant: Iterable[str], k: int | None = None) -> float:
    """Harmonic mean of precision@k and recall@k, with ``k = |relevant|`` by default.

    [DTDR], Appendix D: "F1 score is the harmonic mean of Precision and Recall and is computed
    considering the top-k highest-scoring tools as retrieved, with k being the number of
    acceptable tools according to the DAG of the ground-truth plan." With that default ``k``
    precision and recall share the denominator, so the value equals both of them (R-precision).

    Args:
        ranked: Tool names, best first.
        relevant: Acceptable tool names (non-empty).
        k: Cut-off, an integer >= 1, or None for ``len(set(relevant))``.

    Returns:
        ``2 P R / (P + R)`` with ``P = precision_at_k`` and ``R = recall_at_k``, or 0.0 when
        no relevant tool is in the top ``k``.

    Raises:
        TypeError: If `ranked` is a string or a set, `relevant` is a string, or `k` is not an
            integer or None.
        ValueError: If `relevant` is empty or ``k < 1``.
    """
    rel = _relevant_set(relevant)
    kk = len(rel) if k is None else _check_k(k)
    hits = _hits_at_k(_ranked_list(ranked), rel, kk)
    return _harmonic(hits / kk, hits / len(rel))


def dcg_at_k(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """Discounted cumulative gain of the top ``k`` with binary gains and a log2 discount.

    ``DCG@k = sum over positions i = 1..k of rel_i / log2(i + 1)``, where ``rel_i`` is 1 if
    the name at position ``i`` is relevant and is not a repeat of an earlier name, else 0.

    Args:
        ranked: Tool names, best first.
        relevant: Relevant tool names (non-empty).
        k: Cut-off, an integer >= 1.

    Returns:
        The (unnormalised) DCG, in ``[0, sum_{i=1..min(k, |relevant|)} 1 / log2(i + 1)]``.

    Raises:
        TypeError, ValueError: As the module's conventions say for ``ranked``, ``relevant``, ``k``.
    """
    kk = _check_k(k)
    rel = _relevant_set(relevant)
    seen: set[str] = set()
    total = 0.0
    for pos, name in enumerate(_ranked_list(ranked)[:kk], start=1):
        if name in rel and name not in seen:
            total += 1.0 / math.log2(pos + 1)
        seen.add(name)
    return total


def _ideal_dcg(n_relevant: int, k: int) -> float:
    return sum(1.0 / math.log2(pos + 1) for pos in range(1, min(k, n_relevant) + 1))


def ndcg_at_k(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """Normalised DCG of the top ``k`` with binary relevance.

    The nDCG@K of [TGR], Section 4.1 (NDCG@5 / @10, following Qu et al., 2024), [ToolQP],
    Section 4.1 (nDCG@10, "the standard IR metric") and [PTR], Section 4.1. None of them
    restates the formula; this is the standard binary-gain form used by their evaluation
    toolkits (BEIR, pytrec_eval) and by `sklearn.metrics.ndcg_score`: ``DCG@k / IDCG@k`` with a
    ``log2(i + 1)`` discount and the ideal DCG taken over ``min(k, |relevant|)`` relevant tools
    in the top positions. Relevant names missing from the ranking still count in the ideal DCG.

    Args:
        ranked: Tool names, best first.
        relevant: Relevant tool names (non-empty).
        k: Cut-off, an integer >= 1.

    Returns:
        nDCG@k in [0, 1]; 1.0 exactly when the first ``min(k, |relevant|)`` slots are distinct
        relevant tools.

    Raises:
        TypeError, ValueError: As the module's conventions say for ``ranked``, ``relevant``, ``k``.
    """
    kk = _check_k(k)
    rel = _relevant_set(relevant)
    return dcg_at_k(ranked, rel, kk) / _ideal_dcg(len(rel), kk)


def pass_at_k(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """Whether every required tool is in the top ``k`` (the per-query term of TGR's Pass Rate).

    [TGR], Section 4.1, Eq. (4): ``pass@k = 1/|Q| sum_q I(Phi(q) ⊆ Psi^k(q))``, where
    ``Phi(q)`` is the set of ground-truth tools and ``Psi^k(q)`` the top-k retrieved tools. This
    function returns the indicator for one query; average with `mean_metrics` for the rate.
    It is not the unbiased pass@k estimator of code generation. It always equals
    `completeness_at_k`. If ``|relevant| > k`` it is 0.0.

    Args:
        ranked: Tool names, best first.
        relevant: Ground-truth tool names (non-empty).
        k: Cut-off, an integer >= 1.

    Returns:
        1.0 if ``relevant ⊆ set(ranked[:k])``, else 0.0.

    Raises:
        TypeError, ValueError: As the module's conventions say for ``ranked``, ``relevant``, ``k``.
    """
    kk = _check_k(k)
    rel = _relevant_set(relevant)
    return 1.0 if rel <= _top_k_set(_ranked_list(ranked), kk) else 0.0


def completeness_at_k(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """Whether recall@k is 1, i.e. all relevant tools are in the top ``k`` (ToolQP).

    [ToolQP], Section 4.1 ("Benchmark and Setup"): "Completeness@K (1[R@K = 1])", reported with
    K = 10. The indicator is evaluated exactly as a set inclusion, not by comparing a float to
    1, so it always equals `pass_at_k` ([TGR] Eq. (4)); both follow Qu et al. (2024). If
    ``|relevant| > k`` it is 0.0.

    Args:
        ranked: Tool names, best first.
        relevant: Relevant tool names (non-empty).
        k: Cut-off, an integer >= 1.

    Returns:
        1.0 if every relevant name is among ``ranked[:k]``, else 0.0.

    Raises:
        TypeError, ValueError: As the module's conventions say for ``ranked``, ``relevant``, ``k``.
    """
    return pass_at_k(ranked, relevant, k)


# --------------------------------------------------------------------------- set metrics


def set_precision(predicted: Iterable[str], relevant: Iterable[str]) -> float:
    """Fraction of the predicted (unordered) tools that are relevant.

    Args:
        predicted: Predicted tool names; order is ignored and duplicates collapse.
        relevant: Relevant tool names (non-empty).

    Returns:
        ``|predicted ∩ relevant| / |predicted|``, or 0.0 when nothing is predicted (as
        scikit-learn's ``zero_division=0``).

    Raises:
        TypeError: If `predicted` or `relevant` is a string.
        ValueError: If `relevant` is empty.
    """
    pred = _name_set(predicted, "predicted", allow_empty=True)
    rel = _relevant_set(relevant)
    return len(pred & rel) / len(pred) if pred else 0.0


def set_recall(predicted: Iterable[str], relevant: Iterable[str]) -> float:
    """Fraction of the relevant tools that were predicted.

    Args:
        predicted: Predicted tool names; order is ignored and duplicates collapse.
        relevant: Relevant tool names (non-empty).

    Returns:
        ``|predicted ∩ relevant| / |relevant|``.

    Raises:
        TypeError: If `predicted` or `relevant` is a string.
        ValueError: If `relevant` is empty.
    """
    pred = _name_set(predicted, "predicted", allow_empty=True)
    rel = _relevant_set(relevant)
    return len(pred & rel) / len(rel)


def set_f1(predicted: Iterable[str], relevant: Iterable[str]) -> float:
    """Harmonic mean of `set_precision` and `set_recall`.

    Args:
        predicted: Predicted tool names; order is ignored and duplicates collapse.
        relevant: Relevant tool names (non-empty).

    Returns:
        ``2 |P ∩ R| / (|P| + |R|)``, 0.0 when the sets do not overlap (or nothing is
        predicted).

    Raises:
        TypeError: If `predicted` or `relevant` is a string.
        ValueError: If `relevant` is empty.
    """
    pred = _name_set(predicted, "predicted", allow_empty=True)
    rel = _relevant_set(relevant)
    return 2.0 * len(pred & rel) / (len(pred) + len(rel))


def tracc(predicted: Iterable[str], relevant: Iterable[str]) -> float:
    """Tool Recommendation Accuracy: overlap with the truth, penalised for a wrong set size.

    [PTR], Section 3 ("Metrics") and Appendix C:
    ``TRACC = (|A ∩ B| / |A|) * (1 - ||B| - |A|| / |A ∪ B|)``, where ``A`` is the ground-truth
    tool set and ``B`` the recommended set. Worked examples from Appendix C with
    ``A = {a, b, c}``: ``B = A`` gives 1.0, ``B = {a, b, c, x, y}`` gives 0.6 and
    ``B = {a, b}`` gives 4/9 ≈ 0.44. It scores a *set*; to score a ranking, pass the set the
    agent would be shown, e.g. ``ranked[:k]`` or the tools above a probability threshold.
    An empty recommendation scores 0.0.

    Args:
        predicted: The recommended tool set ``B``; order is ignored and duplicates collapse.
        relevant: The ground-truth tool set ``A`` (non-empty).

    Returns:
        TRACC in [0, 1].

    Raises:
        TypeError: If `predicted` or `relevant` is a string.
        ValueError: If `relevant` is empty.
    """
    b = _name_set(predicted, "predicted", allow_empty=True)
    a = _relevant_set(relevant)
    acc = len(a & b) / len(a)
    size_penalty = abs(len(b) - len(a)) / len(a | b)
    return acc * (1.0 - size_penalty)


# --------------------------------------------------------------------------- per-step bundle


def step_metrics(
    ranked: Sequence[str], relevant: Iterable[str], *, ks: Iterable[int] = DEFAULT_KS
) -> dict[str, float]:
    """All ranking metrics of one teacher-forced step, as one flat row.

    The keys are, in this order: ``"mrr"`` (`reciprocal_rank`), ``"top1"``
    (`top1_accuracy`), ``"f1"`` (`f1_at_k` with ``k = |relevant|``, as [DTDR]), then for each
    ``k`` in `ks`, in the given order: ``"precision@k"``, ``"recall@k"``, ``"ndcg@k"`` and
    ``"completeness@k"``. With the default ``ks = (5, 10)`` that is 11 keys, including
    ``recall@5``, ``ndcg@10`` and ``completeness@10``. TGR's ``pass@k`` is not repeated
    because it always equals ``completeness@k``. Rows from the same `ks` share one key set, so
    they can be averaged with `mean_metrics` or `group_mean`.

    For a `Demonstration`, call it once per ``step in demo.steps()`` with the retriever's
    ``ranked_names()`` for that step and ``step.acceptable`` as `relevant`; the ranking should
    include the end-of-plan token, which is the only acceptable name at the last step.

    Args:
        ranked: Tool names, best first.
        relevant: Acceptable tool names for this step (non-empty).
        ks: Cut-offs, each an integer >= 1, without repeats and not empty.

    Returns:
        A new dict mapping metric name to its value for this step.

    Raises:
        TypeError: If `ranked` is a string or a set, `relevant` is a string, or a cut-off is
            not an integer.
        ValueError: If `relevant` is empty, `ks` is empty or repeats a value, or a cut-off is
            < 1.
    """
    cutoffs = [_check_k(k, "ks entry") for k in ks]
    if not cutoffs:
        raise ValueError("ks must name at least one cut-off")
    if len(set(cutoffs)) != len(cutoffs):
        raise ValueError(f"ks must not repeat a cut-off, got {cutoffs}")
    items = _ranked_list(ranked)
    rel = _relevant_set(relevant)
    row: dict[str, float] = {
        "mrr": reciprocal_rank(items, rel),
        "top1": top1_accuracy(items, rel),
        "f1": f1_at_k(items, rel),
    }
    for k in cutoffs:
        row[f"precision@{k}"] = precision_at_k(items, rel, k)
        row[f"recall@{k}"] = recall_at_k(items, rel, k)
        row[f"ndcg@{k}"] = ndcg_at_k(items, rel, k)
        row[f"completeness@{k}"] = completeness_at_k(items, rel, k)
    return row


# --------------------------------------------------------------------------- aggregation


def mean_metrics(rows: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Arithmetic mean of each metric over rows (macro-average over queries or steps).

    Every row must have the same key set; the means are exact sums divided by the number of
    rows (`math.fsum`), not rounded.

    Args:
        rows: Per-query or per-step metric rows, e.g. from `step_metrics`.

    Returns:
        A new dict with the first row's keys (in its order) mapped to their means.

    Raises:
        ValueError: If there are no rows or a row's keys differ from the first row's.
    """
    columns: dict[str, list[float]] | None = None
    n = 0
    for i, row in enumerate(rows):
        if columns is None:
            columns = {key: [] for key in row}
        elif row.keys() != columns.keys():
            missing = sorted(columns.keys() - row.keys())
            extra = sorted(row.keys() - columns.keys())
            raise ValueError(
                f"row {i} has different metric keys from row 0: missing {missing}, extra {extra}"
            )
        for key, value in row.items():
            columns[key].append(float(value))
        n += 1
    if columns is None:
        raise ValueError("cannot average zero rows: rows is empty")
    return {key: math.fsum(values) / n for key, values in columns.items()}


def group_mean(
    rows: Iterable[Mapping[str, float]], groups: Iterable[G]
) -> dict[G, dict[str, float]]:
    """Mean of each metric within each group, for breakdowns (by plan length, step index, ...).

    `rows` and `groups` are parallel: ``groups[i]`` is the group label of ``rows[i]``. All rows
    must share one key set, across groups too, so that the breakdown's columns line up.

    Args:
        rows: Per-query or per-step metric rows, e.g. from `step_metrics`.
        groups: One hashable group label per row.

    Returns:
        A new dict from group label (in order of first appearance) to that group's
        `mean_metrics`. Group sizes are ``collections.Counter(groups)``.

    Raises:
        ValueError: If `rows` and `groups` differ in length, there are no rows, or the rows'
            key sets differ.
    """
    row_list = list(rows)
    group_list = list(groups)
    if len(row_list) != len(group_list):
        raise ValueError(
            f"rows and groups must have the same length, got {len(row_list)} rows and "
            f"{len(group_list)} group labels"
        )
    if not row_list:
        raise ValueError("cannot average zero rows: rows is empty")
    mean_metrics(row_list)  # checks that all rows share one key set, with a clear error
    buckets: dict[G, list[Mapping[str, float]]] = {}
    for row, group in zip(row_list, group_list, strict=True):
        buckets.setdefault(group, []).append(row)
    return {group: mean_metrics(members) for group, members in buckets.items()}
