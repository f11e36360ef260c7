"""Query-tool similarity: the shared base of the QTS-style baselines, and QTS itself.

DTDR paper, Algorithm 7: a query-only retriever ranks once per query by the cosine similarity of
the query's and the tools' sentence embeddings; the end-of-plan token gets its base rate among
the training steps (`end_rate_`) and the tools share the rest. `SimilarityRetriever` is that
scheme over (possibly transformed) tool embeddings; `QTSRetriever` ("qts") is the vanilla one,
`ToolGraphRetriever` (`tgr`) and `LessIsMoreRetriever` (`lim`) build on it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from dtdr_agents.foundation.checks import check_number
from dtdr_agents.foundation.encoders import Encoder
from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.retrievers.scores import (
    PRIOR_TEMPERATURE,
    Scores,
    score_why,
    similarity_probabilities,
    with_end,
)


class SimilarityRetriever(ToolRetriever):
    """Query-tool similarity over (possibly transformed) tool embeddings, once per query."""

    uses_history: ClassVar[bool] = False
    predicts_end: ClassVar[bool] = False
    accepts_no_demos: ClassVar[bool] = True  # needs no demonstrations by nature
    uses_encoder: ClassVar[bool] = True

    encoder: str | Encoder | None = "default"
    temperature: float | None = PRIOR_TEMPERATURE
    prior_weight: float = 0.1

    def _check_params(self) -> None:
        super()._check_params()
        check_number(self.temperature, "temperature", low=0.0, low_open=True, optional=True)

    def _search_embeddings(self) -> np.ndarray:
        """L2-normalised tool rows compared with the query (fit catalogue order)."""
        assert self.tool_embeddings_ is not None
        return self.tool_embeddings_

    def _query_embeddings(self, query: str) -> tuple[np.ndarray, dict[str, Any]]:
        """Rows that stand for the query (a tool scores its best cosine among them)."""
        return self._query_vector(query)[None, :], {}

    def similarities(self, query: str) -> np.ndarray:
        """Cosine similarity of every fitted tool to `query` (float64)."""
        self._check_fitted()
        sims: np.ndarray = self._memo(query, "similarity", self._compute_similarities)[0]
        return sims

    def _compute_similarities(self, query: str) -> tuple[np.ndarray, dict[str, Any]]:
        rows, info = self._query_embeddings(query)
        sims = rows.astype(np.float32) @ self._search_embeddings().T
        return sims.max(axis=0).astype(np.float64), info

    def _score(self, query: str, history: tuple[str, ...]) -> Scores:
        sims, info = self._memo(query, "similarity", self._compute_similarities)
        probs = similarity_probabilities(sims, self.temperature)
        explanation = {"max_cosine": round(float(sims.max()), 3), **info}
        return Scores(
            with_end(probs, self.end_rate_),
            explanation,
            tool_why=score_why(sims, "cosine", ".3f"),
        )


class QTSRetriever(SimilarityRetriever):
    """Vanilla query-tool similarity (QTS): cosine of query and tool description embeddings.

    DTDR paper, Algorithm 7 with `qts_method` "vanilla": no learning from demonstrations; the
    query is embedded with the same sentence encoder as the tools (`name: description`).
    Similarities become probabilities by `softmax(cos / temperature)`; `temperature=None`
    normalises the positive similarities instead (Algorithm 7's normalisation without its
    selection threshold alpha, which belongs to tool selection, not ranking). Query-only:
    end-of-plan gets its training base rate.

    Args:
        encoder: Encoder spec or object (see `get_encoder`).
        temperature: Softmax temperature over cosine similarities, or None (normalised).
        prior_weight: Weight of the query-similarity prior for tools added after fit.
    """

    retriever_id: ClassVar[str] = "qts"
    bench_default: ClassVar[bool] = True

    def _fit(self, demos: list[Demonstration], tools: Toolset) -> None:
        """Nothing to learn beyond the tool embeddings `fit` computes."""


__all__ = [
    "QTSRetriever",
    "SimilarityRetriever",
    "score_why",
    "similarity_probabilities",
    "with_end",
]
