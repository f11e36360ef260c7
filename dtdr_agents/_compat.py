"""Deprecated module paths of 0.1 (the flat package), kept for one minor version.

0.2 put the modules in layer packages (`foundation`, `retrievers`, `runtime`, `evaluation`).
Importing an old path, for example `dtdr_agents.types` or `dtdr_agents.e2e.harness`, still
works: it gives the module at its new path (the same module object, so a monkeypatch through
either name is seen by both) and warns once with `DeprecationWarning`. To be removed in 0.3.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

MOVED: dict[str, str] = {
    "dtdr_agents.types": "dtdr_agents.foundation.types",
    "dtdr_agents.errors": "dtdr_agents.foundation.errors",
    "dtdr_agents.encoders": "dtdr_agents.foundation.encoders",
    "dtdr_agents.persistence": "dtdr_agents.foundation.persistence",
    "dtdr_agents.atomic": "dtdr_agents.foundation.atomic",
    "dtdr_agents.checks": "dtdr_agents.foundation.checks",
    "dtdr_agents.chat": "dtdr_agents.foundation.chat",
    "dtdr_agents.retry": "dtdr_agents.foundation.retry",
    "dtdr_agents.clauses": "dtdr_agents.foundation.clauses",
    "dtdr_agents.progress": "dtdr_agents.foundation.progress",
    "dtdr_agents.selection": "dtdr_agents.foundation.selection",
    "dtdr_agents.index": "dtdr_agents.retrievers.index",
    "dtdr_agents.tool_graph": "dtdr_agents.retrievers.tool_graph",
    "dtdr_agents.prompting": "dtdr_agents.runtime.prompting",
    "dtdr_agents.recording": "dtdr_agents.runtime.recording",
    "dtdr_agents.replay": "dtdr_agents.runtime.replay",
    "dtdr_agents.metrics": "dtdr_agents.evaluation.metrics",
    "dtdr_agents.intervals": "dtdr_agents.evaluation.intervals",
    "dtdr_agents.bench": "dtdr_agents.evaluation.bench",
    "dtdr_agents.perf": "dtdr_agents.evaluation.perf",
    "dtdr_agents.plots": "dtdr_agents.evaluation.plots",
    "dtdr_agents.report": "dtdr_agents.evaluation.report",
    "dtdr_agents.docsync": "dtdr_agents.evaluation.docsync",
    "dtdr_agents.stop_rule": "dtdr_agents.evaluation.stop_rule",
    "dtdr_agents.e2e": "dtdr_agents.evaluation.e2e",
    "dtdr_agents.planning.speed": "dtdr_agents.evaluation.toolqp_speed",
    "dtdr_agents.recommend.bench": "dtdr_agents.evaluation.recommend_bench",
}
"""Old module path -> new module path. A package's submodules follow it (`dtdr_agents.e2e.x`)."""


def new_name(old: str) -> str | None:
    """The new path of the old module `old`, or None if it did not move."""
    for prefix, target in MOVED.items():
        if old == prefix or old.startswith(prefix + "."):
            return target + old[len(prefix) :]
    return None


class _Alias(importlib.abc.Loader):
    """Loads an old path as the already importable module at its new path."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.target}; the old path goes in dtdr-agents 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was executed under its new name."""


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the deprecated paths listed in `MOVED`."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("dtdr_agents."):
            return None
        new = new_name(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder on `sys.meta_path` once."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
