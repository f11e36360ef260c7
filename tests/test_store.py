"""The run store on a real SQLite file and a real PostgreSQL server on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Connection, create_engine, insert, text

from dtdr_agents.foundation.errors import InvalidDemonstrationError
from dtdr_agents.foundation.types import CallArguments, Tool, Toolset
from dtdr_agents.store import (
    RunRecord,
    RunStore,
    SessionState,
    SessionStore,
    StoreError,
    import_jsonl,
    schema,
    store_url,
)
from dtdr_agents.store.testing import postgres_server, postgres_unavailable


def _run(i: int, **kw: object) -> RunRecord:
    base: dict[str, object] = {
        "request": f"find the weather in city {i} then convert it",
        "calls": ("geocode", "weather"),
        "id": f"r{i:05d}",
        "created_at": datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i),
    }
    base.update(kw)
    return RunRecord(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    base: str = request.getfixturevalue("pg_url")
    name = f"t_{abs(hash(request.node.nodeid)) % 10**9}"
    engine = create_engine(store_url(base), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
        conn.execute(text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return base.rsplit("/", 1)[0] + "/" + name


def test_runs_round_trip_with_every_field(url: str) -> None:
    full = _run(
        1,
        calls=("geocode", "weather", "convert"),
        edges=((0, 1), (1, 2)),
        arguments=(
            CallArguments.of({"city": "Paris"}),
            CallArguments.of({"lat": 48.85, "lon": 2.35}, label="w"),
            CallArguments.of({"unit": "F", "ok": True}),
        ),
        shown=(("geocode", "search"), ("weather",), ("convert", "weather")),
        outcome="success",
        session="s-1",
        source="recorder",
        catalogue="abc123",
    )
    with RunStore(url) as store:
        assert store.add(full)
        assert not store.add(full)  # idempotent by id
        assert store.add_many([_run(2, outcome="failure"), _run(3, calls=())]) == 2
        assert store.count() == 3
        back = list(store.iter_runs())
    assert back[0] == full
    assert [r.id for r in back] == ["r00001", "r00002", "r00003"]
    with RunStore(url) as store:
        demos = store.demonstrations()
        assert [d.id for d in demos] == ["r00001"]  # failure and no-call runs left out
        assert demos[0].arguments == full.arguments
        assert len(store.demonstrations(exclude_failures=False)) == 2
        assert [r.id for r in store.iter_runs(session="s-1")] == ["r00001"]
        assert [r.id for r in store.iter_runs(outcome="failure")] == ["r00002"]


def test_dataset_checks_calls_against_the_catalogue(url: str) -> None:
    tools = Toolset([Tool("geocode", "city to coordinates"), Tool("weather", "forecast")])
    with RunStore(url) as store:
        store.add_many([_run(1), _run(2, calls=("geocode", "translate"))])
        with pytest.raises(InvalidDemonstrationError, match=r"'r00002'.*translate"):
            store.dataset(tools)
        store.add(_run(3))
    with RunStore(url) as store:
        assert store.schema_version == schema.SCHEMA_VERSION


def test_concurrent_writer_processes_lose_and_duplicate_nothing(url: str, tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            from dtdr_agents.store import RunRecord, RunStore
            url, w = sys.argv[1], int(sys.argv[2])
            store = RunStore(url)
            for i in range(60):
                store.add(RunRecord(request=f"request {w} {i} please", calls=("a", "b"),
                                    id=f"w{w}-{i}"))
            store.close()
            """
        )
    )
    procs = [
        subprocess.Popen([sys.executable, str(script), url, str(w)], stderr=subprocess.PIPE)
        for w in range(4)
    ]
    errors = [p.communicate(timeout=300)[1].decode()[-2000:] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    with RunStore(url) as store:
        ids = [r.id for r in store.iter_runs()]
    assert len(ids) == 240 and len(set(ids)) == 240


def test_a_newer_schema_is_refused_and_left_alone(url: str) -> None:
    RunStore(url).close()
    engine = create_engine(store_url(url))
    with engine.begin() as conn:
        conn.execute(text("UPDATE dtdr_meta SET value = '99' WHERE key = 'schema_version'"))
    newest = schema.SCHEMA_VERSION
    with pytest.raises(
        StoreError, match=rf"version 99; this dtdr-agents reads up to version {newest}"
    ):
        RunStore(url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT value FROM dtdr_meta")).scalar() == "99"
    engine.dispose()


def test_upgrade_runs_missing_steps_in_place_and_rolls_back_a_failed_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(url) as store:
        store.add(_run(1))

    def add_note(conn: Connection) -> None:
        conn.execute(text("ALTER TABLE dtdr_runs ADD COLUMN note TEXT"))

    def broken(conn: Connection) -> None:
        conn.execute(text("ALTER TABLE dtdr_runs ADD COLUMN other TEXT"))
        raise RuntimeError("step failed")

    engine = RunStore(url).engine
    with pytest.raises(RuntimeError, match="step failed"), engine.begin() as conn:
        schema.upgrade(conn, [*schema.MIGRATIONS, add_note, broken])
    newest = schema.SCHEMA_VERSION
    with engine.connect() as conn:  # both steps rolled back, version unchanged
        assert schema.read_version(conn) == newest
        columns = [r[1] for r in conn.execute(text("PRAGMA table_info(dtdr_runs)"))]
        assert "note" not in columns and "other" not in columns
    with engine.begin() as conn:
        assert schema.upgrade(conn, [*schema.MIGRATIONS, add_note]) == (newest, newest + 1)
    with engine.connect() as conn:
        assert schema.read_version(conn) == newest + 1
        assert conn.execute(text("SELECT count(*) FROM dtdr_runs")).scalar() == 1
    engine.dispose()


def test_a_foreign_runs_table_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'other.db'}"
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE dtdr_runs (x INTEGER)"))
    engine.dispose()
    with pytest.raises(StoreError, match="not a dtdr-agents run store"):
        RunStore(url)


def test_urls_and_unreachable_servers_give_clear_errors(tmp_path: Path) -> None:
    assert store_url(tmp_path / "a.db") == f"sqlite:///{tmp_path / 'a.db'}"
    assert store_url("postgresql://u@h/db").startswith("postgresql+psycopg://")
    with pytest.raises(StoreError, match="supports sqlite:/// and postgresql://"):
        store_url("mysql://u@h/db")
    with pytest.raises(
        StoreError, match=r"cannot open the run store postgresql\+psycopg://"
    ) as err:
        RunStore("postgresql://nobody:secret@127.0.0.1:1/none")
    assert "secret" not in str(err.value) and "nobody:***@127.0.0.1:1" in str(err.value)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("outcome", "maybe", "field 'outcome' must be one of"),
        ("shown", (("a", ""),), "field 'shown' must be lists of tool names"),
        ("request", "  ", "field 'query' must be a non-empty string"),
        ("id", "", "field 'id' must be a non-empty string"),
        ("edges", ((1, 0),), "field 'edges' has \\(1, 0\\)"),
    ],
)
def test_bad_runs_name_the_field(field: str, value: object, message: str) -> None:
    with pytest.raises(InvalidDemonstrationError, match=message):
        _run(1, **{field: value})


