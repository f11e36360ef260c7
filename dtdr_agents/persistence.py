"""The saved-model folder format: JSON + safetensors, written atomically, never pickle.

This module knows the folder layout, not the retrievers (`ToolRetriever.save` and
`ToolRetriever.load` build and read a `SavedModel`). Layout of a saved retriever folder::

    manifest.json        format, package version, class, parameters, encoder, catalogue hash,
                         the fitted catalogue (and the current one if it changed), learned state,
                         and the names of nested retrievers ("children")
    arrays.safetensors   every learned array (numpy), loaded without pickle
    <child>/             a nested retriever (a composite's `base`), the same layout again
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dtdr_agents._version import __version__
from dtdr_agents.atomic import atomic_write_dir
from dtdr_agents.errors import ModelLoadError

FORMAT = "dtdr-agents/retriever"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
ARRAYS = "arrays.safetensors"
CHILD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""A nested retriever's folder name: a constructor parameter name."""


@dataclass
class SavedModel:
    """A retriever as stored: manifest, named arrays and nested retrievers.

    Attributes:
        manifest: The JSON-able manifest (without "children", which is derived).
        arrays: Named numpy arrays.
        children: Nested retrievers by parameter name (a composite's "base").
        folder: Where it was read from (set by `read_model`).
    """

    manifest: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    children: dict[str, SavedModel] = field(default_factory=dict)
    folder: Path | None = None

    def files(self, prefix: str = "") -> dict[str, bytes]:
        """Relative path -> content of every file of this model and its children."""
        from safetensors.numpy import save as st_save

        for name in self.children:
            if not CHILD_NAME.match(name):
                raise ValueError(f"nested retriever name {name!r} is not a parameter name")
        manifest = {**self.manifest, "children": sorted(self.children)}
        arrays = {k: np.ascontiguousarray(v) for k, v in self.arrays.items()}
        out = {
            f"{prefix}{MANIFEST}": json.dumps(
                manifest, indent=2, default=_json_default, ensure_ascii=False
            ).encode(),
            f"{prefix}{ARRAYS}": st_save(arrays),
        }
        for name, child in self.children.items():
            out.update(child.files(f"{prefix}{name}/"))
        return out


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, tuple | set | frozenset):
        return list(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to JSON")


def write_model(path: str | Path, model: SavedModel) -> Path:
    """Write `model` (and its children) as the folder `path`, all or nothing."""
    return atomic_write_dir(path, model.files())


def read_manifest(folder: Path) -> dict[str, Any]:
    """The checked manifest of the model folder `folder`.

    Raises:
        ModelLoadError: Naming the file and field when the folder or manifest is not valid.
    """
    mpath = folder / MANIFEST
    if not folder.is_dir():
        raise ModelLoadError(f"{folder}: no such model folder")
    if not mpath.is_file():
        raise ModelLoadError(f"{mpath}: missing; is {folder} a folder written by save()?")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{mpath}: not valid JSON ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ModelLoadError(f"{mpath}: field 'format' is not {FORMAT!r}")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ModelLoadError(
            f"{mpath}: field 'format_version' is {manifest.get('format_version')!r}; this "
            f"dtdr-agents ({__version__}) reads version {FORMAT_VERSION}"
        )
    for key in ("class", "params", "tools", "catalogue_hash", "state"):
        if key not in manifest:
            raise ModelLoadError(f"{mpath}: missing field {key!r}")
    children = manifest.get("children", [])
    if not isinstance(children, list) or not all(
        isinstance(c, str) and CHILD_NAME.match(c) for c in children
    ):
        raise ModelLoadError(f"{mpath}: field 'children' must list parameter names")
    return manifest


def read_arrays(folder: Path) -> dict[str, np.ndarray]:
    """The arrays of the model folder `folder` (safetensors, no pickle)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    apath = folder / ARRAYS
    try:
        return dict(load_file(str(apath)))
    except FileNotFoundError as exc:
        raise ModelLoadError(f"{apath}: missing") from exc
    except (SafetensorError, OSError, ValueError) as exc:
        raise ModelLoadError(f"{apath}: corrupt ({exc})") from exc


def read_model(path: str | Path) -> SavedModel:
    """Read a model folder and its nested retrievers."""
    folder = Path(path).expanduser()
    manifest = read_manifest(folder)
    arrays = read_arrays(folder)
    children: dict[str, SavedModel] = {}
    for name in manifest.get("children", []):
        sub = folder / name
        if not sub.is_dir():
            raise ModelLoadError(
                f"{folder / MANIFEST}: nested retriever {name!r} is missing (no folder {sub})"
            )
        children[name] = read_model(sub)
    manifest.pop("children", None)
    return SavedModel(manifest, arrays, children, folder)


def manifest_path(model: SavedModel) -> Path:
    """The manifest file of a model read from disk (for error messages)."""
    return (model.folder or Path(".")) / MANIFEST


def arrays_path(model: SavedModel) -> Path:
    """The arrays file of a model read from disk (for error messages)."""
    return (model.folder or Path(".")) / ARRAYS


def child_arrays(arrays: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The arrays under `prefix/`, with the prefix removed."""
    cut = len(prefix) + 1
    return {k[cut:]: v for k, v in arrays.items() if k.startswith(f"{prefix}/")}
