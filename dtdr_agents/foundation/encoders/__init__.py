"""Sentence encoders: one protocol, a sentence-transformers encoder, TF-IDF, and a cache.

Every encoder returns L2-normalised float32 rows, so a dot product is a cosine similarity.
The package holds the protocols (`base`), model resolution without loading (`hub`), the
sentence-transformers encoder (`sentence`), TF-IDF (`tfidf`) and the embedding cache (`cache`);
every public name imports from here.
"""

from __future__ import annotations

from pathlib import Path

from dtdr_agents.foundation.encoders.base import (
    Encoder,
    EncoderWrapper,
    FittableEncoder,
    TokenLimited,
)
from dtdr_agents.foundation.encoders.cache import CachedEncoder, default_cache_dir
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
from dtdr_agents.foundation.encoders.sentence import SentenceTransformerEncoder
from dtdr_agents.foundation.encoders.tfidf import TfidfEncoder, VocabularyCheck, tfidf_of


def token_limit(encoder: Encoder) -> TokenLimited | None:
    """The encoder (unwrapped from a cache) if it truncates its inputs, else None."""
    inner = encoder.inner if isinstance(encoder, CachedEncoder) else encoder
    return inner if isinstance(inner, TokenLimited) else None


_SHARED: dict[tuple[str, str | None], CachedEncoder] = {}


def get_encoder(
    spec: str | Encoder | None = None, *, cache_dir: str | Path | None = None
) -> Encoder:
    """Resolve an encoder spec.

    Args:
        spec: An `Encoder` (returned as is), None or "default" (all-MiniLM-L6-v2, offline),
            "tfidf" (a new, unfitted `TfidfEncoder`), or any sentence-transformers name or path.
        cache_dir: Optional on-disk embedding cache folder for sentence-transformers encoders.

    Returns:
        The encoder; sentence-transformers encoders are cached and shared within the process.
    """
    if spec is not None and not isinstance(spec, str):
        if not isinstance(spec, Encoder):
            raise TypeError(
                f"encoder must be a name, a path or an Encoder, got {type(spec).__name__}"
            )
        return spec
    name = spec or "default"
    if name == "tfidf":
        return TfidfEncoder()
    key = (name, str(cache_dir) if cache_dir is not None else None)
    if key not in _SHARED:
        _SHARED[key] = CachedEncoder(SentenceTransformerEncoder(name), cache_dir=cache_dir)
    return _SHARED[key]


def is_builtin_encoder(spec: object) -> bool:
    """Whether `spec` names an encoder of this package (MiniLM offline, TF-IDF).

    Anything else is a model that would be loaded from a path or a hub id.
    """
    return spec is None or spec == "tfidf" or spec in _MINILM_ALIASES


def encoder_spec(encoder: Encoder) -> str:
    """The spec string that `get_encoder` turns back into an equivalent encoder."""
    inner = encoder.inner if isinstance(encoder, CachedEncoder) else encoder
    if isinstance(inner, SentenceTransformerEncoder):
        return inner.model
    if isinstance(inner, TfidfEncoder):
        return "tfidf"
    return encoder.id


__all__ = [
    "DEFAULT_MODEL",
    "ENCODER_CHOICES",
    "CachedEncoder",
    "Encoder",
    "EncoderWrapper",
    "FittableEncoder",
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
    "tfidf_of",
    "token_limit",
]
