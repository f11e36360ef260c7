"""The saved-model folder format: JSON + safetensors, written atomically, never pickle.

This module knows the folder layout, not the retrievers (`ToolRetriever.save` and
`ToolRetriever.load` build and read a `SavedModel`). Layout of a saved retriever folder::

    manifest.json        format, package version, class, parameters, encoder, catalogue hash,
                         the fitted catalogue (and the current one if it changed), learned state,
                         and the names of nested retrievers ("children")
    arrays.safetensors   every learned array (numpy), loaded without pickle
    <child>/             a nested retriever (a composite's `base`), the same layout again

Integrity: the manifest's "integrity" field holds the SHA-256 of the arrays file, of the
manifest itself (canonical JSON without that field, so the tool order, the parameters and
every scalar are bound to the arrays) and of each child's manifest. `read_model` verifies
them, reads every file through one open handle of the folder (a save that replaces the
folder meanwhile cannot mix two versions), never follows a symbolic link, reads only
regular files (a named pipe or a folder in a file's place is refused before it is opened),
caps the size of the manifest (`MAX_MANIFEST_BYTES`) and of the arrays
(`MAX_ARRAYS_BYTES`), and refuses NaN and infinite numbers in both.

The manifest's fields and digests live in `dtdr_agents.foundation.manifest`, the safe file
reads in `dtdr_agents.foundation.folder_read`; every name imports from here as well.

Saving never deletes what is not ours: `write_model` replaces an existing folder only when
it is empty or holds a saved model and nothing else (`model_folder_problem`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dtdr_agents.foundation.atomic import atomic_write_dir, check_target, resolve_target
from dtdr_agents.foundation.errors import ModelLoadError, ModelSaveError
from dtdr_agents.foundation.folder_read import _open_dir, _read_file, _replaced
from dtdr_agents.foundation.manifest import (
    ARRAYS,
    CHILD_NAME,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    _arrays_metadata,
    _check_catalogue,
    _check_specs,
    _json_default,
    _parse_manifest,
    _RetryableError,
    manifest_digest,
    tool_order_digest,
)

MAX_MANIFEST_BYTES = 64 * 2**20
"""Largest manifest read (a catalogue of 100,000 tools fits)."""
MAX_ARRAYS_BYTES = 4 * 2**30
"""Largest arrays file read (4 GiB: 384-dim embeddings and a linear layer over 1,000,000
tools fit)."""
MAX_REPLACED_MANIFEST_BYTES = 16 * MAX_MANIFEST_BYTES
"""Largest manifest a save reads to decide that a folder is a saved model it may replace
(1 GiB): a save never writes a manifest over `MAX_MANIFEST_BYTES`, but earlier versions
did, and such a folder must still be replaceable by a later save."""
READ_RETRY_SECONDS = 10.0
"""How long a load retries a folder that concurrent saves keep replacing before it gives up."""


class EncoderMismatchError(ModelLoadError):
    """A saved model met another encoder than the one it was fitted with.

    Its message names the Python keyword that lets the load through; `describe` names
    another way (the command line's flags).

    Attributes:
        where: The model's manifest file.
        fitted: The recorded encoder: its id, or its spec when `given` is None.
        given: The id of the encoder given instead; None when the model names an encoder
            that a load never fetches by itself (it must be passed).
        needs_object: The recorded encoder was an object given in Python (an embedding
            model, a custom encoder) that no name rebuilds: only that object again loads it.
    """

    def __init__(
        self, where: Path | str, fitted: str, given: str | None, *, needs_object: bool = False
    ) -> None:
        self.where = str(where)
        self.fitted = fitted
        self.given = given
        self.needs_object = needs_object
        super().__init__(self.describe())

    def describe(self, *, allow: str = "allow_encoder_change=True", encoder: str = "") -> str:
        """The message, naming `allow` (accept another encoder) and `encoder` (pass one)."""
        if self.given is None and self.needs_object:
            return (
                f"{self.where}: the model was fitted with the encoder object {self.fitted!r} "
                "(an embedding model or encoder given in Python), which a saved model cannot "
                "rebuild: pass the same model again in Python, load_retriever(path, "
                "encoder=<your Embeddings, LlamaIndex embedding or Encoder>), or "
                f"encoder=CallableEncoder(fn, id={self.fitted!r})"
                + (f"; it loads in Python only, not with {encoder}" if encoder else "")
            )
        if self.given is None:
            how = encoder or f"encoder={self.fitted!r}"
            return (
                f"{self.where}: the model was fitted with encoder {self.fitted!r}; a saved model "
                f"never loads a model it merely names: pass {how} to load it"
            )
        return (
            f"{self.where}: the model was fitted with encoder {self.fitted!r} but "
            f"{self.given!r} was given; pass {allow} to use it anyway"
        )


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
        return self._sealed(prefix)[0]

    def _sealed(self, prefix: str) -> tuple[dict[str, bytes], str]:
        """The files, and the manifest digest that binds them (see the module docstring)."""
        from safetensors.numpy import save as st_save

        for name in self.children:
            if not CHILD_NAME.match(name):
                raise ValueError(f"nested retriever name {name!r} is not a parameter name")
        out: dict[str, bytes] = {}
        child_digests: dict[str, str] = {}
        for name, child in sorted(self.children.items()):
            files, digest = child._sealed(f"{prefix}{name}/")
            out.update(files)
            child_digests[name] = digest
        arrays = {k: np.ascontiguousarray(v) for k, v in self.arrays.items()}
        for name, array in arrays.items():
            if array.dtype.kind == "f" and not np.isfinite(array).all():
                raise ModelSaveError(
                    f"cannot save {self.manifest.get('class', 'the model')}: array {name!r} "
                    "holds NaN or infinite values (a load would refuse it)"
                )
        arrays_bytes = st_save(arrays, metadata={"tools_sha256": tool_order_digest(self.manifest)})
        manifest = {k: v for k, v in self.manifest.items() if k != "integrity"}
        manifest["children"] = sorted(self.children)
        manifest["arrays"] = {
            k: {"dtype": v.dtype.str, "shape": list(v.shape)} for k, v in sorted(arrays.items())
        }
        try:
            text = json.dumps(manifest, default=_json_default, ensure_ascii=False, allow_nan=False)
        except ValueError as exc:  # NaN or infinity: a load would refuse it
            raise ModelSaveError(
                f"cannot save {manifest.get('class', 'the model')}: a parameter or learned "
                f"value is NaN or infinite ({exc})"
            ) from None
        manifest = json.loads(text)
        digest = manifest_digest(manifest)
        manifest["integrity"] = {
            "arrays_sha256": hashlib.sha256(arrays_bytes).hexdigest(),
            "manifest_sha256": digest,
            "children_sha256": child_digests,
        }
        manifest_bytes = json.dumps(manifest, indent=2, ensure_ascii=False).encode()
        _check_size(manifest_bytes, MAX_MANIFEST_BYTES, "MAX_MANIFEST_BYTES", manifest, prefix)
        _check_size(arrays_bytes, MAX_ARRAYS_BYTES, "MAX_ARRAYS_BYTES", manifest, prefix)
        out[f"{prefix}{MANIFEST}"] = manifest_bytes
        out[f"{prefix}{ARRAYS}"] = arrays_bytes
        return out, digest


def _check_size(
    data: bytes, cap: int, cap_name: str, manifest: Mapping[str, Any], prefix: str
) -> None:
    """Refuse to write a file that a load would refuse for its size (naming what fills it)."""
    if len(data) <= cap:
        return
    what = "manifest" if cap_name == "MAX_MANIFEST_BYTES" else "arrays"
    if what == "manifest":
        field, size = _largest_field(manifest)
        biggest = f"; field {field!r} takes {size / 2**20:.1f} MiB"
    else:
        specs = manifest.get("arrays", {})
        name = max(specs, key=lambda k: int(np.prod(specs[k]["shape"])), default=None)
        biggest = "" if name is None else f"; the largest array is {name!r}"
    raise ModelSaveError(
        f"cannot save {manifest.get('class', 'the model')}: its {prefix}"
        f"{MANIFEST if what == 'manifest' else ARRAYS} would take {len(data) / 2**20:.1f} MiB, "
        f"more than the {cap / 2**20:.0f} MiB a load reads "
        f"(dtdr_agents.foundation.persistence.{cap_name}){biggest}; nothing was written"
    )


def _largest_field(obj: Any, path: str = "") -> tuple[str, int]:
    """The dotted path of the field that holds most of `obj`'s JSON, and its size in bytes."""
    size = len(json.dumps(obj, ensure_ascii=False))
    if isinstance(obj, Mapping) and obj:
        items: list[tuple[str, Any]] = [(str(k), v) for k, v in obj.items()]
    elif isinstance(obj, list) and obj:
        items = [(f"[{i}]", v) for i, v in enumerate(obj)]
    else:
        return path or "(the whole manifest)", size
    sizes = [(len(json.dumps(v, ensure_ascii=False)), k, v) for k, v in items]
    child_size, key, child = max(sizes, key=lambda t: t[0])
    if child_size * 2 < size:  # no one part dominates: this field is the answer
        return path or "(the whole manifest)", size
    sub = f"{path}{key}" if key.startswith("[") or not path else f"{path}.{key}"
    return _largest_field(child, sub)


def model_folder_problem(folder: Path) -> str | None:
    """Why a save may not replace the existing folder `folder`; None when it may.

    It may when it is empty, or when it holds a saved model and nothing else: a
    `manifest.json` of this format, `arrays.safetensors`, and the sub-folders of the nested
    retrievers that the manifest lists, each of which passes the same check.
    """
    try:
        with os.scandir(folder) as listing:
            entries = {entry.name: entry for entry in listing}
    except OSError as exc:
        return f"cannot list it ({exc.strerror})"
    if not entries:
        return None
    if MANIFEST not in entries:
        return f"it holds {min(entries)!r} and no {MANIFEST}"
    try:
        fd = _open_dir(folder, None, folder)
        try:  # a larger cap than a load's: an older version wrote manifests over it
            data = _read_file(
                fd,
                MANIFEST,
                folder / MANIFEST,
                MAX_REPLACED_MANIFEST_BYTES,
                "MAX_REPLACED_MANIFEST_BYTES",
            )
        finally:
            os.close(fd)
        manifest = json.loads(data.decode("utf-8"))
    except (ModelLoadError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        return f"its {MANIFEST} cannot be read: {exc}"
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return f"its {MANIFEST} is not a saved dtdr-agents model (field 'format')"
    children = manifest.get("children")
    listed = {c for c in children if isinstance(c, str)} if isinstance(children, list) else set()
    for name, entry in sorted(entries.items()):
        if name in (MANIFEST, ARRAYS):
            if not entry.is_file(follow_symlinks=False):
                return f"{name!r} is not a regular file"
        elif name in listed and CHILD_NAME.match(name) and entry.is_dir(follow_symlinks=False):
            problem = model_folder_problem(Path(entry.path))
            if problem is not None:
                return f"{name}/: {problem}"
        else:
            return f"it holds {name!r}, which is not part of a saved model"
    return None


def check_save_target(path: str | Path) -> Path:
    """The folder `write_model(path, ...)` would write, checked before any work is done.

    Raises:
        ForeignFolderError: If a save to `path` would be refused (see `write_model`).
    """
    target = resolve_target(path)
    check_target(target, model_folder_problem)
    return target


def write_model(path: str | Path, model: SavedModel) -> Path:
    """Write `model` (and its children) as the folder `path`, all or nothing.

    An existing folder is replaced only when `model_folder_problem` finds nothing against
    it (an empty folder, or a saved model and nothing else); the current working folder is
    never replaced. Nothing is deleted that the save did not write.

    Raises:
        ForeignFolderError: Naming the folder and what is in it; nothing is written.
    """
    files = model.files()
    return atomic_write_dir(path, files, replaceable=model_folder_problem)


def _read_manifest_bytes(dir_fd: int, shown: Path) -> bytes:
    return _read_file(dir_fd, MANIFEST, shown, MAX_MANIFEST_BYTES, "MAX_MANIFEST_BYTES")


def _read_arrays_bytes(dir_fd: int, shown: Path) -> bytes:
    return _read_file(dir_fd, ARRAYS, shown, MAX_ARRAYS_BYTES, "MAX_ARRAYS_BYTES")


def read_manifest(folder: Path) -> dict[str, Any]:
    """The checked manifest of the model folder `folder` (its integrity not verified).

    Raises:
        ModelLoadError: Naming the file and field when the folder or manifest is not valid.
    """
    fd = _open_dir(folder, None, folder)
    try:
        return _parse_manifest(_read_manifest_bytes(fd, folder / MANIFEST), folder / MANIFEST)
    finally:
        os.close(fd)


def _load_arrays(data: bytes, apath: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load

    try:
        return dict(load(data))
    except (SafetensorError, OSError, ValueError, TypeError) as exc:
        raise _RetryableError(f"{apath}: corrupt ({exc})") from None


def read_arrays(folder: Path) -> dict[str, np.ndarray]:
    """The arrays of the model folder `folder` (safetensors, no pickle; not verified)."""
    fd = _open_dir(folder, None, folder)
    try:
        return _load_arrays(_read_arrays_bytes(fd, folder / ARRAYS), folder / ARRAYS)
    finally:
        os.close(fd)


def _read_at(dir_fd: int, folder: Path, expected: str | None) -> SavedModel:
    """Read and verify the model in the open folder `dir_fd` (shown as `folder`)."""
    mpath, apath = folder / MANIFEST, folder / ARRAYS
    manifest = _parse_manifest(_read_manifest_bytes(dir_fd, mpath), mpath)
    integrity = manifest["integrity"]
    _check_catalogue(manifest, mpath)
    digest = manifest_digest(manifest)
    if digest != integrity["manifest_sha256"]:
        raise _RetryableError(
            f"{mpath}: content does not match its checksum (field 'integrity'): the file "
            "was edited or is corrupt"
        )
    if expected is not None and digest != expected:
        raise _RetryableError(f"{mpath}: not the nested model its parent folder was saved with")
    data = _read_arrays_bytes(dir_fd, apath)
    if hashlib.sha256(data).hexdigest() != integrity["arrays_sha256"]:
        raise _RetryableError(f"{apath}: corrupt (its SHA-256 does not match {mpath})")
    if _arrays_metadata(data, apath).get("tools_sha256") != tool_order_digest(manifest):
        raise _RetryableError(
            f"{mpath}: field 'tools' or 'current_tools' does not match the tools of "
            f"{apath.name} (edited?)"
        )
    arrays = _load_arrays(data, apath)
    _check_specs(manifest, arrays, mpath, apath)
    child_digests = integrity.get("children_sha256") or {}
    if not isinstance(child_digests, dict) or set(child_digests) != set(manifest["children"]):
        raise _RetryableError(f"{mpath}: field 'integrity' does not list the nested retrievers")
    children: dict[str, SavedModel] = {}
    for name in manifest["children"]:
        sub = folder / name
        try:
            fd = _open_dir(name, dir_fd, sub)
        except _RetryableError:
            raise _RetryableError(
                f"{mpath}: nested retriever {name!r} is missing (no folder {sub})"
            ) from None
        try:
            children[name] = _read_at(fd, sub, str(child_digests[name]))
        finally:
            os.close(fd)
    manifest.pop("children", None)
    manifest.pop("integrity", None)
    manifest.pop("arrays", None)
    return SavedModel(manifest, arrays, children, folder)


def read_model(path: str | Path) -> SavedModel:
    """Read and verify a model folder and its nested retrievers.

    Every file is read through one open handle of the folder, so a save that replaces the
    folder meanwhile cannot mix two versions; a read that failed while the folder was being
    replaced is tried again (for up to `READ_RETRY_SECONDS`).

    Raises:
        ModelLoadError: Naming the file (and field) when something is missing, corrupt, a
            symbolic link, or does not match its checksum.
    """
    folder = Path(path).expanduser()
    start = time.monotonic()
    deadline = start + READ_RETRY_SECONDS
    open_deadline = start + 0.2  # a folder that stays absent is reported quickly
    pause = 0.005
    while True:
        try:
            fd = _open_dir(folder, None, folder)
        except _RetryableError as exc:
            if time.monotonic() >= open_deadline:
                raise ModelLoadError(str(exc)) from None
        else:
            try:
                return _read_at(fd, folder, None)
            except _RetryableError as exc:
                # a real defect is reported at once; a folder replaced mid-read is read again
                if time.monotonic() >= deadline or not _replaced(folder, fd):
                    raise ModelLoadError(str(exc)) from None
            finally:
                os.close(fd)
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def check_saved_values(model: SavedModel, n_tools: int) -> None:
    """Check the values every saved retriever has: array types and finiteness, end rate.

    Class-specific shapes and ranges are checked by each retriever's `_set_state`.

    Raises:
        ModelLoadError: Naming the file and the array or field.
    """
    mpath, apath = manifest_path(model), arrays_path(model)
    for name, array in model.arrays.items():
        if array.dtype.kind not in "biuf":
            raise ModelLoadError(f"{apath}: array {name!r} has dtype {array.dtype}, not numeric")
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise ModelLoadError(f"{apath}: array {name!r} holds NaN or infinite values")
    emb = model.arrays.get("tool_embeddings")
    if emb is not None and (emb.ndim != 2 or len(emb) != n_tools or emb.dtype.kind != "f"):
        raise ModelLoadError(
            f"{apath}: array 'tool_embeddings' has shape {emb.shape} ({emb.dtype}), not "
            f"({n_tools}, dim) floats"
        )
    end_rate = model.manifest.get("end_rate", 0.0)
    if (
        isinstance(end_rate, bool)
        or not isinstance(end_rate, int | float)
        or not 0.0 <= end_rate <= 1.0
    ):
        raise ModelLoadError(f"{mpath}: field 'end_rate' must be in [0, 1], got {end_rate!r}")


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


__all__ = [
    "ARRAYS",
    "CHILD_NAME",
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST",
    "MAX_ARRAYS_BYTES",
    "MAX_MANIFEST_BYTES",
    "MAX_REPLACED_MANIFEST_BYTES",
    "READ_RETRY_SECONDS",
    "EncoderMismatchError",
    "SavedModel",
    "arrays_path",
    "check_save_target",
    "check_saved_values",
    "child_arrays",
    "manifest_digest",
    "manifest_path",
    "model_folder_problem",
    "read_arrays",
    "read_manifest",
    "read_model",
    "tool_order_digest",
    "write_model",
]
