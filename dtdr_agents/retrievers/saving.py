"""Saving and loading fitted retrievers: a folder of JSON and safetensors, no pickle.

`saved_model` turns a fitted retriever into a `SavedModel` (manifest, arrays, nested
retrievers); `load_retriever` reads one back, through the registry (`class_by_name`), checking
the catalogue and the encoder. The folder format itself is `dtdr_agents.foundation.persistence`.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from dtdr_agents._version import __version__
from dtdr_agents.foundation.encoders import (
    Encoder,
    EncoderSpec,
    FittableEncoder,
    TfidfEncoder,
    encoder_spec,
    get_encoder,
    is_builtin_encoder,
    needs_encoder_object,
)
from dtdr_agents.foundation.errors import DTDRError, ModelArrayError, ModelLoadError
from dtdr_agents.foundation.persistence import (
    ARRAYS,
    FORMAT,
    FORMAT_VERSION,
    EncoderMismatchError,
    SavedModel,
    arrays_path,
    check_saved_values,
    child_arrays,
    manifest_path,
    read_model,
)
from dtdr_agents.foundation.types import END_OF_PLAN, Toolset
from dtdr_agents.retrievers.registry import class_by_name

if TYPE_CHECKING:
    from dtdr_agents.retrievers.base import ToolRetriever


class LoadOptions(TypedDict, total=False):
    """The keyword options of `load_retriever` (and of `ToolRetriever.load`)."""

    tools: Toolset | Iterable[Any] | None
    encoder: EncoderSpec
    allow_catalogue_change: bool
    allow_encoder_change: bool
    params: Mapping[str, Any] | None


def saved_model(retriever: ToolRetriever) -> SavedModel:
    """The fitted retriever as a `SavedModel` (manifest, arrays, nested retrievers)."""
    retriever._check_fitted()
    zero_shot = getattr(retriever, "zero_shot_", False)
    state, model_arrays = ({}, {}) if zero_shot else retriever._state()
    arrays = {f"model/{k}": v for k, v in model_arrays.items()}
    encoder_info: dict[str, Any] | None = None
    if retriever.encoder_ is not None and retriever.uses_encoder:  # a composite's is its base's
        encoder_info = {"id": retriever.encoder_.id, "spec": encoder_spec(retriever.encoder_)}
        if needs_encoder_object(retriever.encoder_):  # only the object again loads the model
            encoder_info["object"] = True
        inner = getattr(retriever.encoder_, "inner", retriever.encoder_)
        if isinstance(inner, FittableEncoder):
            enc_config, enc_arrays = inner.state()
            encoder_info["state"] = enc_config
            arrays.update({f"encoder/{k}": v for k, v in enc_arrays.items()})
    if retriever.tool_embeddings_ is not None and retriever.uses_encoder:
        arrays["tool_embeddings"] = retriever.tool_embeddings_
    current = retriever.tools_
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "package_version": __version__,
        "class": type(retriever).__name__,
        "retriever_id": retriever.retriever_id,
        "params": retriever._json_params(),
        "runtime_params": list(retriever.runtime_params),
        "encoder": encoder_info,
        "catalogue_hash": retriever.fit_tools_.catalogue_hash,
        "tools": retriever.fit_tools_.to_list(),
        "current_tools": None if current == retriever.fit_tools_ else current.to_list(),
        "end_rate": retriever.end_rate_,
        "state": state,
    }
    if zero_shot:
        manifest["zero_shot"] = True
    children = {name: part.to_saved() for name, part in retriever.parts().items()}
    return SavedModel(manifest, arrays, children)


def save_retriever(retriever: ToolRetriever, path: str | Path) -> Path:
    """Save a fitted retriever to the folder `path` (same as `retriever.save(path)`)."""
    return retriever.save(path)


def load_retriever(
    path: str | Path | SavedModel,
    *,
    tools: Toolset | Iterable[Any] | None = None,
    encoder: EncoderSpec = None,
    allow_catalogue_change: bool = False,
    allow_encoder_change: bool = False,
    params: Mapping[str, Any] | None = None,
) -> ToolRetriever:
    """Load a retriever written by `save`, nested retrievers included.

    Args:
        path: The model folder, or one already read and verified (`read_model`), so that
            a caller that checked the folder first does not read it again.
        tools: The catalogue you will rank over. If its hash differs from the fitted one,
            loading fails unless `allow_catalogue_change` (then new tools use the prior and
            removed tools are never returned).
        encoder: Encoder to use instead of the recorded one; its id must match unless
            `allow_encoder_change`. Required (the same model object again) when the model was
            fitted with an embedding model or a custom encoder (see `CallableEncoder`).
        allow_catalogue_change: Accept a catalogue that differs from the fitted one.
        allow_encoder_change: Accept an encoder whose id differs from the recorded one.
        params: Constructor parameters that are not saved (a class's `runtime_params`, such
            as a chat model or a planner); each reaches every retriever of the tree that
            declares it.

    Raises:
        ModelLoadError: Naming the file and field on a missing, corrupt or mismatched folder.
    """
    return _restore(
        path if isinstance(path, SavedModel) else read_model(path),
        tools=tools,
        encoder=encoder,
        allow_catalogue_change=allow_catalogue_change,
        allow_encoder_change=allow_encoder_change,
        params=dict(params or {}),
    )


def _restore(
    saved: SavedModel,
    *,
    tools: Toolset | Iterable[Any] | None,
    encoder: EncoderSpec,
    allow_catalogue_change: bool,
    allow_encoder_change: bool,
    params: Mapping[str, Any],
) -> ToolRetriever:
    manifest, arrays = saved.manifest, saved.arrays
    where = manifest_path(saved)
    cls = class_by_name(str(manifest["class"]))
    if cls is None:
        raise ModelLoadError(
            f"{where}: field 'class' is {manifest['class']!r}, not a known retriever"
        )
    if not isinstance(manifest["params"], dict):
        raise ModelLoadError(f"{where}: field 'params' is not an object")
    try:
        fit_tools = Toolset(manifest["tools"])
    except DTDRError as exc:
        raise ModelLoadError(f"{where}: field 'tools' is invalid: {exc}") from exc
    if fit_tools.catalogue_hash != manifest["catalogue_hash"]:
        raise ModelLoadError(
            f"{where}: field 'catalogue_hash' does not match field 'tools' (edited?)"
        )
    parts = {
        name: _restore(
            child,
            tools=tools,
            encoder=encoder,
            allow_catalogue_change=allow_catalogue_change,
            allow_encoder_change=allow_encoder_change,
            params=params,
        )
        for name, child in saved.children.items()
    }
    accepted = {p for p in inspect.signature(cls.__init__).parameters if p != "self"}
    kwargs = dict(manifest["params"])
    kwargs.update({k: v for k, v in parts.items() if k in accepted})
    kwargs.update({k: v for k, v in params.items() if k in cls.runtime_params and k in accepted})
    try:
        retriever = cls(**kwargs)
    except TypeError as exc:
        raise ModelLoadError(f"{where}: field 'params' does not fit {cls.__name__}: {exc}") from exc
    try:
        retriever._check_params()
    except (ValueError, TypeError) as exc:
        raise ModelLoadError(f"{where}: field 'params' is invalid: {exc}") from None

    retriever.fit_tools_ = fit_tools
    retriever.labels_ = (*fit_tools.names, END_OF_PLAN)
    retriever._label_index = {n: i for i, n in enumerate(retriever.labels_)}
    check_saved_values(saved, len(fit_tools))
    retriever.end_rate_ = float(manifest.get("end_rate", 0.0))
    retriever.encoder_ = _restore_encoder(manifest, arrays, encoder, allow_encoder_change, where)
    enc = retriever.encoder_
    if enc is not None and "encoder" in accepted and needs_encoder_object(enc):
        retriever.encoder = enc  # a refit uses the object given, not the id that names it
    retriever.tool_embeddings_ = arrays.get("tool_embeddings")
    retriever._set_parts(parts)
    retriever.zero_shot_ = manifest.get("zero_shot") is True
    try:
        if not retriever.zero_shot_:
            retriever._set_state(manifest["state"], child_arrays(arrays, "model"))
    except ModelArrayError as exc:
        raise _in_arrays_file(exc, saved) from None
    except ModelLoadError as exc:
        raise ModelLoadError(f"{where}: {exc}") from None
    except (KeyError, TypeError, ValueError, IndexError, OverflowError, MemoryError) as exc:
        raise ModelLoadError(
            f"{where}: field 'state' or {arrays_path(saved).name} is corrupt "
            f"({type(exc).__name__}: {exc})"
        ) from None
    retriever._fitted = True

    current = manifest.get("current_tools")
    try:
        target = Toolset(current) if current else fit_tools
    except (DTDRError, TypeError, ValueError) as exc:
        raise ModelLoadError(f"{where}: field 'current_tools' is invalid: {exc}") from None
    if tools is not None:
        given = tools if isinstance(tools, Toolset) else Toolset(tools)
        if given.catalogue_hash != fit_tools.catalogue_hash and not allow_catalogue_change:
            raise ModelLoadError(
                f"{saved.folder}: the model was fitted on another tool catalogue (hash "
                f"{fit_tools.catalogue_hash}, given {given.catalogue_hash}); pass "
                "allow_catalogue_change=True to rank over the new catalogue anyway"
            )
        target = given
    retriever.set_tools(target)
    return retriever


def _in_arrays_file(exc: ModelArrayError, saved: SavedModel) -> ModelArrayError:
    """`exc` (raised by `_set_state`) naming the arrays file and the array's name in it."""
    if exc.file is not None:
        return exc
    name = f"model/{exc.array}"
    if name not in saved.arrays:  # a nested part's array (a hybrid's chains/markov_rows)
        found = [
            k
            for k in sorted(saved.arrays)
            if k.startswith("model/") and k.endswith(f"/{exc.array}")
        ]
        name = " or ".join(found) or name
    return ModelArrayError(name, exc.problem, str(arrays_path(saved)))


