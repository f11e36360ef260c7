"""The run store: agent runs in a database (SQLite by default, PostgreSQL by URL).

Agents record runs (`RunStore.add`); `fit` and `refit` read demonstrations from the store
(`RunStore.demonstrations`, `RunStore.dataset`); importers turn existing traces into runs;
`publish` puts fitted models behind an atomic `latest` pointer that `Reloader` follows.

Names load on first use, so that the agent runtime (which takes a `Reloader`) does not import
SQLAlchemy or the dataset loaders.
"""

from __future__ import annotations

from dtdr_agents.foundation.lazy import lazy_names

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

"""Public name -> its module in this package."""

__getattr__, __dir__ = lazy_names(__name__, {n: f"{__name__}.{m}" for n, m in _WHERE.items()})


__all__ = sorted(_WHERE)
