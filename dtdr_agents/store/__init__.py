"""The run store: agent runs in a database (SQLite by default, PostgreSQL by URL).

Agents record runs (`RunStore.add`); `fit` and `refit` read demonstrations from the store
(`RunStore.demonstrations`, `RunStore.dataset`); importers turn existing traces into runs;
`publish` puts fitted models behind an atomic `latest` pointer that `Reloader` follows.

Names load on first use, so that the agent runtime (which takes a `Reloader`) does not import
SQLAlchemy or the dataset loaders.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "DEFAULT_URL": "runs",
    "OUTCOMES": "runs",
    "RunRecord": "runs",
    "RunStore": "runs",
    "store_url": "runs",
    "FORMATS": "importers",
    "import_jsonl": "importers",
    "import_traces": "importers",
    "PublishError": "publishing",
    "ReloadWarning": "publishing",
    "Reloader": "publishing",
    "Version": "publishing",
    "publish": "publishing",
    "rollback": "publishing",
    "versions": "publishing",
    "SessionState": "sessions",
    "SessionStore": "sessions",
    "SCHEMA_VERSION": "schema",
    "StoreError": "errors",
}


def __getattr__(name: str) -> Any:
    """Load `name` from its module on first use."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'dtdr_agents.store' has no attribute {name!r}")
    return getattr(importlib.import_module(f"dtdr_agents.store.{module}"), name)


__all__ = sorted(_WHERE)
