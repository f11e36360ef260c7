"""The one registry of retriever ids.

A `ToolRetriever` subclass with a non-empty `retriever_id` registers itself when its module is
imported (`ToolRetriever.__init_subclass__` calls `register`). The built-in retriever modules
are imported when an id or a class name is first asked for, not when the package is imported:
`BUILT_IN` tells which module defines each class and the ids it registers, and a test checks
it against what every module of the package registers. Adding a retriever is one new file and
its line in `BUILT_IN`. Listing the ids (`retriever_ids`, `default_bench_ids`, ...) imports
every built-in module. Third-party packages register theirs through the entry-point group
`dtdr_agents.retrievers`.

Ids:
    * a plain id (`"dtdr-c"`) or a named variant (`"dtdr-l-s"`: a class's preset parameters);
    * a composite id `"outer:inner"` (`"toolqp:qts"`, `"ptr:dtdr-l-s"`, `"toolqp:ptr:qts"`):
      the class of `outer` has `composite = True` and takes the retriever built from `inner`
      as its `base` parameter.

This module imports nothing from the retriever modules at import time, so it is free of
import cycles.
"""

from __future__ import annotations

import importlib
import inspect
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dtdr_agents.retrievers.base import ToolRetriever

ENTRY_POINT_GROUP = "dtdr_agents.retrievers"
"""Entry-point group through which other packages register retriever classes."""

BUILT_IN: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "RandomRetriever": ("random_baseline", ("random",)),
    "BM25Retriever": ("bm25", ("bm25",)),
    "QTSRetriever": ("similarity", ("qts",)),
    "ToolGraphRetriever": ("tgr", ("tgr",)),
    "LessIsMoreRetriever": ("lim", ("lim",)),
    "DTDRC": ("dtdr_c", ("dtdr-c", "dtdr-c-paper")),
    "StaticDR": ("dtdr_c", ("dr",)),
    "DTDRL": ("linear", ("dtdr-l", "dtdr-l-s")),
    "StaticLR": ("linear", ("lr",)),
    "GraphToolCallRetriever": ("peer", ("peer-gtc",)),
    "HybridRetriever": ("hybrid", ("hybrid",)),
    "PTRRecommender": ("ptr", ("ptr",)),
    "ToolQPRetriever": ("toolqp", ("toolqp",)),
}
"""Built-in class name -> (its module in this package, the ids it registers: its own id, then
its variants), in registration order (the order `dtdr-agents bench` runs its defaults in).
`tests/test_registry_table.py` checks it against the classes; each class keeps its own ids."""

_CLASS_OF_ID = {rid: name for name, (_, ids) in BUILT_IN.items() for rid in ids}
_ORDER = {rid: i for i, rid in enumerate(_CLASS_OF_ID)}


@dataclass(frozen=True)
class Entry:
    """One registered id.

    Attributes:
        id: The id as written on the command line.
        cls: The retriever class it builds.
        preset: Parameters a named variant sets (empty for the class's own id).
        bench_default: Whether `dtdr-agents bench` runs it when no ids are given.
    """

    id: str
    cls: type[ToolRetriever]
    preset: Mapping[str, Any] = field(default_factory=dict)
    bench_default: bool = False


_BY_ID: dict[str, Entry] = {}
_BY_CLASS_NAME: dict[str, type[ToolRetriever]] = {}
_plugins_loaded = False
_lock = threading.Lock()


