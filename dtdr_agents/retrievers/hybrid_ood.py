"""The hybrid's out-of-distribution signal: calibrated at fit, saved with the model.

`hybrid` ranks any request zero-shot, so "out of distribution" means for it what it means for
every retriever (`Ranking.fallback`): its evidence for this request is not to be trusted, and a
selection keeps the ranking's best `SelectionPolicy.fallback_k` tools instead of its cut. The
hybrid's evidence is the request's relevance to the catalogue, so a request is out of
distribution when it is unrelated to the catalogue, and, once there are demonstrations, to
every demonstrated request as well. All of these must hold:

* lexical: it shares no indexed word with the tools' names and descriptions (its best BM25
  score is 0; BM25 drops English stop words);
* semantic: its best cosine similarity to a tool's name and description is below the
  `quantile` of the catalogue's own descriptions' best similarity to another tool (each
  description held out of the others): it is farther from every tool than the tools of the
  catalogue are from one another;
* with at least `MIN_DEMO_REFERENCE` distinct demonstrated requests: its similarity to the
  nearest demonstrated request is below the `quantile` of the demonstrated requests'
  similarity to their nearest other one (each held out of the others).

So demonstrations only ever remove flags: a request close to one demonstration is never
flagged. The lexical test is not a quantile: a request that shares a word with the catalogue
has lexical evidence, and in-distribution requests sharing none are about 2% of the demo
data's steps (none on TaskBench-HF), too many for a 1% quantile to leave out. Measured (share
of in-distribution steps flagged, share of unrelated requests flagged):
`dtdr_agents.evaluation.ood_bench` and ``docs/architecture.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dtdr_agents.foundation.errors import ModelLoadError

OOD_QUANTILE = 0.01
"""The held-out quantile each check compares a request with (1%: about 1 in 100 requests like
the reference ones fails one check; all of them must fail)."""

MIN_DEMO_REFERENCE = 10
"""Distinct demonstrated requests needed for the nearest-demonstration check (with fewer, a
1% quantile of their similarities is their minimum, too noisy to trust)."""

REFERENCE_LIMIT = 2_000
"""Reference requests (descriptions or demonstrated requests) used at most, a seeded sample
beyond: calibration costs one similarity row (over the tools or the requests) per reference."""


CALIBRATION_BYTES = 64 * 2**20
"""Largest block of description similarities `calibrate` holds at once."""


@dataclass(frozen=True)
class OODCalibration:
    """The hybrid's calibrated out-of-distribution thresholds (saved with the model).

    Attributes:
        quantile: The held-out quantile of the thresholds.
        semantic: A request's best similarity to a tool must be below this.
        n_descriptions: Held-out tool descriptions `semantic` comes from.
        nearest: Its similarity to the nearest demonstrated request must be below this
            (None: fewer than `MIN_DEMO_REFERENCE` distinct demonstrated requests).
        n_demos: Distinct demonstrated requests `nearest` comes from.
    """

    quantile: float
    semantic: float
    n_descriptions: int
    nearest: float | None = None
    n_demos: int = 0

    def reason(self, lexical: float, semantic: float, nearest: float | None) -> str | None:
        """Why a request with these best scores is out of distribution, or None.

        Args:
            lexical: Its best BM25 score over the tools.
            semantic: Its best cosine similarity to a tool.
            nearest: Its similarity to the nearest demonstrated request (None: none).
        """
        if lexical > 0.0 or semantic >= self.semantic:
            return None
        if self.nearest is not None and (nearest is None or nearest >= self.nearest):
            return None
        pct = f"{self.quantile:.0%}"
        text = (
            "the request is unrelated to the catalogue: it shares no word with the tools and "
            f"its best tool similarity {semantic:.3f} is below the {pct} quantile of the "
            f"catalogue's own held-out descriptions ({self.semantic:.3f})"
        )
        if self.nearest is not None and nearest is not None:
            text += (
                f", and its nearest demonstrated request ({nearest:.3f}) is below the {pct} "
                f"quantile of the demonstrations' held-out nearest ({self.nearest:.3f})"
            )
        return text

    def to_state(self) -> dict[str, Any]:
        """The calibration as plain JSON."""
        return asdict(self)

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> OODCalibration:
        """Read `to_state`'s JSON back.

        Raises:
            ModelLoadError: A missing or non-finite field, or a quantile outside (0, 1).
        """
        try:
            nearest = state.get("nearest")
            calibration = cls(
                quantile=float(state["quantile"]),
                semantic=float(state["semantic"]),
                n_descriptions=int(state["n_descriptions"]),
                nearest=None if nearest is None else float(nearest),
                n_demos=int(state.get("n_demos", 0)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ModelLoadError(f"corrupt hybrid state: ood calibration: {exc!r}") from exc
        values = [calibration.semantic, calibration.nearest or 0.0]
        if not (0 < calibration.quantile < 1) or not np.isfinite(values).all():
            raise ModelLoadError(
                f"corrupt hybrid state: ood calibration out of range: {calibration.to_state()}"
            )
        return calibration


def _sample(n: int, seed: int) -> np.ndarray:
    """At most `REFERENCE_LIMIT` row indices of `n`, a seeded sample beyond (sorted)."""
    if n <= REFERENCE_LIMIT:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, REFERENCE_LIMIT, replace=False))


def calibrate(
    tool_embeddings: np.ndarray,
    demo_embeddings: np.ndarray,
    *,
    quantile: float = OOD_QUANTILE,
    seed: int = 0,
) -> OODCalibration:
    """The thresholds of `OODCalibration`, from held-out descriptions and demonstrations.

    Args:
        tool_embeddings: The tools' unit-norm embeddings (name and description), one row each.
        demo_embeddings: The distinct demonstrated requests' unit-norm embeddings (may have
            no row); the nearest-demonstration check needs `MIN_DEMO_REFERENCE` of them.
        quantile: The held-out quantile.
        seed: Seed of the sample beyond `REFERENCE_LIMIT`.
    """
    emb = np.asarray(tool_embeddings, dtype=np.float32)
    semantic = 0.0  # one tool: only a request with no evidence at all
    rows = _sample(len(emb), seed) if len(emb) > 1 else np.zeros(0, dtype=np.int64)
    if len(rows):
        best = np.empty(len(rows), dtype=np.float32)
        step = max(1, CALIBRATION_BYTES // (4 * len(emb)))  # one block below 8,000 tools
        for at in range(0, len(rows), step):  # no 2,000 x catalogue matrix at 100,000 tools
            part = rows[at : at + step]
            sims = emb[part] @ emb.T
            sims[np.arange(len(part)), part] = -np.inf  # each description held out of the rest
            best[at : at + step] = sims.max(axis=1)
        semantic = float(np.quantile(best, quantile))
    nearest = None
    vecs = np.asarray(demo_embeddings, dtype=np.float32)
    if len(vecs) >= MIN_DEMO_REFERENCE:
        picked = _sample(len(vecs), seed + 1)
        near = vecs[picked] @ vecs.T
        near[np.arange(len(picked)), picked] = -np.inf  # each request held out of the rest
        nearest = float(np.quantile(near.max(axis=1), quantile))
    return OODCalibration(quantile, semantic, len(rows), nearest, len(vecs))


__all__ = ["MIN_DEMO_REFERENCE", "OOD_QUANTILE", "REFERENCE_LIMIT", "OODCalibration", "calibrate"]
