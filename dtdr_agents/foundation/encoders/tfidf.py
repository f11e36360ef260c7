"""TF-IDF + SVD encoder (no model weights) and its out-of-distribution vocabulary check."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from dtdr_agents.foundation.encoders.base import Encoder, _normalise
from dtdr_agents.foundation.encoders.cache import CachedEncoder
from dtdr_agents.foundation.errors import ModelArrayError, ModelLoadError, NotFittedError

MAX_TOKEN_CHARS = 100
"""Longest word the TF-IDF vocabulary keeps: a longer run of word characters (a pasted blob,
a 50 MB "word") is no word and is skipped, so one request cannot fill the saved vocabulary
(at most `max_features` entries of at most two words each)."""
TOKEN_PATTERN = rf"(?u)\b\w{{1,{MAX_TOKEN_CHARS}}}\b"
"""The vectoriser's `token_pattern`: words of 1 to `MAX_TOKEN_CHARS` word characters."""


class TfidfEncoder:
    """TF-IDF followed by truncated SVD (LSA): a dense encoder that needs no model weights.

    It must be fitted on a corpus (retrievers fit it on their demonstrations and tools) and is
    saved with the retriever.

    Args:
        dim: Output dimension (capped by the corpus size).
        max_features: Vocabulary size cap.
        seed: Seed of the SVD.
    """

    def __init__(self, dim: int = 256, *, max_features: int = 20000, seed: int = 0) -> None:
        self.dim_requested = dim
        self.max_features = max_features
        self.seed = seed
        self.vocabulary_: list[str] | None = None
        self.idf_: np.ndarray | None = None
        self.components_: np.ndarray | None = None

    @property
    def is_fitted(self) -> bool:
        """Whether the vocabulary and projection are learned."""
        return self.components_ is not None

    @property
    def id(self) -> str:
        """`tfidf:<hash of vocabulary, idf and projection>` once fitted."""
        if not self.is_fitted:
            return "tfidf:unfitted"
        assert self.idf_ is not None and self.components_ is not None
        digest = hashlib.sha256()
        digest.update("\n".join(self.vocabulary_ or []).encode())
        digest.update(self.idf_.tobytes())
        digest.update(self.components_.tobytes())
        return f"tfidf:{digest.hexdigest()[:12]}"

    @property
    def dim(self) -> int:
        """Output dimension: the requested one until fitted, then the learned one."""
        if self.components_ is None:
            return self.dim_requested
        return int(self.components_.shape[0])

    def _counts(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The vocabulary's words and word pairs in each text, counted.

        What scikit-learn's `CountVectorizer(vocabulary=..., ngram_range=(1, 2))` counts,
        without importing it (loading and ranking a model imports no scikit-learn).

        Returns:
            The number of distinct terms of each text, then for each text in turn its terms'
            columns (ascending) and counts.
        """
        cached: tuple[int, dict[str, int]] | None = getattr(self, "_column_cache", None)
        if cached is None or cached[0] != id(self.vocabulary_):
            cached = (id(self.vocabulary_), {t: j for j, t in enumerate(self.vocabulary_ or [])})
            self._column_cache = cached
        column = cached[1]
        lengths: list[int] = []
        columns: list[int] = []
        counts: list[int] = []
        for text in texts:
            words = self.words(text)
            row: dict[int, int] = {}
            for term in (*words, *map(" ".join, pairwise(words))):
                j = column.get(term)
                if j is not None:
                    row[j] = row.get(j, 0) + 1
            keys = sorted(row)
            lengths.append(len(keys))
            columns.extend(keys)
            counts.extend(row[j] for j in keys)
        return (
            np.asarray(lengths, dtype=np.intp),
            np.asarray(columns, dtype=np.intp),
            np.asarray(counts, dtype=np.float32),
        )

    def fit(self, texts: Sequence[str]) -> TfidfEncoder:
        """Learn the vocabulary, idf weights and SVD projection from `texts`."""
        from sklearn.decomposition import TruncatedSVD
        from sklearn.feature_extraction.text import TfidfVectorizer

        if len(texts) < 2:
            raise ValueError("TfidfEncoder.fit needs at least 2 texts")
        vec = TfidfVectorizer(
            ngram_range=(1, 2),
            token_pattern=TOKEN_PATTERN,
            max_features=self.max_features,
            sublinear_tf=True,
        )
        matrix = vec.fit_transform(list(texts))
        vocab = vec.get_feature_names_out().tolist()
        order = [vec.vocabulary_[t] for t in vocab]
        self.vocabulary_ = vocab
        self.idf_ = np.asarray(vec.idf_, dtype=np.float32)[order]
        n_comp = max(1, min(self.dim_requested, matrix.shape[1] - 1, matrix.shape[0] - 1))
        svd = TruncatedSVD(n_components=n_comp, random_state=self.seed)
        svd.fit(matrix[:, order])
        self.components_ = np.asarray(svd.components_, dtype=np.float32)
        return self

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed `texts` with the learned TF-IDF + SVD projection."""
        if self.components_ is None or self.idf_ is None:
            raise NotFittedError("TfidfEncoder is not fitted: call fit(texts) first")
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        # sublinear tf x idf, each row's norm and its projection, summed in the order and the
        # float32 precision of the sparse product scikit-learn's vectoriser leads to: the
        # embeddings are those of the fitted scikit-learn pipeline (tests/test_light_import.py)
        lengths, columns, counts = self._counts(texts)
        weights = (1.0 + np.log(counts)) * self.idf_[columns]
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        filled = np.flatnonzero(lengths)
        norms = np.zeros(len(texts), dtype=np.float32)
        if len(filled):
            norms[filled] = np.add.reduceat(weights * weights, starts[filled])
        norms = np.sqrt(norms)
        norms[norms == 0] = 1.0
        rows = np.repeat(np.arange(len(texts)), lengths)
        position = np.arange(len(columns)) - starts[rows]
        dense = np.zeros((len(texts), self.dim), dtype=np.float32)
        for k in range(int(lengths.max())):
            at = position == k
            dense[rows[at]] += weights[at][:, None] * self.components_[:, columns[at]].T
        return _normalise(dense / norms[:, None])

    def words(self, text: str) -> list[str]:
        """The words (unigram tokens, lower-cased) the vectoriser reads in `text`."""
        return _WORD.findall(text.lower())

    def known_fraction(self, texts: Sequence[str]) -> np.ndarray:
        """Fraction of each text's words that are in the vocabulary (0.0 for no word).

        A TF-IDF encoder sees only known words, so a request of unknown words embeds to
        the zero vector (or to the few known words, e.g. "the"): its embedding cannot tell
        it is out of distribution, but this fraction can (see `VocabularyCheck`).
        """
        if self.vocabulary_ is None:
            raise NotFittedError("TfidfEncoder is not fitted: call fit(texts) first")
        vocab = self._unigrams()
        out = np.zeros(len(texts), dtype=np.float64)
        for i, text in enumerate(texts):
            words = self.words(text)
            if words:
                out[i] = sum(w in vocab for w in words) / len(words)
        return out

    def _unigrams(self) -> frozenset[str]:
        cached: tuple[int, frozenset[str]] | None = getattr(self, "_unigram_cache", None)
        if cached is None or cached[0] != id(self.vocabulary_):
            vocab = frozenset(t for t in self.vocabulary_ or [] if " " not in t)
            cached = (id(self.vocabulary_), vocab)
            self._unigram_cache = cached
        return cached[1]

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Config and arrays for saving (no pickle)."""
        if self.components_ is None or self.idf_ is None:
            raise NotFittedError("TfidfEncoder is not fitted")
        config = {
            "dim": self.dim_requested,
            "max_features": self.max_features,
            "seed": self.seed,
            "vocabulary": self.vocabulary_,
        }
        return config, {"idf": self.idf_, "components": self.components_}

    @classmethod
    def from_state(
        cls, config: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
    ) -> TfidfEncoder:
        """Rebuild a fitted encoder from `state()` output."""
        try:
            enc = cls(
                int(config["dim"]),
                max_features=int(config["max_features"]),
                seed=int(config["seed"]),
            )
            enc.vocabulary_ = [str(t) for t in config["vocabulary"]]
            enc.idf_ = np.asarray(arrays["idf"], dtype=np.float32)
            enc.components_ = np.asarray(arrays["components"], dtype=np.float32)
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelLoadError(f"corrupt TF-IDF encoder state: {exc}") from exc
        n = len(enc.vocabulary_)
        if enc.idf_.shape != (n,):
            raise ModelArrayError("idf", f"must hold one weight per vocabulary entry ({n})")
        if enc.components_.ndim != 2 or enc.components_.shape[1] != n:
            raise ModelArrayError("components", f"must have one column per vocabulary entry ({n})")
        for name, values in (("idf", enc.idf_), ("components", enc.components_)):
            if not np.isfinite(values).all():
                raise ModelArrayError(name, "holds NaN or infinite values")
        if (enc.idf_ <= 0).any():  # smoothed idf is at least 1
            raise ModelArrayError("idf", "must hold weights > 0")
        return enc

    def __repr__(self) -> str:
        return f"TfidfEncoder(dim={self.dim_requested})"


_WORD = re.compile(TOKEN_PATTERN)


@dataclass(frozen=True)
class VocabularyCheck:
    """Out-of-distribution test for encoders that only see known words (TF-IDF).

    A request is out of distribution when the fraction of its words in the vocabulary is
    below `threshold`, or when it has no known word at all. The threshold is calibrated on
    the demonstrations by leaving each request out: a word counts as known for a request
    only if another demonstration request or a tool description also uses it.

    Attributes:
        threshold: Smallest in-distribution fraction of known words.
    """

    threshold: float

    @classmethod
    def calibrate(
        cls,
        encoder: TfidfEncoder,
        queries: Sequence[str],
        tool_texts: Sequence[str],
        quantile: float,
    ) -> VocabularyCheck:
        """The `1 - quantile` quantile of the held-out known-word fraction of `queries`."""
        vocab = encoder._unigrams()
        unique = list(dict.fromkeys(queries))
        word_sets = [set(encoder.words(q)) for q in unique]
        tool_words = {w for t in tool_texts for w in encoder.words(t)}
        df: dict[str, int] = {}
        for word_set in word_sets:
            for w in word_set:
                df[w] = df.get(w, 0) + 1
        fractions = []
        for query, own in zip(unique, word_sets, strict=True):
            words = encoder.words(query)
            if not words:
                continue
            known = [
                w in vocab and (w in tool_words or df.get(w, 0) - (w in own) > 0) for w in words
            ]
            fractions.append(sum(known) / len(words))
        if not fractions:
            return cls(0.0)
        return cls(float(np.quantile(fractions, 1.0 - quantile)))

    @classmethod
    def for_encoder(
        cls,
        encoder: Encoder | None,
        queries: Sequence[str],
        tool_texts: Sequence[str],
        quantile: float | None,
    ) -> VocabularyCheck | None:
        """A calibrated check when `encoder` is a fitted TF-IDF encoder, else None."""
        tfidf = tfidf_of(encoder)
        if tfidf is None or quantile is None:
            return None
        return cls.calibrate(tfidf, queries, tool_texts, quantile)

    def reason(self, encoder: Encoder | None, query: str) -> str | None:
        """Why `query` is out of distribution, or None (None for a non-TF-IDF encoder)."""
        tfidf = tfidf_of(encoder)
        if tfidf is None:
            return None
        fraction = float(tfidf.known_fraction([query])[0])
        if fraction > 0.0 and fraction >= self.threshold:
            return None
        return (
            f"only {fraction:.0%} of the request's words are in the TF-IDF vocabulary "
            f"(in-distribution requests: at least {self.threshold:.0%})"
        )


def tfidf_of(encoder: Encoder | None) -> TfidfEncoder | None:
    """The TF-IDF encoder inside `encoder` (unwrapped from a cache), or None."""
    inner = encoder.inner if isinstance(encoder, CachedEncoder) else encoder
    return inner if isinstance(inner, TfidfEncoder) and inner.is_fitted else None
