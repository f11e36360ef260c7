"""The manifest of a saved model: its fields, canonical digests, and the checks of a read.

`dtdr_agents.foundation.persistence` writes and reads model folders; this module knows what a
`manifest.json` must hold (format, version, class, parameters, catalogue, state, integrity) and
how it is bound to the arrays (`manifest_digest`, `tool_order_digest`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dtdr_agents._version import __version__
from dtdr_agents.foundation.errors import DTDRError, ModelLoadError
from dtdr_agents.foundation.types import Toolset

FORMAT = "dtdr-agents/retriever"
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
ARRAYS = "arrays.safetensors"
CHILD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""A nested retriever's folder name: a constructor parameter name."""


class _RetryableError(ModelLoadError):
    """A read that may have raced with a save; retried while the folder changes."""


def tool_order_digest(manifest: Mapping[str, Any]) -> str:
    """SHA-256 of the tool names in order, fitted and current (array rows follow them)."""

    def names(tools: Any) -> list[Any] | None:
        if not isinstance(tools, list):
            return None
        return [t.get("name") if isinstance(t, Mapping) else None for t in tools]

    both = [names(manifest.get("tools")), names(manifest.get("current_tools"))]
    return hashlib.sha256(json.dumps(both, ensure_ascii=False).encode()).hexdigest()


def _arrays_metadata(data: bytes, apath: Path) -> dict[str, Any]:
    """The `__metadata__` of a safetensors file's header."""
    try:
        size = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + size].decode("utf-8")) if size < len(data) else None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        header = None
    if not isinstance(header, dict):
        raise _RetryableError(f"{apath}: corrupt (no safetensors header)")
    meta = header.get("__metadata__") or {}
    return meta if isinstance(meta, dict) else {}


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """SHA-256 of the manifest's canonical JSON, its "integrity" field left out."""
    body = {k: v for k, v in manifest.items() if k != "integrity"}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, tuple | set | frozenset):
        return list(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not np.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _parse_manifest(data: bytes, mpath: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(
            data.decode("utf-8"), parse_float=_finite_float, parse_constant=_no_constant
        )
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise _RetryableError(f"{mpath}: not valid JSON ({exc})") from None
    except ValueError as exc:  # NaN, Infinity, 1e999: never a valid parameter or state
        raise ModelLoadError(f"{mpath}: holds a NaN or infinite number ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _RetryableError(f"{mpath}: field 'format' is not {FORMAT!r}")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ModelLoadError(
            f"{mpath}: field 'format_version' is {manifest.get('format_version')!r}; this "
            f"dtdr-agents ({__version__}) reads version {FORMAT_VERSION} (save the model again)"
        )
    for key in ("class", "params", "tools", "catalogue_hash", "state", "integrity"):
        if key not in manifest:
            raise _RetryableError(f"{mpath}: missing field {key!r}")
    children = manifest.get("children", [])
    if not isinstance(children, list) or not all(
        isinstance(c, str) and CHILD_NAME.match(c) for c in children
    ):
        raise _RetryableError(f"{mpath}: field 'children' must list parameter names")
    integrity = manifest["integrity"]
    if not isinstance(integrity, dict) or not all(
        isinstance(integrity.get(k), str) for k in ("arrays_sha256", "manifest_sha256")
    ):
        raise _RetryableError(f"{mpath}: field 'integrity' is not valid")
    return manifest


def _check_catalogue(manifest: Mapping[str, Any], mpath: Path) -> None:
    try:
        tools = Toolset(manifest["tools"])
    except (DTDRError, TypeError, ValueError) as exc:
        raise _RetryableError(f"{mpath}: field 'tools' is invalid: {exc}") from None
    if tools.catalogue_hash != manifest["catalogue_hash"]:
        raise _RetryableError(
            f"{mpath}: field 'catalogue_hash' does not match field 'tools' (edited?)"
        )


def _check_specs(
    manifest: Mapping[str, Any], arrays: Mapping[str, np.ndarray], mpath: Path, apath: Path
) -> None:
    """The arrays have exactly the names, dtypes and shapes the manifest records."""
    specs = manifest.get("arrays")
    if not isinstance(specs, dict) or set(specs) != set(arrays):
        raise _RetryableError(f"{mpath}: field 'arrays' does not list the arrays of {apath.name}")
    for name, array in arrays.items():
        spec = specs[name]
        if (
            not isinstance(spec, dict)
            or spec.get("dtype") != array.dtype.str
            or spec.get("shape") != list(array.shape)
        ):
            raise _RetryableError(
                f"{apath}: array {name!r} is {array.dtype.str} {list(array.shape)}, but {mpath} "
                f"records {spec!r}"
            )
