"""The chance-level baseline: a seeded random ranking ("random")."""

from __future__ import annotations

import hashlib
import json
from typing import ClassVar

import numpy as np

from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.retrievers.base import Scores, ToolRetriever


class RandomRetriever(ToolRetriever):
    """A seeded random ranking: the chance-level baseline.

    Every `(query, history)` gets its own random order of the fitted tools and end-of-plan,
    drawn from a generator seeded by a hash of the seed, the query and the history, so the same
    inputs always give the same ranking. Probabilities are near uniform (proportional to
    `1 + u`, `u ~ U[0, 1)`), sum to 1, and tie with probability zero.

    Args:
        prior_weight: Weight of the (uniform) prior for tools added after fit.
        seed: Seed mixed into every ranking.
    """

    retriever_id: ClassVar[str] = "random"
    accepts_no_demos: ClassVar[bool] = True  # needs no demonstrations by nature
    bench_default: ClassVar[bool] = True
    uses_encoder: ClassVar[bool] = False

    prior_weight: float = 0.1
    seed: int = 0

    def _check_params(self) -> None:
        super()._check_params()
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):  # hashed as JSON
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    def _fit(self, demos: list[Demonstration], tools: Toolset) -> None:
        """Nothing to learn: the ranking is drawn per request."""

    def _score(self, query: str, history: tuple[str, ...]) -> Scores:
        key = json.dumps([self.seed, query, list(history)], ensure_ascii=False)
        digest = hashlib.blake2b(key.encode("utf-8"), digest_size=16).digest()
        rng = np.random.default_rng(int.from_bytes(digest, "little"))
        w = 1.0 + rng.random(len(self.labels_))
        return Scores(w / w.sum(), {"seed": self.seed})


__all__ = ["RandomRetriever"]
