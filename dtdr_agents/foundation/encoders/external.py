"""Any embedding model as encoder: a callable, a LangChain `Embeddings`, a LlamaIndex embedding.

The model is recognised by duck typing (nothing here imports LangChain or LlamaIndex):
`embed_documents(texts)` (LangChain), `get_text_embedding_batch(texts)` (LlamaIndex), or a
plain `Callable[[list[str]], array-like]`. `CallableEncoder` calls it in batches, checks every
answer (one finite vector of one size per text), L2-normalises the rows and caches them in
memory and on disk, keyed by the encoder id, so a text is embedded once across fits and runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeAlias

import numpy as np

from dtdr_agents.foundation.checks import check_number
from dtdr_agents.foundation.encoders.base import Encoder, _normalise
from dtdr_agents.foundation.encoders.cache import CachedEncoder, default_cache_dir
from dtdr_agents.foundation.errors import EncoderOutputError


class LangChainEmbeddingsLike(Protocol):
    """What is used of a LangChain `Embeddings`."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text."""
        ...


class LlamaIndexEmbeddingLike(Protocol):
    """What is used of a LlamaIndex `BaseEmbedding`."""

    def get_text_embedding_batch(
        self, texts: list[str], show_progress: bool = False, **kwargs: Any
    ) -> list[list[float]]:
        """One vector per text."""
        ...


EmbeddingModel: TypeAlias = (
    LangChainEmbeddingsLike | LlamaIndexEmbeddingLike | Callable[[list[str]], Any]
)
"""An embedding model `CallableEncoder` adapts: texts in, one vector per text out."""

EncoderSpec: TypeAlias = str | Encoder | EmbeddingModel | None
"""What `encoder=` accepts (see `get_encoder`)."""

_NAME_FIELDS = ("model", "model_name", "model_id", "deployment_name")
"""Attributes that name the model of a LangChain or LlamaIndex embedding object."""

_UNNAMED = {"", "unknown"}  # LlamaIndex's BaseEmbedding.model_name default


def embedding_kind(model: object) -> str | None:
    """The kind of embedding model `model` is: "langchain", "llama-index", "callable" or None.

    Recognised by duck typing: `embed_documents` (a LangChain `Embeddings`),
    `get_text_embedding_batch` (a LlamaIndex `BaseEmbedding`), or any other callable.
    """
    if callable(getattr(model, "embed_documents", None)):
        return "langchain"
    if callable(getattr(model, "get_text_embedding_batch", None)):
        return "llama-index"
    return "callable" if callable(model) else None


def derived_id(model: object) -> str | None:
    """`<framework>:<class>:<model name>[:<dimensions>]` of an embedding object, or None.

    None for a plain callable, and for an object that does not name its model.
    """
    kind = embedding_kind(model)
    if kind in (None, "callable"):
        return None
    name = next(
        (
            v
            for v in (getattr(model, f, None) for f in _NAME_FIELDS)
            if isinstance(v, str) and v.strip().lower() not in _UNNAMED
        ),
        None,
    )
    if name is None:
        return None
    out = f"{kind}:{type(model).__name__}:{name}"
    dims = getattr(model, "dimensions", None)
    if isinstance(dims, int) and not isinstance(dims, bool):
        out += f":{dims}"
    return out


class _ModelCall:
    """The uncached encoder: calls the model in batches and checks each answer."""

    def __init__(self, model: Any, kind: str, id: str, dim: int | None, batch_size: int) -> None:
        self.model = model
        self.kind = kind
        self._id = id
        self._dim = dim
        self._declared = dim is not None
        self.batch_size = batch_size

    @property
    def id(self) -> str:
        return self._id

    @property
    def dim(self) -> int:
        if self._dim is None:  # `CallableEncoder` learns it when built
            raise EncoderOutputError(f"encoder {self._id!r}: its dimension is not known yet")
        return self._dim

    def _call(self, texts: list[str]) -> Any:
        if self.kind == "langchain":
            return self.model.embed_documents(texts)
        if self.kind == "llama-index":
            return self.model.get_text_embedding_batch(texts, show_progress=False)
        return self.model(texts)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        batches = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            batches.append(self._check(batch, self._call(batch)))
        return _normalise(np.concatenate(batches))

    def _fail(self, problem: str) -> EncoderOutputError:
        return EncoderOutputError(
            f"encoder {self._id!r} ({self.kind} {type(self.model).__name__}): the embedding "
            f"model {problem}; nothing of this call was cached"
        )

    def _check(self, texts: list[str], out: Any) -> np.ndarray:
        """The answer for `texts` as a float64 matrix, or a clear error naming the encoder."""
        try:
            rows = [np.asarray(row, dtype=np.float64) for row in out]
        except (TypeError, ValueError) as exc:
            raise self._fail(
                f"returned {type(out).__name__}, not one vector of numbers per text ({exc})"
            ) from None
        if len(rows) != len(texts):
            raise self._fail(f"returned {len(rows)} vectors for {len(texts)} texts")
        want = self._dim
        for i, row in enumerate(rows):
            text = texts[i][:60]
            if row.ndim != 1 or row.size == 0:
                raise self._fail(f"returned an array of shape {row.shape} for the text {text!r}")
            if want is None:
                want = row.size
            if row.size != want and self._declared:
                raise self._fail(
                    f"returned {row.size} values for the text {text!r}, not its declared dim {want}"
                )
            if row.size != want:
                raise self._fail(
                    f"returned vectors of varying size: {row.size} values for the text "
                    f"{text!r}, {want} before"
                )
            if not np.isfinite(row).all():
                raise self._fail(f"returned NaN or infinite values for the text {text!r}")
        self._dim = want
        return np.stack(rows)

    def __repr__(self) -> str:
        return f"{type(self.model).__name__}({self._id!r})"