def register(cls: type[ToolRetriever]) -> None:
    """Register `cls` under its `retriever_id` and its own `variants`.

    Raises:
        ValueError: If the id, a variant id or the class name is taken by another class, or an
            id contains ":" (reserved for composites).
    """
    rid = cls.__dict__.get("retriever_id", "")
    if not rid:
        return
    own_variants: Mapping[str, Mapping[str, Any]] = cls.__dict__.get("variants", {})
    bench_variants: tuple[str, ...] = cls.__dict__.get("bench_variants", ())
    entries = [Entry(rid, cls, {}, bool(cls.__dict__.get("bench_default", False)))]
    entries += [
        Entry(vid, cls, dict(preset), vid in bench_variants) for vid, preset in own_variants.items()
    ]
    for entry in entries:
        if ":" in entry.id or not entry.id.strip():
            raise ValueError(f"{cls.__qualname__}: retriever id {entry.id!r} is not valid")
        taken = _BY_ID.get(entry.id)
        if taken is not None and _qualname(taken.cls) != _qualname(cls):
            raise ValueError(
                f"retriever id {entry.id!r} of {_qualname(cls)} is already registered by "
                f"{_qualname(taken.cls)}"
            )
    taken_cls = _BY_CLASS_NAME.get(cls.__name__)
    if taken_cls is not None and _qualname(taken_cls) != _qualname(cls):
        raise ValueError(
            f"class name {cls.__name__!r} of {_qualname(cls)} is already registered by "
            f"{_qualname(taken_cls)} (saved models record the class name)"
        )
    with _lock:
        for entry in entries:
            _BY_ID[entry.id] = entry
        _BY_CLASS_NAME[cls.__name__] = cls


def _import_built_in(name: str) -> type[ToolRetriever] | None:
    """The built-in class `name`, its module imported and the class registered; None if unknown.

    Registering again is a no-op, unless the registry was replaced after the module was first
    imported (the tests do so), which this keeps working.
    """
    where = BUILT_IN.get(name)
    if where is None:
        return None
    cls: type[ToolRetriever] = getattr(importlib.import_module(f"{__package__}.{where[0]}"), name)
    if _BY_CLASS_NAME.get(name) is not cls:
        register(cls)
    return cls


def _import_all() -> None:
    """Import every built-in class; the registry lists the built-in ids in `BUILT_IN` order."""
    global _BY_ID
    for name in BUILT_IN:
        _import_built_in(name)
    with _lock:
        _BY_ID = dict(sorted(_BY_ID.items(), key=lambda item: _ORDER.get(item[0], len(_ORDER))))


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()  # importing the module registers its classes
        except Exception as exc:  # a broken plugin must not break the package
            warnings.warn(
                f"retriever plugin {ep.name!r} ({ep.value}) failed to load: {exc}",
                RuntimeWarning,
                stacklevel=2,
            )


def entry(rid: str) -> Entry:
    """The registry entry of a plain or variant id (not a composite id).

    Raises:
        ValueError: If the id is unknown; the message lists the known ids.
    """
    found = _BY_ID.get(rid)
    if found is None and rid in _CLASS_OF_ID:
        _import_built_in(_CLASS_OF_ID[rid])
        found = _BY_ID.get(rid)
    if found is None:
        _load_plugins()
        found = _BY_ID.get(rid)
    if found is None:
        raise ValueError(f"unknown retriever {rid!r}; choose one of {retriever_ids()}")
    return found


def class_by_name(name: str) -> type[ToolRetriever] | None:
    """The registered class with this class name (as recorded in a saved model), or None."""
    cls = _BY_CLASS_NAME.get(name) or _import_built_in(name)
    if cls is None:
        _load_plugins()
        cls = _BY_CLASS_NAME.get(name)
    return cls


def registered_classes() -> list[type[ToolRetriever]]:
    """Every registered class, by class name."""
    _import_all()
    return [_BY_CLASS_NAME[n] for n in sorted(_BY_CLASS_NAME)]


def retriever_ids() -> list[str]:
    """Every plain and variant id (composites take a base: see `composite_ids`)."""
    _import_all()
    return sorted(_BY_ID)


def composite_ids() -> list[str]:
    """The composite ids as patterns, e.g. `"toolqp:<base>"`."""
    _import_all()
    return sorted(f"{e.id}:<base>" for e in _BY_ID.values() if e.cls.composite and not e.preset)


