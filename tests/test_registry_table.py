"""The registry's table of built-in retrievers matches what their modules register.

`registry.BUILT_IN` tells which module to import for an id or a class name; the ids stay with
each class (`retriever_id`, `variants`). Every module of `dtdr_agents.retrievers` is imported
here, so a new retriever module whose class is missing from the table fails this test, which
prints the table's line to add.
"""

from __future__ import annotations

import importlib
import pkgutil

import dtdr_agents.retrievers as package
from dtdr_agents.retrievers import registry
from dtdr_agents.retrievers.base import ToolRetriever


def _subclasses(cls: type) -> set[type]:
    out: set[type] = set()
    sub: type
    for sub in cls.__subclasses__():
        out |= {sub, *_subclasses(sub)}
    return out


def _registered_by_the_modules() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Class name -> (module, ids) of every class the package's modules register."""
    prefix = f"{package.__name__}."
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(prefix + module.name)
    return {
        cls.__name__: (
            cls.__module__.removeprefix(prefix),
            (cls.__dict__["retriever_id"], *cls.__dict__.get("variants", {})),
        )
        for cls in _subclasses(ToolRetriever)
        if cls.__module__.startswith(prefix) and cls.__dict__.get("retriever_id")
    }


def test_every_class_is_in_the_table_with_its_module_and_ids() -> None:
    found = _registered_by_the_modules()
    lines = "\n".join(f"    {name!r}: {where!r}," for name, where in sorted(found.items()))
    assert dict(registry.BUILT_IN) == found, f"registry.BUILT_IN should read:\n{lines}"


def test_every_table_entry_resolves_to_its_registered_class() -> None:
    for name, (module, ids) in registry.BUILT_IN.items():
        cls = registry.class_by_name(name)
        assert cls is getattr(importlib.import_module(f"{package.__name__}.{module}"), name)
        for rid in ids:
            assert registry.entry(rid).cls is cls, rid
    assert registry.class_by_name("NoSuchRetriever") is None
    registry.retriever_ids()  # lists the built-in ids in the table's order, however imported
    assert list(registry._BY_ID)[: len(registry._CLASS_OF_ID)] == list(registry._CLASS_OF_ID)
