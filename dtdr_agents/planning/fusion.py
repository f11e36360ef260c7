"""Rank fusion of several rankings of one catalogue: peak rank (ToolQP) and RRF.

Each input list is an array of 1-based ranks, one per tool (``ranks[l, t]`` = position of tool
``t`` in list ``l``). Both functions return tool indices, best first, over the whole catalogue.

- **Peak rank** (paper 003, section 3.1): a tool's fused rank is the best rank it reached in
  any single list, so a sub-goal that needed many query attempts does not crowd out the others.
  Ties (one tool per list can share each peak rank) go to the earlier list, then to the better
  second-best rank, then to catalogue order.
- **RRF** (Cormack et al., 2009): ``score(t) = sum_l 1 / (k + ranks[l, t])``, highest first;
  ties go to catalogue order.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Fusion = Literal["peak", "rrf"]
"""The fusion methods: ``"peak"`` (ToolQP's peak rank) or ``"rrf"``."""

FUSIONS: tuple[Fusion, ...] = ("peak", "rrf")
"""The accepted fusion names."""

RRF_K = 60
"""The usual RRF constant (Cormack et al., 2009)."""


def _check(ranks: np.ndarray) -> np.ndarray:
    arr = np.asarray(ranks)
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise ValueError(f"ranks must be a non-empty (lists, tools) array, got shape {arr.shape}")
    return arr


def peak_rank_fusion(ranks: np.ndarray) -> np.ndarray:
    """Tool indices ordered by peak rank (see the module docstring for ties).

    Args:
        ranks: ``(n_lists, n_tools)`` 1-based ranks.

    Returns:
        All tool indices, best first.
    """
    arr = _check(ranks)
    peak = arr.min(axis=0)
    first = np.argmax(arr == peak, axis=0)  # the earliest list reaching the peak
    second = np.partition(arr, 1, axis=0)[1] if arr.shape[0] > 1 else peak
    # one integer key (peak, first list, second-best), then a stable sort: catalogue order last
    n_lists = arr.shape[0]
    key = (peak.astype(np.int64) * n_lists + first) * (int(arr.max()) + 1) + second
    order: np.ndarray = np.argsort(key, kind="stable")
    return order


def rrf_fusion(ranks: np.ndarray, k: int = RRF_K) -> np.ndarray:
    """Tool indices ordered by reciprocal rank fusion, ``sum 1 / (k + rank)``.

    Args:
        ranks: ``(n_lists, n_tools)`` 1-based ranks.
        k: The RRF constant (> 0).

    Returns:
        All tool indices, best first.
    """
    if k <= 0:
        raise ValueError(f"the RRF constant k must be > 0, got {k}")
    arr = _check(ranks)
    score = (1.0 / (k + arr.astype(np.float64))).sum(axis=0)
    order: np.ndarray = np.argsort(-score, kind="stable")
    return order


def fuse(ranks: np.ndarray, method: Fusion = "peak", *, rrf_k: int = RRF_K) -> np.ndarray:
    """`peak_rank_fusion` or `rrf_fusion` by name."""
    if method == "peak":
        return peak_rank_fusion(ranks)
    if method == "rrf":
        return rrf_fusion(ranks, rrf_k)
    raise ValueError(f"fusion must be one of {FUSIONS}, got {method!r}")


__all__ = ["FUSIONS", "RRF_K", "Fusion", "fuse", "peak_rank_fusion", "rrf_fusion"]