def default_bench_ids() -> tuple[str, ...]:
    """Ids `dtdr-agents bench` runs by default, in registration order."""
    _import_all()
    return tuple(e.id for e in _BY_ID.values() if e.bench_default)


def accepted_params(cls: type[ToolRetriever]) -> set[str]:
    """The keyword parameters of `cls.__init__`."""
    return {p for p in inspect.signature(cls.__init__).parameters if p != "self"}


def make_retriever(retriever_id: str, /, *, lenient: bool = False, **params: Any) -> ToolRetriever:
    """Build an unfitted retriever from its id.

    Each keyword reaches every retriever of the tree whose constructor accepts it: with
    `make_retriever("toolqp:qts", encoder=e, planner=p)`, `encoder` reaches `qts` (and
    `toolqp` if it takes one) and `planner` reaches `toolqp`. A composite's base may also be
    given as an object: `make_retriever("toolqp", base=make_retriever("qts"), planner=p)`; a
    composite given neither builds its class's `default_base`.

    Args:
        retriever_id: A plain, variant or composite id ("dtdr-c", "dtdr-l-s", "toolqp:qts").
        lenient: Drop keywords that no retriever of the tree accepts instead of raising (the
            bench passes its whole context this way).
        **params: Constructor parameters.

    Raises:
        ValueError: On an unknown id, a base given to a non-composite, or (unless `lenient`)
            a keyword no retriever accepts.
    """
    if not isinstance(retriever_id, str) or not retriever_id.strip():
        raise ValueError(f"retriever id must be a non-empty string, got {retriever_id!r}")
    used: set[str] = set()
    retriever = _build(retriever_id.strip(), params, used)
    unused = sorted(set(params) - used)
    if unused and not lenient:
        raise ValueError(
            f"no retriever in {retriever_id!r} accepts parameter(s) {unused}; "
            f"{_describe_params(retriever_id)}"
        )
    return retriever


def _build(rid: str, params: Mapping[str, Any], used: set[str]) -> ToolRetriever:
    head, sep, tail = rid.partition(":")
    found = entry(head)
    cls = found.cls
    accepted = accepted_params(cls)
    kwargs = {k: v for k, v in params.items() if k in accepted and k != "base"}
    if cls.composite:
        if sep and "base" in params and params["base"] is not None:
            raise ValueError(f"{rid!r} names its base after ':'; do not also pass base=")
        if sep:
            if not tail:
                raise ValueError(f"composite id {rid!r} names no base after ':'")
            kwargs["base"] = _build(tail, params, used)
        elif params.get("base") is not None:
            kwargs["base"] = params["base"]
            used.add("base")
        else:
            kwargs["base"] = _build(cls.default_base, params, used)
    elif sep:
        raise ValueError(
            f"{head!r} is not a composite retriever, so {rid!r} cannot name a base; "
            f"composites: {composite_ids()}"
        )
    used.update(kwargs)
    return cls(**{**found.preset, **kwargs})


def _describe_params(rid: str) -> str:
    parts = []
    for head in rid.split(":"):
        try:
            cls = entry(head).cls
        except ValueError:
            continue
        parts.append(f"{head} takes {sorted(accepted_params(cls))}")
    return "; ".join(parts)


def tree(retriever: ToolRetriever) -> list[ToolRetriever]:
    """The retriever and every retriever nested in its parameters, outermost first."""
    out = [retriever]
    for part in retriever.parts().values():
        out.extend(tree(part))
    return out


def unavailable_reason(retriever: ToolRetriever) -> str | None:
    """Why some retriever of the tree cannot run here (asked of each class), or None."""
    for node in tree(retriever):
        reason = type(node).unavailable_reason(**node.get_params())
        if reason:
            rid = node.retriever_id or type(node).__name__
            return reason if node is retriever else f"{rid}: {reason}"
    return None
