"""Sentence encoders: one protocol, a sentence-transformers encoder, TF-IDF, and a cache.

Every encoder returns L2-normalised float32 rows, so a dot product is a cosine similarity.
The package holds the protocols (`base`), model resolution without loading (`hub`), the
sentence-transformers encoder (`sentence`), TF-IDF (`tfidf`) and the embedding cache (`cache`);
every public name imports from here.
"""

from __future__ import annotations

from pathlib import Path

from cachetools import LRUCache

from dtdr_agents.foundation.encoders.base import (
    Encoder,
    EncoderWrapper,
    FittableEncoder,
    TokenLimited,
)
from dtdr_agents.foundation.encoders.cache import CachedEncoder, default_cache_dir
from dtdr_agents.foundation.encoders.external import (
    CallableEncoder,
    EmbeddingModel,
    EncoderSpec,
    embedding_kind,
)
from dtdr_agents.foundation.encoders.hub import (
    _MINILM_ALIASES,
    DEFAULT_MODEL,
    ENCODER_CHOICES,
    bundled_minilm_path,
    check_encoder_spec,
    declared_dim,
    encoder_problem,
    hub_cache_dirs,
)
from dtdr_agents.foundation.encoders.onnx import ONNX_SPECS, OnnxEncoder, onnx_choice
from dtdr_agents.foundation.encoders.sentence import SentenceTransformerEncoder
from dtdr_agents.foundation.encoders.tfidf import TfidfEncoder, VocabularyCheck, tfidf_of


def token_limit(encoder: Encoder) -> TokenLimited | None:
    """The encoder (unwrapped from a cache) if it truncates its inputs, else None."""
    inner = encoder.inner if isinstance(encoder, CachedEncoder) else encoder
    return inner if isinstance(inner, TokenLimited) else None


_SHARED: dict[tuple[str, str | None], CachedEncoder] = {}


def get_encoder(spec: EncoderSpec = None, *, cache_dir: str | Path | None = None) -> Encoder:
    """Resolve an encoder spec.

    Args:
        spec: An `Encoder` (returned as is), None or "default" (all-MiniLM-L6-v2, offline),
            "tfidf" (a new, unfitted `TfidfEncoder`), "onnx" or "onnx-int8" (MiniLM's ONNX
            export, see `dtdr_agents.foundation.encoders.onnx`, which also says when "default"
            runs on ONNX Runtime), any sentence-transformers name or path,
            or an embedding model: a LangChain `Embeddings`, a LlamaIndex `BaseEmbedding` or
            a callable `list[str] -> vectors` (see `CallableEncoder`; a plain callable needs
            an id, so wrap it in one).
        cache_dir: Optional on-disk embedding cache folder (an embedding model's default:
            `default_cache_dir()`).

    Returns:
        The encoder; sentence-transformers encoders and embedding models are cached and
        shared within the process (one `CallableEncoder` per model object).
    """
    if spec is not None and not isinstance(spec, str):
        if isinstance(spec, Encoder):
            return spec
        if embedding_kind(spec) is None:
            raise TypeError(
                "encoder must be a name, a path, an Encoder, a LangChain Embeddings, a LlamaIndex "
                f"embedding or a callable list[str] -> vectors, got {type(spec).__name__}"
            )
        return _shared_model_encoder(spec, cache_dir)
    name = spec or "default"
    if name == "tfidf":
        return TfidfEncoder()
    folder = onnx_choice(name)  # MiniLM on ONNX Runtime (no torch), or None
    cache_key = str(cache_dir) if cache_dir is not None else None
    key = (name if folder is None else f"onnx:{folder}", cache_key)
    if key not in _SHARED:
        inner = SentenceTransformerEncoder(name) if folder is None else OnnxEncoder(folder)
        _SHARED[key] = CachedEncoder(inner, cache_dir=cache_dir)
    return _SHARED[key]


_SHARED_MODELS: LRUCache[tuple[int, str | None], tuple[object, CallableEncoder]] = LRUCache(32)
"""The encoders of the 32 embedding model objects used last (each entry holds its model)."""


def _shared_model_encoder(model: EmbeddingModel, cache_dir: str | Path | None) -> CallableEncoder:
    """The `CallableEncoder` of an embedding model object, one per object and cache folder."""
    key = (id(model), str(cache_dir) if cache_dir is not None else None)
    held = _SHARED_MODELS.get(key)
    if held is None or held[0] is not model:  # the entry keeps `model` alive: ids stay unique
        held = (model, CallableEncoder(model, cache_dir=cache_dir))
        _SHARED_MODELS[key] = held
    return held[1]


def is_builtin_encoder(spec: object) -> bool:
    """Whether `spec` names an encoder of this package (MiniLM offline, TF-IDF).

    Anything else is a model that would be loaded from a path or a hub id.
    """
    return spec is None or spec == "tfidf" or spec in _MINILM_ALIASES or spec in ONNX_SPECS


def encoder_spec(encoder: Encoder | EmbeddingModel) -> str:
    """The spec string that `get_encoder` turns back into an equivalent encoder.

    An encoder object with no such string (an embedding model, a custom `Encoder`) gives its
    id; `needs_encoder_object` tells them apart.
    """
    if not isinstance(encoder, Encoder):
        encoder = get_encoder(encoder)
    inner = encoder.inner if isinstance(encoder, CachedEncoder) else encoder
    if isinstance(inner, SentenceTransformerEncoder):
        return inner.model
    if isinstance(inner, TfidfEncoder):
        return "tfidf"
    if isinstance(inner, OnnxEncoder):
        return inner.spec
    return encoder.id


def needs_encoder_object(encoder: Encoder) -> bool:
    """Whether a model fitted with `encoder` needs the encoder object again to load.

    True unless it is (inside its cache) MiniLM, a sentence-transformers model or TF-IDF,
    which a saved model rebuilds from its spec or state.
    """
    while isinstance(encoder, EncoderWrapper):
        encoder = encoder.inner
    return not isinstance(encoder, SentenceTransformerEncoder | TfidfEncoder | OnnxEncoder)


__all__ = [
    "DEFAULT_MODEL",
    "ENCODER_CHOICES",
    "CachedEncoder",
    "CallableEncoder",
    "EmbeddingModel",
    "Encoder",
    "EncoderSpec",
    "EncoderWrapper",
    "FittableEncoder",
    "OnnxEncoder",
    "SentenceTransformerEncoder",
    "TfidfEncoder",
    "TokenLimited",
    "VocabularyCheck",
    "bundled_minilm_path",
    "check_encoder_spec",
    "declared_dim",
    "default_cache_dir",
    "encoder_problem",
    "encoder_spec",
    "get_encoder",
    "hub_cache_dirs",
    "is_builtin_encoder",
    "needs_encoder_object",
    "tfidf_of",
    "token_limit",
]
