"""The hybrid fit's speed-ups keep its results: the combiner's loss and optimum, thread limits."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp

from dtdr_agents.retrievers.hybrid import fit_threads
from dtdr_agents.retrievers.hybrid_combiner import (
    FEATURES,
    RIDGE,
    _fit_combiner,
    _HeldOut,
    _prior_vector,
)


def _held(seed: int, steps: int = 60) -> _HeldOut:
    rng = np.random.default_rng(seed)
    feats, targets = [], []
    for _ in range(steps):
        n = int(rng.integers(2, 30))
        x = rng.normal(size=(n, len(FEATURES))) * rng.uniform(0.2, 2.0, size=len(FEATURES))
        good = np.zeros(n, dtype=bool)
        good[rng.choice(n, size=int(rng.integers(1, min(n, 4) + 1)), replace=False)] = True
        x[good, :3] += 1.0
        feats.append(x)
        targets.append(good)
    return _HeldOut.stack(feats, targets)


def _direct_loss(held: _HeldOut, w: np.ndarray, prior: np.ndarray, l2: float) -> float:
    """The combiner's objective step by step, with SciPy's logsumexp (no shared code)."""
    s = held.x @ w
    ends = [*held.starts[1:], len(s)]
    nll = sum(
        logsumexp(s[a:b]) - logsumexp(s[a:b][held.good[a:b]])
        for a, b in zip(held.starts, ends, strict=True)
    )
    g = held.x.T @ held.x / len(held.x) + RIDGE * np.eye(len(w))
    d = w - prior
    return float(nll + 0.5 * l2 * d @ g @ d)


@pytest.mark.parametrize("seed", [0, 1])
def test_step_losses_and_good_rows_match_a_direct_computation(seed: int) -> None:
    held = _held(seed)
    w = np.random.default_rng(seed + 10).normal(size=len(FEATURES))
    prior = _prior_vector()
    assert held.loss(w) == pytest.approx(_direct_loss(held, w, prior, 0.0), rel=1e-10)
    rows, x, steps, starts = held.good_rows
    assert np.array_equal(rows, np.flatnonzero(held.good)) and np.array_equal(x, held.x[rows])
    assert np.array_equal(steps[starts], np.arange(held.n_steps))  # each step's first good row


@pytest.mark.parametrize("l2", [0.5, 4.0])
def test_the_combiner_stops_where_the_direct_objective_is_flat(l2: float) -> None:
    held = _held(3)
    prior = _prior_vector()
    fitted = _fit_combiner(held, prior, l2)
    at = _direct_loss(held, fitted, prior, l2)
    h = 1e-5
    grad = np.array(
        [
            (
                _direct_loss(held, fitted + h * e, prior, l2)
                - _direct_loss(held, fitted - h * e, prior, l2)
            )
            / (2 * h)
            for e in np.eye(len(fitted))
        ]
    )
    assert np.abs(grad).max() < 1e-4 * max(1.0, at)  # a central difference: flat at the optimum
    moved = fitted + 0.05 * np.random.default_rng(0).normal(size=len(fitted))
    assert _direct_loss(held, moved, prior, l2) > at


def test_fit_threads_limits_blas_and_torch_then_restores_them() -> None:
    import torch
    from threadpoolctl import threadpool_info  # type: ignore[import-untyped]

    def blas() -> set[int]:
        return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    torch_before, blas_before = torch.get_num_threads(), blas()
    with fit_threads(1):
        assert torch.get_num_threads() == 1 and blas() == {1}
    assert torch.get_num_threads() == torch_before and blas() == blas_before
    with pytest.raises(RuntimeError), fit_threads(1):
        raise RuntimeError("a failed fit")
    assert torch.get_num_threads() == torch_before and blas() == blas_before
