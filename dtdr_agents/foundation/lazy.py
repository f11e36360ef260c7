"""Public names of a package that import their module on first use (PEP 562).

A package that re-exports names from heavy modules binds its `__getattr__` and `__dir__` to
the pair `lazy_names` returns, so that importing the package imports none of them::

    __getattr__, __dir__ = lazy_names(__name__, {"RunStore": "dtdr_agents.store.runs"})

A name is looked up once: the value is then set on the package, a plain attribute from there on.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, whose names live in other modules.

    Args:
        package: The package's `__name__`.
        where: Public name -> absolute path of the module that defines it.

    Returns:
        `__getattr__(name)` (imports the module of `name`; AttributeError for a name not in
        `where`, so that `from package import submodule` still finds a submodule) and
        `__dir__()` (the package's attributes and every lazy name).
    """

    def getattr_(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return getattr_, dir_
