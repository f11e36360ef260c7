"""Memory at large catalogues: no catalogue-sized temporaries beyond a bounded block."""

from __future__ import annotations

import numpy as np

from dtdr_agents.retrievers import hybrid_ood
from dtdr_agents.retrievers.hybrid_ood import calibrate


def _rows(n: int, seed: int, dim: int = 32) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _one_block_threshold(emb: np.ndarray, quantile: float) -> float:
    """The calibration's description threshold as one (references x catalogue) product."""
    rows = hybrid_ood._sample(len(emb), 0)
    sims = emb[rows] @ emb.T
    sims[np.arange(len(rows)), rows] = -np.inf
    return float(np.quantile(sims.max(axis=1), quantile))


def test_calibration_below_the_block_size_is_the_one_block_product():
    emb = _rows(3000, seed=1)
    got = calibrate(emb, np.zeros((0, 32), dtype=np.float32))
    assert got.semantic == _one_block_threshold(emb, hybrid_ood.OOD_QUANTILE)


def test_calibration_in_blocks_gives_the_one_block_threshold(monkeypatch):
    emb = _rows(3000, seed=2)
    monkeypatch.setattr(hybrid_ood, "CALIBRATION_BYTES", 7 * 4 * len(emb))  # 7 rows a block
    got = calibrate(emb, np.zeros((0, 32), dtype=np.float32))
    assert abs(got.semantic - _one_block_threshold(emb, hybrid_ood.OOD_QUANTILE)) <= 1e-6