class CallableEncoder(CachedEncoder):
    """Any embedding model as encoder, cached in memory and on disk.

    `encoder=` accepts the model itself (wrapped in one of these, shared per model object);
    build one yourself to give an id, a dimension, a batch size or a cache folder. A saved
    retriever records the id; loading it needs the model again
    (`load_retriever(path, encoder=...)`) and refuses one with another id.

    Example:
        .. code-block:: python

            enc = CallableEncoder(my_fn, id="openai:text-embedding-3-small", dim=1536)
            model = make_retriever("dtdr-c", encoder=enc).fit(demos, tools)

    Args:
        model: A LangChain `Embeddings` (its `embed_documents` embeds every text, requests
            included, so one vector serves both), a LlamaIndex `BaseEmbedding`
            (`get_text_embedding_batch`), or a `Callable[[list[str]], array-like]` returning
            one vector per text.
        id: A stable id of the model and its weights: the cache key and what a saved model
            records. Default for a LangChain or LlamaIndex object:
            `<framework>:<class>:<model name>[:<dimensions>]`; a plain callable needs one.
        dim: The embedding dimension, checked on every answer. None: learned when built, by
            embedding `PROBE` (through the cache, so once per id and cache folder).
        batch_size: Texts per call of the model.
        cache_dir: Folder of the on-disk cache (default `default_cache_dir()`).
        disk_cache: False keeps the cache in memory only.

    Raises:
        TypeError: `model` is not an embedding model.
        ValueError: `batch_size` or `dim` is not a positive integer; or no id is given and
            none can be derived (a plain callable, an unnamed model).
        EncoderOutputError: (from `encode`) the model returned a different number of vectors
            than texts, vectors of varying size, or NaN or infinite values.
    """

    PROBE = "dimension probe"
    """The text embedded to learn the dimension when none is given."""

    def __init__(
        self,
        model: EmbeddingModel,
        *,
        id: str | None = None,
        dim: int | None = None,
        batch_size: int = 64,
        cache_dir: str | Path | None = None,
        disk_cache: bool = True,
    ) -> None:
        kind = embedding_kind(model)
        if kind is None:
            raise TypeError(
                "an embedding model must be a LangChain Embeddings (embed_documents), a "
                "LlamaIndex BaseEmbedding (get_text_embedding_batch) or a callable "
                f"list[str] -> vectors; got {type(model).__name__}"
            )
        check_number(batch_size, "CallableEncoder batch_size", low=1, integer=True)
        check_number(dim, "CallableEncoder dim", low=1, integer=True, optional=True)
        model_id = id if id is not None else derived_id(model)
        if not model_id or not isinstance(model_id, str):
            raise ValueError(
                f"cannot tell which model {type(model).__name__} is (a plain callable, or no "
                f"{'/'.join(_NAME_FIELDS)} attribute): give it a stable id, "
                "CallableEncoder(model, id='provider:model-name')"
            )
        folder = (
            (cache_dir if cache_dir is not None else default_cache_dir()) if disk_cache else None
        )
        self._call = _ModelCall(model, kind, model_id, dim, batch_size)
        super().__init__(self._call, cache_dir=folder)
        if dim is None:  # learned now: isinstance checks read `dim`, so it must not call out
            self._call._dim = int(self.encode([self.PROBE]).shape[1])

    @property
    def model(self) -> Any:
        """The wrapped embedding model."""
        return self._call.model

    @property
    def batch_size(self) -> int:
        """Texts per call of the model."""
        return self._call.batch_size

    def __repr__(self) -> str:
        return f"CallableEncoder({self.inner!r}, cache_dir={self.cache_dir!r})"


__all__ = [
    "CallableEncoder",
    "EmbeddingModel",
    "EncoderSpec",
    "LangChainEmbeddingsLike",
    "LlamaIndexEmbeddingLike",
    "derived_id",
    "embedding_kind",
]
