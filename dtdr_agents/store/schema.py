"""The run store's tables and their versions (SQLAlchemy 2, SQLite or PostgreSQL).

Three tables, all prefixed ``dtdr_`` so that the store can share a database with other
applications: ``dtdr_meta`` (key/value; ``schema_version``), ``dtdr_runs`` (one row per
agent run) and, from version 2, ``dtdr_sessions`` (the MCP proxy's session state by client
key, `dtdr_agents.store.sessions`; version 3 adds the answers to its last calls). `upgrade`
brings a database to `SCHEMA_VERSION` in place, one step of `MIGRATIONS` at a time,
inside one transaction that holds a lock against concurrent upgrades (PostgreSQL: a
transaction-scoped advisory lock; SQLite: every store transaction begins ``IMMEDIATE``, see
`dtdr_agents.store.runs.make_engine`). A database whose version is newer than this package
reads is refused, never written.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import (
    JSON,
    Connection,
    DateTime,
    Index,
    MetaData,
    String,
    Text,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dtdr_agents.store.errors import StoreError

JSON_TYPE = JSON().with_variant(JSONB(), "postgresql")
"""JSON columns: JSONB on PostgreSQL, JSON text on SQLite."""

ADVISORY_LOCK = 0x64746472
"""PostgreSQL advisory-lock key of schema upgrades ("dtdr")."""


class Base(DeclarativeBase):
    """Declarative base of the store's tables."""

    metadata = MetaData()


class Meta(Base):
    """``dtdr_meta``: the store's own facts, e.g. ``schema_version``."""

    __tablename__ = "dtdr_meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Run(Base):
    """``dtdr_runs``: one agent run (request, calls made, tools shown per step, outcome)."""

    __tablename__ = "dtdr_runs"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    request: Mapped[str] = mapped_column(Text)
    calls: Mapped[list[str]] = mapped_column(JSON_TYPE)
    edges: Mapped[list[list[int]] | None] = mapped_column(JSON_TYPE, nullable=True)
    arguments: Mapped[list[dict[str, object]] | None] = mapped_column(JSON_TYPE, nullable=True)
    shown: Mapped[list[list[str]] | None] = mapped_column(JSON_TYPE, nullable=True)
    outcome: Mapped[str | None] = mapped_column(String(16), nullable=True)
    session: Mapped[str | None] = mapped_column(String(128), nullable=True)
    source: Mapped[str] = mapped_column(String(64))
    catalogue: Mapped[str | None] = mapped_column(String(64), nullable=True)

    __table_args__ = (
        Index("ix_dtdr_runs_created_at", "created_at"),
        Index("ix_dtdr_runs_session", "session"),
    )


class SessionRow(Base):
    """``dtdr_sessions``: one proxy session's state (request, calls, found tools) by key."""

    __tablename__ = "dtdr_sessions"
    key: Mapped[str] = mapped_column(String(256), primary_key=True)
    request: Mapped[str | None] = mapped_column(Text, nullable=True)
    history: Mapped[list[str]] = mapped_column(JSON_TYPE)
    found: Mapped[list[str]] = mapped_column(JSON_TYPE)
    answers: Mapped[list[list[object]] | None] = mapped_column(JSON_TYPE, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (Index("ix_dtdr_sessions_updated_at", "updated_at"),)


def _create_v1(conn: Connection) -> None:
    """Version 1: the meta and runs tables."""
    Base.metadata.create_all(conn, tables=[Meta.__table__, Run.__table__])  # type: ignore[list-item]


def _create_v2(conn: Connection) -> None:
    """Version 2: the sessions table."""
    Base.metadata.create_all(conn, tables=[SessionRow.__table__])  # type: ignore[list-item]


def _add_answers_v3(conn: Connection) -> None:
    """Version 3: the sessions' answers to their last calls (a retried call gets its answer)."""
    if "answers" not in {c["name"] for c in inspect(conn).get_columns("dtdr_sessions")}:
        kind = JSON_TYPE.compile(dialect=conn.dialect)
        conn.execute(text(f"ALTER TABLE dtdr_sessions ADD COLUMN answers {kind}"))


Migration = Callable[[Connection], None]

MIGRATIONS: list[Migration] = [_create_v1, _create_v2, _add_answers_v3]
"""`MIGRATIONS[i]` upgrades a database from version ``i`` to ``i + 1`` (0: empty)."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this package writes and reads."""


def _lock(conn: Connection) -> None:
    """Serialise upgrades on PostgreSQL (SQLite transactions already hold the write lock)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": ADVISORY_LOCK})


def read_version(conn: Connection) -> int:
    """The schema version of the database behind `conn` (0: no store tables yet).

    Raises:
        StoreError: If ``dtdr_runs`` exists without ``dtdr_meta`` (a table of another
            application, or a damaged store), or the recorded version is not a number.
    """
    names = set(inspect(conn).get_table_names())
    if "dtdr_meta" not in names:
        if "dtdr_runs" in names:
            raise StoreError(
                "the database has a table 'dtdr_runs' but no 'dtdr_meta': not a dtdr-agents "
                "run store (refusing to write to it)"
            )
        return 0
    raw = conn.execute(select(Meta.value).where(Meta.key == "schema_version")).scalar()
    try:
        return int(raw) if raw is not None else 0
    except ValueError:
        raise StoreError(
            f"table 'dtdr_meta', key 'schema_version' holds {raw!r}, not a version number"
        ) from None


def upgrade(conn: Connection, migrations: list[Migration] | None = None) -> tuple[int, int]:
    """Bring the database to the newest version in place; returns (version before, after).

    Must run inside a transaction (`Engine.begin`), which it locks first; each missing step
    of `migrations` (default `MIGRATIONS`) runs in order, then the new version is recorded.
    A failed step rolls every step back.

    Raises:
        StoreError: If the database is newer than `migrations` know.
    """
    steps = MIGRATIONS if migrations is None else migrations
    _lock(conn)
    before = read_version(conn)
    if before > len(steps):
        raise StoreError(
            f"the run store's schema is version {before}; this dtdr-agents reads up to "
            f"version {len(steps)} (upgrade dtdr-agents)"
        )
    for step in steps[before:]:
        step(conn)
    if before < len(steps):
        if before == 0:
            conn.execute(insert(Meta).values(key="schema_version", value=str(len(steps))))
        else:
            conn.execute(
                update(Meta).where(Meta.key == "schema_version").values(value=str(len(steps)))
            )
    return before, len(steps)
