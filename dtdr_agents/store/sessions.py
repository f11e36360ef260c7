"""Session state in the run store, so that replicas of the MCP proxy share nothing else.

`SessionStore(url)` keeps one row per session key in ``dtdr_sessions`` (schema version 2 on,
`dtdr_agents.store.schema`): the session's request, the tools it called and the tools its
last search found, as JSON (never pickled), with the time of the last write; from version 3
also the answers to its last forwarded calls (`Answer`), so that a client retrying a call
gets the recorded answer instead of running and recording it twice. `save` is an atomic
upsert (the last write wins): a call and its answer are recorded together or not at all.
`expire` deletes sessions idle for longer than given; the MCP proxy calls it every
`DEFAULT_EXPIRE_INTERVAL` seconds with a time-to-live of `DEFAULT_TTL` (its options).

Example:
    >>> store = SessionStore("sqlite://")  # in memory
    >>> store.save("client-1", SessionState(request="weather in Paris", history=("geo",)))
    >>> store.load("client-1").history
    ('geo',)
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Self, TypeVar

from sqlalchemy import delete, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.sql.dml import Insert

from dtdr_agents.store.errors import StoreError
from dtdr_agents.store.runs import DEFAULT_URL, open_store, store_url
from dtdr_agents.store.schema import SessionRow
from dtdr_agents.store.session_limits import (
    DEFAULT_EXPIRE_INTERVAL,
    DEFAULT_TTL,
    MAX_ANSWER_CHARS,
    MAX_ANSWERS,
)
from dtdr_agents.store.session_state import MAX_KEY, Answer, SessionState, _check_key

T = TypeVar("T")

__all__ = [
    "DEFAULT_EXPIRE_INTERVAL",
    "DEFAULT_TTL",
    "MAX_ANSWERS",
    "MAX_ANSWER_CHARS",
    "MAX_KEY",
    "Answer",
    "SessionState",
    "SessionStore",
]


def _hidden(url: str | Path) -> str:
    """`url` without its password (or a placeholder when it does not parse)."""
    try:
        return make_url(str(url)).render_as_string(hide_password=True)
    except ArgumentError:
        return str(url) if "@" not in str(url) else "<a URL that does not parse>"


class SessionStore:
    """Proxy session state by key, in the run store's database.

    Args:
        url: A SQLAlchemy URL (``sqlite:///runs.db``, ``postgresql://user@host/db``) or a path
            of an SQLite file; the store's tables are created, or upgraded in place.

    Raises:
        StoreError: The URL is not a supported database, the database cannot be reached, or
            it holds a newer schema or a foreign ``dtdr_runs`` table.
    """

    def __init__(self, url: str | Path = DEFAULT_URL) -> None:
        try:
            self.url = store_url(url)
        except StoreError:
            raise StoreError(
                f"session store URL {_hidden(url)!r} is not a sqlite:/// or postgresql:// URL "
                "(or a path of an SQLite file)"
            ) from None
        opened = open_store(self.url, "session store")
        self.where, self.engine, self.upgraded_from, self.schema_version = opened

    def _run(self, what: str, work: Callable[[], T]) -> T:
        """`work()`, with a database failure reported as a StoreError naming the store."""
        try:
            return work()
        except OperationalError as exc:
            raise StoreError(f"session store {self.where}: cannot {what}: {exc.orig}") from None

    def _upsert(self, row: dict[str, Any]) -> Insert:
        if self.engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            pg = pg_insert(SessionRow).values(row)
            return pg.on_conflict_do_update(
                index_elements=["key"], set_={k: pg.excluded[k] for k in row if k != "key"}
            )
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        lite = sqlite_insert(SessionRow).values(row)
        return lite.on_conflict_do_update(
            index_elements=["key"], set_={k: lite.excluded[k] for k in row if k != "key"}
        )

    def load(self, key: str) -> SessionState | None:
        """The state saved under `key`, None when there is none."""
        _check_key(key)

        def work() -> SessionState | None:
            with self.engine.connect() as conn:
                row = conn.execute(
                    select(
                        SessionRow.request, SessionRow.history, SessionRow.found, SessionRow.answers
                    ).where(SessionRow.key == key)
                ).first()
            if row is None:
                return None
            try:
                answers = tuple(Answer(*a) for a in row.answers or ())
                return SessionState(row.request, tuple(row.history), tuple(row.found), answers)
            except (TypeError, ValueError) as exc:
                raise StoreError(
                    f"session store {self.where}: the row of session {key!r} in dtdr_sessions "
                    f"is malformed: {exc}"
                ) from None

        return self._run(f"load session {key!r}", work)

    def save(self, key: str, state: SessionState) -> None:
        """Write `state` under `key` in one statement (the last write wins)."""
        _check_key(key)
        if not isinstance(state, SessionState):
            raise TypeError(f"state must be a SessionState, got {type(state)}")
        row = {
            "key": key,
            "request": state.request,
            "history": list(state.history),
            "found": list(state.found),
            "answers": [a._row() for a in state.answers],
            "updated_at": datetime.now(UTC),
        }

        def work() -> None:
            with self.engine.begin() as conn:
                conn.execute(self._upsert(row))

        self._run(f"save session {key!r}", work)

    def delete(self, key: str) -> bool:
        """Forget the session `key`; False when there was none."""
        _check_key(key)

        def work() -> bool:
            with self.engine.begin() as conn:
                done = conn.execute(delete(SessionRow).where(SessionRow.key == key))
                return bool(done.rowcount)

        return self._run(f"delete session {key!r}", work)

    def expire(self, older_than_s: float) -> int:
        """Delete the sessions not written for `older_than_s` seconds; returns how many."""
        if (
            isinstance(older_than_s, bool)
            or not isinstance(older_than_s, int | float)
            or not older_than_s >= 0
        ):
            raise ValueError(f"older_than_s must be >= 0 seconds, got {older_than_s!r}")
        cutoff = datetime.now(UTC) - timedelta(seconds=older_than_s)

        def work() -> int:
            with self.engine.begin() as conn:
                done = conn.execute(delete(SessionRow).where(SessionRow.updated_at < cutoff))
                return int(done.rowcount)

        return self._run("expire sessions", work)

    def close(self) -> None:
        """Release the database connections."""
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
