"""DTDR-L's fit trains its label blocks side by side and still learns what Algorithm 5 does."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from dtdr_agents.retrievers import linear
from dtdr_agents.retrievers.linear import init_linear, train_linear

pytest.importorskip("torch")

EPOCHS, LR, DECAY, WD = 3, 1e-2, 0.9, 1e-3


def _reference(
    x: np.ndarray, y: np.ndarray, batch_size: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The update train_linear documents, in float64 numpy: Adam (L2 decay), lr decay per epoch."""
    w, b = (a.astype(np.float64) for a in init_linear(x.shape[1], y.shape[1], seed))
    params = [w, b]
    moments = [(np.zeros_like(p), np.zeros_like(p)) for p in params]
    order, lr, t = np.random.default_rng(seed + 1), LR, 0
    for _ in range(EPOCHS):
        perm = order.permutation(len(x))
        for start in range(0, len(x), batch_size):
            idx = perm[start : start + batch_size]
            gz = (1 / (1 + np.exp(-(x[idx] @ w.T + b))) - y[idx]) / len(idx)
            t += 1
            for p, g, (m, v) in zip(params, [gz.T @ x[idx], gz.sum(0)], moments, strict=True):
                g = g + WD * p
                m[...] = 0.9 * m + 0.1 * g
                v[...] = 0.999 * v + 0.001 * g * g
                denom = np.sqrt(v) / np.sqrt(1 - 0.999**t) + 1e-8
                p -= lr / (1 - 0.9**t) * m / denom
        lr *= DECAY
    return w, b


def _problem(n: int = 50, n_in: int = 6, n_out: int = 7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(n, n_in)).astype(np.float32)
    y = (rng.random((n, n_out)) < 0.3).astype(np.float32)
    return x, y


def _fit(x: np.ndarray, y: np.ndarray, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    return train_linear(
        x, y, epochs=EPOCHS, lr=LR, lr_decay=DECAY, weight_decay=WD, batch_size=batch_size, seed=5
    )


@pytest.mark.parametrize("workers", [1, 3])
@pytest.mark.parametrize("batch_size", [1, 8])  # 8: the last batch of 50 samples is partial
def test_blocks_on_threads_learn_the_reference_update(
    monkeypatch: pytest.MonkeyPatch, workers: int, batch_size: int
) -> None:
    """Blocks of 2 labels (the last of 1), on one or three threads, match the float64 reference."""
    monkeypatch.setattr(linear, "BLOCK_BYTES", 4 * 6 * 2)
    monkeypatch.setattr(linear, "fit_workers", lambda: workers)
    x, y = _problem()
    w, b = _fit(x, y, batch_size)
    ref_w, ref_b = _reference(x, y, batch_size, seed=5)
    assert w.dtype == b.dtype == np.float32
    np.testing.assert_allclose(w, ref_w, atol=2e-5)
    np.testing.assert_allclose(b, ref_b, atol=2e-5)


def test_blocks_are_trained_side_by_side(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two blocks, two workers: both are in training at once (each waits for the other)."""
    both = threading.Barrier(2, timeout=10)
    seen: list[int] = []

    def meet(xt: Any, yt: Any, *args: Any, **kwargs: Any) -> None:
        seen.append(int(yt.shape[1]))
        both.wait()  # raises BrokenBarrierError if the blocks ran one after the other

    monkeypatch.setattr(linear, "BLOCK_BYTES", 4 * 6 * 4)
    monkeypatch.setattr(linear, "fit_workers", lambda: 2)
    monkeypatch.setattr(linear, "_adam_epochs", meet)
    x, y = _problem()
    _fit(x, y, 8)
    assert sorted(seen) == [3, 4]


def test_an_error_in_one_block_reaches_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail_on_the_last(xt: Any, yt: Any, *args: Any, **kwargs: Any) -> None:
        if yt.shape[1] == 1:
            raise FloatingPointError("block failed")

    monkeypatch.setattr(linear, "BLOCK_BYTES", 4 * 6 * 2)
    monkeypatch.setattr(linear, "fit_workers", lambda: 2)
    monkeypatch.setattr(linear, "_adam_epochs", fail_on_the_last)
    x, y = _problem()
    with pytest.raises(FloatingPointError, match="block failed"):
        _fit(x, y, 8)


def test_fit_workers_is_a_positive_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(linear.FIT_THREADS_ENV, raising=False)
    assert linear.fit_workers() >= 1
    monkeypatch.setenv(linear.FIT_THREADS_ENV, "3")
    assert linear.fit_workers() == 3


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_a_bad_thread_count_names_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(linear.FIT_THREADS_ENV, value)
    with pytest.raises(ValueError, match=linear.FIT_THREADS_ENV):
        _fit(*_problem(), 8)


def test_a_set_stop_leaves_the_block_untrained() -> None:
    """What `train_linear` sets when another block failed or the user pressed Ctrl-C."""
    torch = pytest.importorskip("torch")
    x, y = _problem()
    w0, b0 = init_linear(6, 7, seed=0)
    weight, bias = torch.from_numpy(w0.copy()), torch.from_numpy(b0.copy())
    stop = threading.Event()
    stop.set()
    order = [np.arange(len(x))]
    linear._adam_epochs(
        torch.from_numpy(x), torch.from_numpy(y), weight, bias, order, 8, 0.9, stop=stop, lr=LR
    )
    np.testing.assert_array_equal(weight.numpy(), w0)
    linear._adam_epochs(
        torch.from_numpy(x), torch.from_numpy(y), weight, bias, order, 8, 0.9, lr=LR
    )
    assert not np.allclose(weight.numpy(), w0)  # without it, the same call trains
