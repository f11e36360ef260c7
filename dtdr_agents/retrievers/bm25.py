"""BM25 over tool names and descriptions ("bm25"), a query-only baseline of the DTDR paper."""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from dtdr_agents.foundation.checks import check_number
from dtdr_agents.foundation.errors import ModelLoadError
from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.retrievers.scores import Scores, score_why, similarity_probabilities, with_end

BM25_INSTALL_HINT = "pip install 'dtdr-agents[bench]'"
"""How to install `bm25s`, the BM25 implementation `BM25Retriever` uses."""

_IDENT_SEP = re.compile(r"[_\-./:]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def split_identifiers(text: str) -> str:
    """Split snake_case, kebab-case, dotted and camelCase identifiers into words."""
    return _CAMEL.sub(" ", _IDENT_SEP.sub(" ", text))


def _import_bm25s() -> Any:
    try:
        import bm25s
    except ImportError as exc:
        raise ImportError(
            f"the bm25 retriever needs the bm25s package: {BM25_INSTALL_HINT}"
        ) from exc
    return bm25s


class BM25Retriever(ToolRetriever):
    """BM25 over tool names and descriptions (Robertson et al., 2009), with `bm25s`.

    Each tool is the document `name: description`, with identifiers split into words
    (`get_email_address` -> `get email address`), lower-cased, English stop words removed, and
    optionally stemmed. The query is tokenised the same way; BM25 scores every tool at once
    (a sparse matrix product inside `bm25s`). The index is rebuilt from the saved catalogue on
    `load` (tokenisation and indexing are deterministic), so nothing is pickled.

    Scores become probabilities by normalisation (`temperature=None`, the default: each tool's
    share of the total score, as Algorithm 7 normalises its retained scores) or by a softmax
    with the given temperature. A query sharing no term with any tool gives a uniform
    distribution. Query-only: end-of-plan gets its training base rate `end_rate_`.

    Args:
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation.
        method: `bm25s` variant ("lucene", "robertson", "atire", "bm25l", "bm25+").
        stopwords: Stop-word list name for `bm25s.tokenize` ("english") or None to keep all.
        stemmer: A PyStemmer language (e.g. "english") to stem tokens, or None (default).
        temperature: None (normalised scores) or a softmax temperature over BM25 scores.
        prior_weight: Weight of the (uniform) prior for tools added after fit.
    """

    retriever_id: ClassVar[str] = "bm25"
    accepts_no_demos: ClassVar[bool] = True  # needs no demonstrations by nature
    bench_default: ClassVar[bool] = True
    uses_history: ClassVar[bool] = False
    predicts_end: ClassVar[bool] = False
    uses_encoder: ClassVar[bool] = False

    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"
    stopwords: str | None = "english"
    stemmer: str | None = None
    temperature: float | None = None
    prior_weight: float = 0.1

    @classmethod
    def unavailable_reason(cls, **params: Any) -> str | None:
        """Why this retriever cannot run here (bm25s missing), or None."""
        try:
            _import_bm25s()
        except ImportError as exc:
            return str(exc)
        return None

    def _stem_function(self) -> Any:
        if self.stemmer is None:
            return None
        try:
            stemmer_module = importlib.import_module("Stemmer")
        except ImportError as exc:
            raise ImportError(
                f"stemmer={self.stemmer!r} needs PyStemmer: pip install PyStemmer"
            ) from exc
        return stemmer_module.Stemmer(self.stemmer).stemWords

    def _tokenize(self, texts: list[str], *, return_ids: bool) -> Any:
        bm25s = _import_bm25s()
        return bm25s.tokenize(
            [split_identifiers(t) for t in texts],
            lower=True,
            stopwords=self.stopwords,
            stemmer=self._stem_fn,
            return_ids=return_ids,
            show_progress=False,
        )

    def _build_index(self, tools: Toolset) -> None:
        bm25s = _import_bm25s()
        self._stem_fn = self._stem_function()
        corpus = self._tokenize([t.text() for t in tools], return_ids=True)
        index = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        index.index(corpus, show_progress=False)
        self._index = index
        self._vocab: dict[str, int] = dict(index.vocab_dict)
        self.vocabulary_size_ = len(corpus.vocab)

    def _check_params(self) -> None:
        super()._check_params()
        check_number(self.k1, "k1", low=0.0)
        check_number(self.b, "b", low=0.0, high=1.0)
        check_number(self.temperature, "temperature", low=0.0, low_open=True, optional=True)

    def _fit(self, demos: list[Demonstration], tools: Toolset) -> None:
        self._build_index(tools)

    def bm25_scores(self, query: str, *, remember: bool = True) -> np.ndarray:
        """BM25 score of every fitted tool for `query` (float64, zeros when no term matches).

        Args:
            query: The request.
            remember: Keep the scores in the per-query memo. A caller that keeps what it needs
                of them itself passes False: on large catalogues each vector is large.
        """
        self._check_fitted()
        if not remember:
            return self._compute_scores(query)
        return self._memo(query, "bm25", self._compute_scores)

    def _compute_scores(self, query: str) -> np.ndarray:
        tokens: list[str] = self._tokenize([query], return_ids=False)[0]
        ids = [self._vocab[t] for t in tokens if t in self._vocab]
        n = len(self.fit_tools_)
        if not ids:
            return np.zeros(n)
        scores = np.asarray(self._index.get_scores_from_ids(ids), dtype=np.float64)
        return scores[:n]

    def _score(self, query: str, history: tuple[str, ...]) -> Scores:
        scores = self.bm25_scores(query)
        top = float(scores.max()) if len(scores) else 0.0
        if top <= 0.0:
            probs = np.full(len(scores), 1.0 / len(scores))
            explanation: dict[str, Any] = {"bm25": "no query term in any tool (uniform)"}
        else:
            probs = similarity_probabilities(scores, self.temperature)
            explanation = {"bm25_max": round(top, 3)}
        return Scores(
            with_end(probs, self.end_rate_),
            explanation,
            tool_why=score_why(scores, "bm25", ".2f"),
        )

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return {"vocabulary_size": self.vocabulary_size_}, {}

    def _set_state(self, state: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        self._build_index(self.fit_tools_)
        saved = state.get("vocabulary_size")
        if saved is not None and int(saved) != self.vocabulary_size_:
            raise ModelLoadError(
                f"BM25 index rebuilt from the saved catalogue has {self.vocabulary_size_} terms, "
                f"the saved model had {saved} (another bm25s version or stop-word list?)"
            )


__all__ = ["BM25_INSTALL_HINT", "BM25Retriever", "split_identifiers"]
