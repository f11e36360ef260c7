"""How many tools a request needs: a set-size model learned on the demonstrations.

Beyond the PTR paper, which lets the chat model decide the size. `SetSizeModel` predicts a
distribution over set sizes from the request's nearest demonstrations (a kernel over cosine
similarities of the request embeddings). Its temperature and smoothing are chosen by
leave-one-out log-likelihood on the demonstrations themselves, so the distribution is fitted
on held-out requests; `calibration_` reports, for a few target coverages c, how often the
smallest size n with P(|A| <= n) >= c really covers the held-out request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dtdr_agents.foundation.errors import NotFittedError

TEMPERATURES = (0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2)
"""Kernel temperatures tried by `SetSizeModel.fit`."""
SMOOTHING = (0.01, 0.05, 0.2)
"""Weights of the size prior (the demonstrations' size histogram) tried by `fit`."""
TARGETS = (0.5, 0.8, 0.9, 0.95)
"""Target coverages reported in `SetSizeModel.calibration_`."""


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero), as float32."""
    arr = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    out: np.ndarray = arr / np.maximum(norms, 1e-12)
    return out


class SetSizeModel:
    """P(|A| = n | request) from the set sizes of the most similar demonstrations.

    Args:
        n_neighbors: Demonstrations looked at per request.

    Attributes:
        temperature_: The fitted kernel temperature.
        smoothing_: The fitted weight of the size prior.
        prior_: The demonstrations' size histogram (index = size).
        calibration_: Leave-one-out ``{"target": c, "achieved": fraction covered}`` rows,
            plus ``exact`` (argmax size right) and ``mae`` (mean absolute size error).
    """

    def __init__(self, n_neighbors: int = 20) -> None:
        if n_neighbors < 1:
            raise ValueError(f"n_neighbors must be >= 1, got {n_neighbors}")
        self.n_neighbors = n_neighbors

    def fit(self, embeddings: np.ndarray, sizes: Sequence[int]) -> SetSizeModel:
        """Learn from unit-norm request embeddings and their set sizes (>= 1 each)."""
        emb = unit_rows(embeddings)
        size_arr = np.asarray(sizes, dtype=np.int64)
        if emb.ndim != 2 or len(emb) != len(size_arr) or not len(size_arr):
            raise ValueError("embeddings and sizes must be non-empty and of the same length")
        if size_arr.min() < 1:
            raise ValueError("every set size must be >= 1")
        self.embeddings_ = emb
        self.sizes_ = size_arr
        self.max_size_ = int(size_arr.max())
        prior = np.bincount(size_arr, minlength=self.max_size_ + 1).astype(np.float64)
        self.prior_ = prior / prior.sum()
        self.temperature_ = TEMPERATURES[0]
        self.smoothing_ = SMOOTHING[0]
        if len(size_arr) > 1:
            sims = emb @ emb.T
            np.fill_diagonal(sims, -np.inf)  # leave-one-out: a request is not its own neighbour
            best = -np.inf
            for temp in TEMPERATURES:
                for smooth in SMOOTHING:
                    dist = self._dist(sims, temp, smooth)
                    ll = float(np.mean(np.log(dist[np.arange(len(size_arr)), size_arr])))
                    if ll > best:
                        best, self.temperature_, self.smoothing_ = ll, temp, smooth
            self.calibration_ = self._calibrate(self._dist(sims, None, None), size_arr)
        else:
            self.calibration_ = {"targets": [], "exact": float("nan"), "mae": float("nan")}
        return self

    def _dist(self, sims: np.ndarray, temp: float | None, smooth: float | None) -> np.ndarray:
        temp = self.temperature_ if temp is None else temp
        smooth = self.smoothing_ if smooth is None else smooth
        k = min(self.n_neighbors, sims.shape[1])
        idx = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        top = np.take_along_axis(sims, idx, axis=1)
        finite = np.isfinite(top)
        top = np.where(finite, top, -1e9)
        w = np.exp((top - top.max(axis=1, keepdims=True)) / temp) * finite
        w /= np.maximum(w.sum(axis=1, keepdims=True), 1e-300)
        dist = np.zeros((len(sims), self.max_size_ + 1))
        np.add.at(dist, (np.repeat(np.arange(len(sims)), k), self.sizes_[idx].ravel()), w.ravel())
        out: np.ndarray = (1.0 - smooth) * dist + smooth * self.prior_
        return out

    @staticmethod
    def _calibrate(dist: np.ndarray, sizes: np.ndarray) -> dict[str, Any]:
        cum = np.cumsum(dist, axis=1)
        rows = []
        for target in TARGETS:
            n_c = np.argmax(cum >= target - 1e-12, axis=1)
            rows.append({"target": target, "achieved": float(np.mean(sizes <= n_c))})
        mode = dist.argmax(axis=1)
        return {
            "targets": rows,
            "exact": float(np.mean(mode == sizes)),
            "mae": float(np.mean(np.abs(mode - sizes))),
        }

    def _check(self) -> None:
        if not hasattr(self, "sizes_"):
            raise NotFittedError("SetSizeModel is not fitted: call fit(embeddings, sizes)")

    def predict_proba_from_sims(self, sims: np.ndarray) -> np.ndarray:
        """Size distributions (index = size) from similarities to the demonstrations."""
        self._check()
        return self._dist(np.atleast_2d(np.asarray(sims, dtype=np.float64)), None, None)

    def predict_from_sims(self, sims: np.ndarray) -> int:
        """The most likely set size (>= 1) for one request's similarity row."""
        dist = self.predict_proba_from_sims(sims)[0]
        dist[0] = 0.0
        return max(1, int(dist.argmax()))

    def size_for_coverage(self, sims: np.ndarray, coverage: float) -> int:
        """The smallest size n with P(|A| <= n) >= `coverage`."""
        if not 0.0 < coverage <= 1.0:
            raise ValueError(f"coverage must be in (0, 1], got {coverage}")
        cum = np.cumsum(self.predict_proba_from_sims(sims)[0])
        return max(1, int(np.argmax(cum >= coverage - 1e-12)))

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON state and arrays for persistence."""
        self._check()
        return (
            {
                "n_neighbors": self.n_neighbors,
                "temperature": self.temperature_,
                "smoothing": self.smoothing_,
                "calibration": self.calibration_,
            },
            {"size_embeddings": self.embeddings_, "sizes": self.sizes_},
        )

    @classmethod
    def from_state(cls, state: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> SetSizeModel:
        """Rebuild a fitted model from `state()`."""
        model = cls(int(state["n_neighbors"]))
        model.embeddings_ = np.asarray(arrays["size_embeddings"], dtype=np.float32)
        model.sizes_ = np.asarray(arrays["sizes"], dtype=np.int64)
        model.max_size_ = int(model.sizes_.max())
        prior = np.bincount(model.sizes_, minlength=model.max_size_ + 1).astype(np.float64)
        model.prior_ = prior / prior.sum()
        model.temperature_ = float(state["temperature"])
        model.smoothing_ = float(state["smoothing"])
        model.calibration_ = dict(state["calibration"])
        return model


def format_calibration(calibration: Mapping[str, Any]) -> str:
    """One line: ``target 0.90 -> achieved 0.95; ...; exact 0.66; mae 0.93``."""
    parts = [
        f"target {row['target']:.2f} -> achieved {row['achieved']:.3f}"
        for row in calibration.get("targets", [])
    ]
    parts.append(f"exact {calibration.get('exact', float('nan')):.3f}")
    parts.append(f"mae {calibration.get('mae', float('nan')):.3f}")
    return "; ".join(parts)
