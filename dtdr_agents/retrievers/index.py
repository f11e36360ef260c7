"""The candidate stage: top-k tools by query-tool cosine similarity, exact or approximate.

Up to `EXACT_LIMIT` tools the search is an exact NumPy product (fast and simple at that size).
Beyond it, an HNSW graph from the `usearch` package answers in well under a millisecond at
100,000 tools; it holds its own copy of the vectors in half precision (`HNSW_DTYPE`, usearch's
own quantisation). The HNSW graph is saved as the library's own byte buffer inside a model's
safetensors file (no pickle) and restored from it, in the precision it was built with.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from dtdr_agents.foundation.errors import DTDRError, ModelLoadError

EXACT_LIMIT = 20_000
"""Catalogues up to this many tools are searched exactly (NumPy); larger ones need HNSW."""

INDEX_INSTALL_HINT = "pip install 'dtdr-agents[index]'"
"""How to install `usearch`, the HNSW library of the candidate stage."""

VectorKind = Literal["f32", "f16"]

HNSW_DTYPE: VectorKind = "f16"
"""The precision of the HNSW index's own copy of the vectors (usearch's `dtype`).

Half precision halves that copy (at 100,000 MiniLM vectors, 77 MB instead of 154 MB) and
halves the build; on 20,000 random unit vectors its top-100 overlap with exact search was
within 0.6 points of single precision's. Exact search always uses the float32 rows."""

IndexKind = Literal["exact", "hnsw"]


class IndexUnavailableError(DTDRError, RuntimeError):
    """A catalogue is too large for exact search and no approximate index package is installed."""


def _import_usearch() -> Any:
    _load_onnxruntime_first()
    try:
        from usearch.index import Index
    except ImportError:
        return None
    return Index


def _load_onnxruntime_first() -> None:
    """Import ONNX Runtime before usearch where both are installed.

    With usearch 2.26.6 and onnxruntime 1.32.0 (x86-64 Linux wheels), importing onnxruntime
    after usearch kills the process with a segmentation fault inside onnxruntime's own
    import; the other order works. The serving encoder (`OnnxEncoder`) imports onnxruntime
    when it first encodes, which can come after a large catalogue's index was built.
    """
    if "onnxruntime" in sys.modules or "usearch" in sys.modules:
        return
    if importlib.util.find_spec("onnxruntime") is not None:
        import onnxruntime  # noqa: F401


def hnsw_available() -> bool:
    """Whether the HNSW backend (`usearch`) can be imported."""
    return _import_usearch() is not None


