"""A run store in a real database: agents record runs, `fit` and `refit` read demonstrations.

`RunStore(url)` opens (and creates or upgrades in place, see `dtdr_agents.store.schema`) a
store behind a SQLAlchemy URL: an SQLite file by default (``sqlite:///runs.db``, or just a
path; nothing to set up), or ``postgresql://user@host/db`` for a fleet (psycopg 3). Each run
is one row: the request, the calls made (with their arguments and the dependency edges when
known), the tools shown at each step, and the outcome. Writes are idempotent by run id, so
re-importing a trace or retrying a write never duplicates a run.

SQLite: the file runs in WAL mode with a busy time-out, and every transaction begins
``IMMEDIATE`` (takes the write lock first), so that writer processes queue instead of failing
with "database is locked".

Example:
    >>> store = RunStore("sqlite://")  # in memory
    >>> store.add(RunRecord(request="weather in Paris then convert", calls=("geo", "weather")))
    True
    >>> [d.calls for d in store.demonstrations()]
    [('geo', 'weather')]
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Self

from sqlalchemy import Engine, and_, create_engine, event, func, or_, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.sql.dml import Insert

from dtdr_agents.datasets.base import Dataset
from dtdr_agents.foundation.errors import InvalidDemonstrationError
from dtdr_agents.foundation.types import CallArguments, Demonstration, Toolset
from dtdr_agents.store.errors import StoreError
from dtdr_agents.store.schema import Run, upgrade

DEFAULT_URL = "sqlite:///runs.db"
"""The embedded default: an SQLite file in the working folder."""

OUTCOMES = ("success", "failure")
"""The outcomes a run may record (None: unknown)."""

SQLITE_BUSY_MS = 60_000
"""How long an SQLite writer waits for the write lock before it fails."""

READ_BATCH = 1_000
"""Rows a read fetches from the database at a time (PostgreSQL: a server-side cursor)."""

Outcome = Literal["success", "failure"]

RunKey = tuple[datetime, str]
"""A run's place in recording order: its time, then its id."""


@dataclass(frozen=True)
class RunRecord:
    """One agent run as the store keeps it.

    Attributes:
        request: The user's request.
        calls: Tool names in the order they were called.
        edges: Dependencies ``(i, j)`` between calls, as in `Demonstration` (None: strict order).
        arguments: The arguments of each call, one per call, when recorded.
        shown: The tool names bound to the model at each step, when recorded.
        outcome: ``"success"``, ``"failure"`` or None (unknown).
        session: The agent session (conversation) the run belongs to.
        source: Who wrote it (``"recorder"``, ``"jsonl"``, ``"langsmith"``, ``"otel"``, ...).
        id: The run's id; a new ``run-<hex>`` when not given. Writes are idempotent by id.
        created_at: When the run was recorded (UTC); now when not given.
        catalogue: The tool catalogue's hash, when known.
    """

    request: str
    calls: tuple[str, ...]
    edges: tuple[tuple[int, int], ...] | None = None
    arguments: tuple[CallArguments, ...] | None = None
    shown: tuple[tuple[str, ...], ...] | None = None
    outcome: Outcome | None = None
    session: str | None = None
    source: str = "recorder"
    id: str = field(default_factory=lambda: f"run-{uuid.uuid4().hex}")
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    catalogue: str | None = None

    def __post_init__(self) -> None:
        demo = self.demonstration()  # validates request, calls, edges, arguments
        object.__setattr__(self, "calls", demo.calls)
        object.__setattr__(self, "edges", demo.edges)
        if self.outcome is not None and self.outcome not in OUTCOMES:
            raise InvalidDemonstrationError(
                f"run {self.id!r}: field 'outcome' must be one of {OUTCOMES} or None, "
                f"got {self.outcome!r}"
            )
        if self.shown is not None:
            shown = tuple(tuple(step) for step in self.shown)
            if not all(isinstance(n, str) and n for step in shown for n in step):
                raise InvalidDemonstrationError(
                    f"run {self.id!r}: field 'shown' must be lists of tool names, one per step"
                )
            object.__setattr__(self, "shown", shown)
        if not isinstance(self.id, str) or not self.id or len(self.id) > 128:
            raise InvalidDemonstrationError(
                f"field 'id' must be a non-empty string of at most 128 characters, got {self.id!r}"
            )
        if self.created_at.tzinfo is None:
            object.__setattr__(self, "created_at", self.created_at.replace(tzinfo=UTC))

    def demonstration(self) -> Demonstration:
        """The run as a demonstration (request and calls), as `fit` reads it."""
        return Demonstration(
            query=self.request,
            calls=tuple(self.calls),
            edges=self.edges,
            id=self.id,
            arguments=self.arguments,
        )

    @classmethod
    def from_demonstration(cls, demo: Demonstration, **fields: Any) -> RunRecord:
        """A run holding `demo`'s request, calls, edges and arguments (`fields` add the rest)."""
        if demo.id is not None:
            fields.setdefault("id", demo.id)
        return cls(
            request=demo.query,
            calls=demo.calls,
            edges=demo.edges,
            arguments=demo.arguments,
            **fields,
        )

    def _row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "created_at": self.created_at,
            "request": self.request,
            "calls": list(self.calls),
            "edges": None if self.edges is None else [list(e) for e in self.edges],
            "arguments": None
            if self.arguments is None
            else [{"arguments": a.values(), "label": a.label} for a in self.arguments],
            "shown": None if self.shown is None else [list(s) for s in self.shown],
            "outcome": self.outcome,
            "session": self.session,
            "source": self.source,
            "catalogue": self.catalogue,
        }

    @classmethod
    def _from_row(cls, row: Any) -> RunRecord:
        created = _aware(row.created_at)
        arguments = None
        if row.arguments is not None:
            arguments = tuple(
                CallArguments.of(a["arguments"], label=a.get("label")) for a in row.arguments
            )
        return cls(
            request=row.request,
            calls=tuple(row.calls),
            edges=None if row.edges is None else tuple((int(i), int(j)) for i, j in row.edges),
            arguments=arguments,
            shown=None if row.shown is None else tuple(tuple(s) for s in row.shown),
            outcome=row.outcome,
            session=row.session,
            source=row.source,
            id=row.id,
            created_at=created,
            catalogue=row.catalogue,
        )