def _restore_encoder(
    manifest: Mapping[str, Any],
    arrays: Mapping[str, np.ndarray],
    encoder: EncoderSpec,
    allow_change: bool,
    where: Path,
) -> Encoder | None:
    info = manifest.get("encoder")
    if info is None:
        return None
    if not isinstance(info, dict) or not isinstance(info.get("id"), str):
        raise ModelLoadError(f"{where}: field 'encoder' is not valid")
    if "state" in info:  # a fitted TF-IDF encoder travels with the model
        try:
            saved: Encoder = TfidfEncoder.from_state(info["state"], child_arrays(arrays, "encoder"))
        except ModelArrayError as exc:
            apath = str(where.with_name(ARRAYS))
            raise ModelArrayError(f"encoder/{exc.array}", exc.problem, apath) from None
        except (ModelLoadError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise ModelLoadError(f"{where}: field 'encoder' is corrupt: {exc}") from None
        if saved.id != info["id"]:
            raise ModelLoadError(
                f"{where}: field 'encoder' is corrupt: the saved TF-IDF state has id "
                f"{saved.id!r}, not the recorded {info['id']!r}"
            )
        resolved = saved if encoder is None else get_encoder(encoder)
    else:
        spec = info.get("spec")
        if encoder is None and info.get("object") is True:
            raise EncoderMismatchError(where, info["id"], None, needs_object=True)
        if encoder is None and not is_builtin_encoder(spec):
            raise EncoderMismatchError(where, str(spec), None)
        resolved = get_encoder(encoder if encoder is not None else spec)
        saved = resolved
    if (resolved.id != info.get("id") or saved.id != info.get("id")) and not allow_change:
        raise EncoderMismatchError(where, info["id"], resolved.id)
    return resolved


__all__ = ["LoadOptions", "load_retriever", "save_retriever", "saved_model"]
