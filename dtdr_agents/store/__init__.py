"""The run store: agent runs in a database (SQLite by default, PostgreSQL by URL).

Agents record runs (`RunStore.add`); `fit` and `refit` read demonstrations from the store
(`RunStore.demonstrations`, `RunStore.dataset`); importers turn existing traces into runs;
`publish` puts fitted models behind an atomic `latest` pointer that `Reloader` follows.
"""

from __future__ import annotations

from dtdr_agents.store.importers import FORMATS, import_jsonl, import_traces
from dtdr_agents.store.publish import (
    PublishError,
    Reloader,
    ReloadWarning,
    Version,
    publish,
    rollback,
    versions,
)
from dtdr_agents.store.runs import DEFAULT_URL, OUTCOMES, RunRecord, RunStore, store_url
from dtdr_agents.store.schema import SCHEMA_VERSION, StoreError

__all__ = [
    "DEFAULT_URL",
    "FORMATS",
    "OUTCOMES",
    "SCHEMA_VERSION",
    "PublishError",
    "ReloadWarning",
    "Reloader",
    "RunRecord",
    "RunStore",
    "StoreError",
    "Version",
    "import_jsonl",
    "import_traces",
    "publish",
    "rollback",
    "store_url",
    "versions",
]