def _aware(moment: datetime) -> datetime:
    """`moment` in UTC when it has no time zone (SQLite returns naive datetimes)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _after(key: RunKey) -> Any:
    """The SQL condition: a run comes after `key` in recording order (time, then id)."""
    moment, run_id = key
    return or_(Run.created_at > moment, and_(Run.created_at == moment, Run.id > run_id))


def _without_password(text: str) -> str:
    """`text` with the password of a ``scheme://user:password@host`` part masked."""
    return re.sub(r"(://[^/:@]*:)[^@/]*@", r"\1***@", text)


def store_url(url: str | Path) -> str:
    """A SQLAlchemy URL for `url`: a plain path is an SQLite file; ``postgresql://`` uses psycopg 3.

    Raises:
        StoreError: If `url` is not a URL SQLAlchemy understands, or names another database.
    """
    text = str(url)
    if "://" not in text:
        text = f"sqlite:///{Path(text).expanduser()}"
    try:
        parsed = make_url(text)
    except ArgumentError:  # the URL is not echoed: it may hold a password
        raise StoreError(
            f"store URL {_without_password(text)!r} does not parse: expected "
            "sqlite:///PATH or postgresql://USER@HOST/DB"
        ) from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise StoreError(
            f"store URL {parsed.render_as_string(hide_password=True)!r}: the run store "
            "supports sqlite:/// and postgresql:// URLs"
        )
    return parsed.render_as_string(hide_password=False)


def open_store(url: str, what: str) -> tuple[str, Engine, int | None, int]:
    """Connect to the store at `url` (from `store_url`), creating or upgrading its tables.

    Returns:
        The URL without its password (for messages), the engine, the schema version it was
        upgraded from (None: it was current or new) and the schema version now.

    Raises:
        StoreError: The database cannot be reached (named as `what`, without the password),
            or it holds a newer schema or a foreign table.
    """
    where = make_url(url).render_as_string(hide_password=True)
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            upgraded_from, version = upgrade(conn)
    except OperationalError as exc:
        engine.dispose()
        raise StoreError(f"cannot open the {what} {where}: {exc.orig}") from None
    except StoreError:
        engine.dispose()
        raise
    return where, engine, upgraded_from, version


def make_engine(url: str | Path) -> Engine:
    """An engine for the store at `url` (SQLite: WAL, busy time-out, ``BEGIN IMMEDIATE``)."""
    engine = create_engine(store_url(url))
    if engine.dialect.name == "sqlite":

        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # SQLAlchemy emits BEGIN itself (below)
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_MS}")
            if engine.url.database not in (None, "", ":memory:"):
                cur.execute("PRAGMA journal_mode = WAL")
            cur.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