class CandidateIndex:
    """Top-k inner-product search over L2-normalised rows (cosine similarity).

    Args:
        embeddings: One L2-normalised row per tool (float32), shape `(n, d)`. The index keeps a
            reference: exact search and the similarity of any row use it.
        exact_limit: Largest catalogue searched exactly; None forces exact search at any size.
        kind: "exact" or "hnsw" to force a backend; None chooses by `exact_limit`.
        connectivity: HNSW graph degree (usearch `connectivity`).
        expansion_search: HNSW search breadth (usearch `expansion_search`); higher is more exact.
        dtype: Precision of the HNSW index's copy of the vectors (`HNSW_DTYPE`). Below
            single precision, the candidates it finds are ranked by their float32 similarity.

    Raises:
        IndexUnavailableError: The catalogue needs HNSW and `usearch` is not installed (the
            message names the extra to install).
    """

    def __init__(
        self,
        embeddings: np.ndarray,
        *,
        exact_limit: int | None = EXACT_LIMIT,
        kind: IndexKind | None = None,
        connectivity: int = 16,
        expansion_search: int = 128,
        dtype: VectorKind = HNSW_DTYPE,
    ) -> None:
        emb = np.ascontiguousarray(embeddings, dtype=np.float32)
        if emb.ndim != 2:
            raise ValueError(f"embeddings must be a 2-D array, got shape {emb.shape}")
        if dtype not in ("f32", "f16"):
            raise ValueError(f"dtype must be 'f32' or 'f16', got {dtype!r}")
        self.embeddings = emb
        self.connectivity = connectivity
        self.expansion_search = expansion_search
        self.dtype: VectorKind = dtype
        n = len(emb)
        if kind is None:
            kind = "exact" if exact_limit is None or n <= exact_limit else "hnsw"
        if kind not in ("exact", "hnsw"):
            raise ValueError(f"kind must be 'exact' or 'hnsw', got {kind!r}")
        self.kind: IndexKind = kind
        self._hnsw: Any = None
        if kind == "hnsw":
            index_cls = _import_usearch()
            if index_cls is None:
                raise IndexUnavailableError(
                    f"a catalogue of {n:,} tools is too large for exact search (limit "
                    f"{exact_limit if exact_limit is not None else 'none':,}): install the HNSW "
                    f"index with {INDEX_INSTALL_HINT} (the usearch package), or pass "
                    "exact_limit=None to search exactly anyway"
                )
            self._hnsw = index_cls(
                ndim=emb.shape[1],
                metric="ip",
                dtype=dtype,
                connectivity=connectivity,
                expansion_search=expansion_search,
            )
            if n:
                self._hnsw.add(np.arange(n, dtype=np.uint64), emb, threads=1)

    def __len__(self) -> int:
        return len(self.embeddings)

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The `k` rows most similar to `query`: (row indices, cosine similarities), best first."""
        n = len(self.embeddings)
        k = min(int(k), n)
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        if self.kind == "hnsw":
            matches = self._hnsw.search(q, k, threads=1)
            ids = np.asarray(matches.keys, dtype=np.int64)
            keep = ids < n  # usearch pads missing results with a sentinel key
            if self.dtype == "f32":
                sims = 1.0 - np.asarray(matches.distances, dtype=np.float32)
                return ids[keep], sims[keep]
            # the half-precision graph finds them; the float32 rows rank them
            ids = ids[keep]
            sims = self.embeddings[ids] @ q
            order = np.argsort(-sims, kind="stable")
            return ids[order], sims[order]
        sims = self.embeddings @ q
        top = np.argpartition(-sims, k - 1)[:k] if k < n else np.arange(n)
        order = top[np.argsort(-sims[top], kind="stable")]
        return order.astype(np.int64), sims[order]

    # -------------------------------------------------------------------------- persistence
    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON settings and arrays (the HNSW graph as bytes) to save with a model."""
        config = {
            "kind": self.kind,
            "connectivity": self.connectivity,
            "expansion_search": self.expansion_search,
            "dtype": self.dtype,
        }
        arrays: dict[str, np.ndarray] = {}
        if self._hnsw is not None:
            arrays["hnsw"] = np.frombuffer(bytes(self._hnsw.save()), dtype=np.uint8)
        return config, arrays

    @classmethod
    def from_state(
        cls, config: Mapping[str, Any], arrays: Mapping[str, np.ndarray], embeddings: np.ndarray
    ) -> CandidateIndex:
        """Rebuild an index saved by `state` over the same `embeddings` (no graph rebuild)."""
        try:
            kind = config["kind"]
            connectivity = int(config["connectivity"])
            expansion = int(config["expansion_search"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelLoadError(f"corrupt candidate index state: missing or bad {exc}") from exc
        dtype = config.get("dtype", "f32")  # saved before it was recorded: single precision
        if dtype not in ("f32", "f16"):
            raise ModelLoadError(f"corrupt candidate index state: dtype {dtype!r}")
        self = cls.__new__(cls)
        self.embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        self.connectivity = connectivity
        self.expansion_search = expansion
        self.dtype = dtype
        self._hnsw = None
        if kind == "exact":
            self.kind = "exact"
            return self
        if kind != "hnsw":
            raise ModelLoadError(f"corrupt candidate index state: kind {kind!r}")
        index_cls = _import_usearch()
        if index_cls is None:
            raise IndexUnavailableError(
                f"this model was saved with an HNSW index: install it with {INDEX_INSTALL_HINT}"
            )
        if "hnsw" not in arrays:
            raise ModelLoadError("corrupt candidate index state: the HNSW graph is missing")
        self.kind = "hnsw"
        self._hnsw = index_cls.restore(bytearray(np.asarray(arrays["hnsw"]).tobytes()))
        if self._hnsw is None or self._hnsw.size != len(self.embeddings):
            raise ModelLoadError(
                "corrupt candidate index state: the HNSW graph does not match the catalogue"
            )
        held = str(self._hnsw.dtype).rsplit(".", 1)[-1].lower()  # e.g. ScalarKind.F16
        if held != dtype:
            raise ModelLoadError(
                f"corrupt candidate index state: the HNSW graph holds {held} vectors, its "
                f"settings say {dtype}"
            )
        self._hnsw.expansion_search = expansion
        return self
