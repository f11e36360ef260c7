"""The encoder protocols and the base of an encoder that wraps another."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Encoder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension."""

    @property
    def id(self) -> str:
        """A stable identifier of the encoder and its weights, recorded in saved models."""
        ...

    @property
    def dim(self) -> int:
        """The embedding dimension."""
        ...

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed `texts` as an `(len(texts), dim)` float32 array with unit-norm rows."""
        ...


@runtime_checkable
class FittableEncoder(Encoder, Protocol):
    """An encoder that learns from a corpus (e.g. TF-IDF) and is saved with the retriever."""

    @property
    def is_fitted(self) -> bool:
        """Whether `fit` (or `from_state`) has run."""
        ...

    def fit(self, texts: Sequence[str]) -> FittableEncoder:
        """Learn from `texts`; returns self."""
        ...

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON-able config and named arrays that `from_state` restores."""
        ...


@runtime_checkable
class TokenLimited(Protocol):
    """An encoder that reads at most `max_tokens` tokens of a text and ignores the rest."""

    @property
    def max_tokens(self) -> int:
        """Tokens read per text (special tokens excluded)."""
        ...

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Number of tokens of each text."""
        ...

    def truncate_tokens(self, text: str, n: int) -> str:
        """The longest prefix of `text` holding at most `n` tokens."""
        ...


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    out: np.ndarray = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    return out


class EncoderWrapper:
    """An encoder around another one: `id` and `dim` are the wrapped encoder's.

    Subclasses (the embedding cache, the timing wrapper of the ToolQP speed benchmark) override
    `encode`; by default it calls the wrapped encoder.
    """

    def __init__(self, inner: Encoder) -> None:
        self.inner = inner

    @property
    def id(self) -> str:
        """The wrapped encoder's id."""
        return self.inner.id

    @property
    def dim(self) -> int:
        """The wrapped encoder's dimension."""
        return self.inner.dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """The wrapped encoder's embedding of `texts`."""
        return self.inner.encode(texts)