class RunStore:
    """Agent runs in a database; `demonstrations()` is what `fit` learns from.

    Args:
        url: A SQLAlchemy URL (``sqlite:///runs.db``, ``postgresql://user@host/db``) or a path
            of an SQLite file. The store's tables are created, or upgraded in place.

    Raises:
        StoreError: The URL is not a supported database, the database cannot be reached, or
            it holds a newer schema or a foreign ``dtdr_runs`` table.
    """

    def __init__(self, url: str | Path = DEFAULT_URL) -> None:
        self.url = store_url(url)
        opened = open_store(self.url, "run store")
        self.where, self.engine, self.upgraded_from, self.schema_version = opened

    def _insert(self) -> Insert:
        if self.engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            return pg_insert(Run).on_conflict_do_nothing(index_elements=["id"])
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(Run).on_conflict_do_nothing(index_elements=["id"])

    def add(self, run: RunRecord) -> bool:
        """Write one run; False when a run with its id is already there (nothing written)."""
        return self.add_many([run]) == 1

    def add_many(self, runs: Iterable[RunRecord]) -> int:
        """Write runs in one transaction; returns how many were new (known ids are skipped)."""
        rows = [r._row() for r in runs]
        if not rows:
            return 0
        with self.engine.begin() as conn:
            result = conn.execute(self._insert().returning(Run.id), rows)
            return len(result.all())

    def count(self) -> int:
        """How many runs the store holds."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(Run)).scalar_one())

    def iter_runs(
        self,
        *,
        outcome: Outcome | None = None,
        session: str | None = None,
        since: datetime | None = None,
        batch_size: int = READ_BATCH,
    ) -> Iterator[RunRecord]:
        """The runs in recording order (time, then id), optionally filtered.

        Rows are fetched `batch_size` at a time (`_stream`), so memory does not grow with
        the store unless the caller keeps the runs.
        """
        query = select(Run.__table__).order_by(Run.created_at, Run.id)
        if outcome is not None:
            query = query.where(Run.outcome == outcome)
        if session is not None:
            query = query.where(Run.session == session)
        if since is not None:
            query = query.where(Run.created_at >= since)
        yield from self._stream(query, batch_size)

    def _stream(self, query: Any, batch_size: int) -> Iterator[RunRecord]:
        """The runs `query` selects, fetched `batch_size` rows at a time."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        with self.engine.connect() as conn:
            result = conn.execution_options(stream_results=True, yield_per=batch_size).execute(
                query
            )
            for batch in result.partitions():
                for row in batch:
                    yield RunRecord._from_row(row)

    def newest(self) -> RunKey | None:
        """The key of the run recorded last (None: the store is empty)."""
        query = select(Run.created_at, Run.id).order_by(Run.created_at.desc(), Run.id.desc())
        with self.engine.connect() as conn:
            row = conn.execute(query.limit(1)).first()
        return None if row is None else (_aware(row[0]), str(row[1]))

    def count_after(self, key: RunKey) -> int:
        """How many runs come after `key` in recording order (recorded since then)."""
        with self.engine.connect() as conn:
            query = select(func.count()).select_from(Run).where(_after(key))
            return int(conn.execute(query).scalar_one())

    def recent_demonstrations(
        self,
        limit: int | None,
        tools: Toolset,
        *,
        exclude_failures: bool = True,
        upto: RunKey | None = None,
        batch_size: int = READ_BATCH,
    ) -> tuple[list[Demonstration], int]:
        """The last `limit` runs as demonstrations, in recording order, read newest first.

        Runs are streamed `batch_size` rows at a time from the newest (at or before `upto`,
        when given) back, and the read stops once `limit` demonstrations are kept: memory
        and time grow with `limit`, not with the store. Failed runs (unless
        `exclude_failures` is False) and runs with no calls are left out, as by
        `demonstrations`.

        Args:
            limit: Demonstrations kept at most (None: every run of the store).
            tools: The catalogue every kept run is checked against.
            exclude_failures: Leave out the runs whose outcome was a failure.
            upto: Read no run recorded after this key.
            batch_size: Rows fetched at a time.

        Returns:
            The demonstrations, oldest first, and how many runs were read to find them.

        Raises:
            InvalidDemonstrationError: A kept run calls a tool outside `tools` (named with
                its id).
            ValueError: `limit` is below 1.
        """
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1 or None, got {limit}")
        query = select(Run.__table__).order_by(Run.created_at.desc(), Run.id.desc())
        if exclude_failures:
            query = query.where(or_(Run.outcome.is_(None), Run.outcome != "failure"))
        if upto is not None:
            query = query.where(~_after(upto))
        kept: list[Demonstration] = []
        read = 0
        for run in self._stream(query, batch_size):
            read += 1
            if not run.calls:
                continue
            demo = run.demonstration()
            demo.check_tools(tools)
            kept.append(demo)
            if limit is not None and len(kept) >= limit:
                break
        kept.reverse()
        return kept, read

    def demonstrations(self, *, exclude_failures: bool = True) -> list[Demonstration]:
        """The runs as demonstrations, in recording order; failed runs are left out by default.

        A run with no calls teaches nothing but an immediate stop, and is left out too.
        """
        return [
            run.demonstration()
            for run in self.iter_runs()
            if run.calls and not (exclude_failures and run.outcome == "failure")
        ]

    def dataset(self, tools: Toolset, *, exclude_failures: bool = True) -> Dataset:
        """The demonstrations with their catalogue, as a dataset loader returns them.

        Raises:
            InvalidDemonstrationError: A run calls a tool outside `tools` (named with its id).
        """
        demos = self.demonstrations(exclude_failures=exclude_failures)
        for demo in demos:
            demo.check_tools(tools)
        return Dataset(name="store", tools=tools, demos=demos, source=self.where)

    def close(self) -> None:
        """Release the database connections."""
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