def test_import_jsonl_skips_a_partial_last_line_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    lines = [
        {"query": "find the weather in Paris", "calls": ["geocode", "weather"], "id": "a-1"},
        {"query": "convert 3 miles to km", "calls": ["convert"]},
        {"query": "convert 3 miles to km", "calls": ["convert"]},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"query": "half')
    with RunStore(tmp_path / "runs.db") as store:
        added, problems = import_jsonl(store, path)
        assert added == 3 and store.count() == 3
        partial = [p for p in problems if p.message.endswith("a record being written")]
        assert len(partial) == 1 and partial[0].where.endswith("runs.jsonl:4")
        assert import_jsonl(store, path)[0] == 0
        with path.open("a") as f:  # the writer finishes its line and adds another
            f.write('", "calls": ["weather"]}\n')
            f.write(json.dumps({"query": "weather in Rome today", "calls": ["weather"]}) + "\n")
        assert import_jsonl(store, path)[0] == 2  # the finished line and the new one
        assert store.count() == 5


@pytest.mark.slow
def test_store_bench_reads_back_every_run_in_both_databases(tmp_path: Path) -> None:
    from dtdr_agents.cli import main

    out = tmp_path / "bench.json"
    assert (
        main(
            [
                "store",
                "bench",
                "--writers",
                "3",
                "--runs",
                "30",
                "--agents",
                "0",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert "reload" not in result
    for backend in ("sqlite", "postgresql"):
        row = result[backend]
        if "skipped" in row:
            assert backend == "postgresql" and postgres_unavailable()
            continue
        assert (row["read_back"], row["expected"], row["torn"]) == (90, 90, 0)


def test_a_refit_is_published_and_taken_up_while_agents_run_steps(tmp_path: Path) -> None:
    from dtdr_agents.evaluation.store_bench import reload_load

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    result = reload_load(url, agents=2, poll=0.2, seed_demos=6, runs=8, after=1.0)
    assert result["failed_steps"] == 0 and result["steps"] > 0, result["first_errors"]
    assert result["published"] == "v000002"
    assert result["refit_on_runs"] >= 6 + 8  # the seed demonstrations and the recorded runs
    assert all(t is not None for t in result["takeup_s"].values()), result  # every agent took it up
    with RunStore(url) as store:
        assert store.count() >= 14


def test_the_recorder_writes_runs_to_a_store_and_never_fails_a_step(tmp_path: Path) -> None:
    from dtdr_agents.runtime.recording import DemonstrationRecorder, RecordingWarning

    db = tmp_path / "runs.db"
    tools = Toolset([Tool(n, f"the {n} tool") for n in ("geocode", "weather", "convert")])
    recorder = DemonstrationRecorder(f"sqlite:///{db}", tools=tools)
    assert recorder.record("weather in Paris, then in F", steps=[["geocode"], ["weather"]])
    assert recorder.record("weather in Paris, then in F", steps=[["geocode"], ["weather"]]) is None
    with RunStore(db) as store:
        runs = list(store.iter_runs())
    assert [(r.calls, r.source) for r in runs] == [(("geocode", "weather"), "recorder")]
    db.unlink()  # the database goes away (and a directory blocks its re-creation)
    db.mkdir()
    recorder._store.engine.dispose()
    with pytest.warns(RecordingWarning, match=r"1 runs wait in memory \(0 dropped\)"):
        kept = recorder.record("convert 3 miles to km please", calls=["convert"])
    assert kept is not None and len(recorder.pending) == 1  # the step goes on
    db.rmdir()
    recorder._store = RunStore(db)  # the database is back
    assert recorder.record("weather in Rome right now", calls=["weather"])
    assert recorder.pending == []
    assert sorted(d.query for d in recorder.load().demos) == [
        "convert 3 miles to km please",
        "weather in Rome right now",
    ]
    with RunStore(db) as store:
        assert sorted(r.request for r in store.iter_runs()) == [
            "convert 3 miles to km please",
            "weather in Rome right now",
        ]
    with pytest.raises(StoreError, match="supports sqlite"):
        DemonstrationRecorder("mysql://u@h/db")


def test_sessions_save_load_delete_and_expire(url: str) -> None:
    with SessionStore(url) as store:
        assert store.load("a") is None
        store.save("a", SessionState("weather in Paris", ("geocode",), ()))
        store.save("b", SessionState(None))
        store.save("a", SessionState("weather in Rome", ("geocode", "weather"), ("convert",)))
    with SessionStore(url) as store:  # another process's view: the last write won
        assert store.load("a") == SessionState(
            "weather in Rome", ("geocode", "weather"), ("convert",)
        )
        assert store.load("b") == SessionState(None, (), ())
        assert store.expire(3600) == 0
        time.sleep(0.05)
        store.save("b", SessionState("still here"))
        assert store.expire(0.03) == 1  # "a" was idle, "b" was just written
        assert store.load("a") is None and store.load("b") == SessionState("still here")
        assert store.delete("b") and not store.delete("b")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"request": 3}, "SessionState.request"),
        ({"history": "geocode"}, "SessionState.history"),
        ({"found": ("ok", "")}, "SessionState.found"),
    ],
)
def test_bad_session_states_name_the_field(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SessionState(**kwargs)  # type: ignore[arg-type]


def test_session_errors_name_the_url_without_its_password(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store, pytest.raises(ValueError, match="session key"):
        store.save("", SessionState())
    with pytest.raises(StoreError, match=r"postgresql\+psycopg://u:\*\*\*@127\.0\.0\.1:9/x"):
        SessionStore("postgresql://u:secret@127.0.0.1:9/x")
    with pytest.raises(StoreError, match=r"'mysql://u:\*\*\*@h/x' is not a sqlite") as caught:
        SessionStore("mysql://u:secret@h/x")
    assert "secret" not in str(caught.value)


def test_a_version_1_store_upgrades_in_place_to_hold_sessions(url: str) -> None:
    engine = create_engine(store_url(url))
    with engine.begin() as conn:  # a store as version 1 wrote it, with one run
        assert schema.upgrade(conn, schema.MIGRATIONS[:1]) == (0, 1)
        conn.execute(insert(schema.Run).values(**_run(1)._row()))
    engine.dispose()
    with SessionStore(url) as store:
        assert (store.upgraded_from, store.schema_version) == (1, schema.SCHEMA_VERSION)
        store.save("k", SessionState("r", ("geocode",)))
        assert store.load("k") == SessionState("r", ("geocode",))
    with RunStore(url) as runs:  # already upgraded; the version 1 run is still there
        assert runs.upgraded_from == schema.SCHEMA_VERSION and [r.id for r in runs.iter_runs()] == [
            "r00001"
        ]


def test_a_newer_schema_is_refused_by_the_session_store_and_left_alone(url: str) -> None:
    SessionStore(url).close()
    engine = create_engine(store_url(url))
    newer = schema.SCHEMA_VERSION + 1
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE dtdr_meta SET value = '{newer}' WHERE key = 'schema_version'"))
    match = rf"version {newer}; this dtdr-agents reads up to version {schema.SCHEMA_VERSION}"
    with pytest.raises(StoreError, match=match):
        SessionStore(url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT value FROM dtdr_meta")).scalar() == str(newer)
        assert conn.execute(text("SELECT count(*) FROM dtdr_sessions")).scalar() == 0
    engine.dispose()


@pytest.mark.parametrize("url", ["mysql://ann:s3cret@db/x", "post gres://ann:s3cret@db/x"])
def test_a_store_url_error_never_shows_the_password(url: str) -> None:
    from dtdr_agents.store.errors import StoreError
    from dtdr_agents.store.runs import store_url

    with pytest.raises(StoreError, match=r"ann:\*\*\*@db") as caught:
        store_url(url)
    assert "s3cret" not in str(caught.value)
