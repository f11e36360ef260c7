"""Stored MCP sessions (issue 41, item 6): idle sessions expire on a schedule, and a retried call
gets its recorded answer instead of running and being recorded twice.

Store-level tests run on a real SQLite file and a real PostgreSQL server on loopback (the
fixtures of tests/test_store.py; PostgreSQL is skipped cleanly without its binaries). Proxy
tests start ``python -m mcp_dtdr --transport streamable-http --session-store URL`` (the
`serve` helper of tests/test_mcp_proxy_http.py) and post JSON-RPC requests with chosen ids, as
a client that retries after losing an answer does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import httpx
import mcp_common
from mcp_common import K
from sqlalchemy import create_engine, text
from test_mcp_proxy_http import UPSTREAM, serve
from test_store import pg_url, url  # noqa: F401  # the store fixtures (SQLite, PostgreSQL)

from dtdr_agents.cli import main as cli_main
from dtdr_agents.foundation.types import Demonstration
from dtdr_agents.store import SessionState, SessionStore, StoreError, schema, store_url
from dtdr_agents.store.sessions import MAX_ANSWER_CHARS, MAX_ANSWERS, Answer

model = mcp_common.model  # the module-scoped fixtures

BOUND = 60  # seconds: proxies (Python processes) start under load
HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2025-11-25",
}


def answer(i: int, call: str = "c1", text: str = "ok") -> Answer:
    return Answer.of(i, call, {"content": [{"type": "text", "text": text}], "isError": False})


# ------------------------------------------------------------------------------ the store
def test_a_call_and_its_answer_are_kept_together_and_a_retry_finds_it(url: str) -> None:  # noqa: F811
    kept = tuple(answer(i, f"call-{i}") for i in range(MAX_ANSWERS + 3))
    with SessionStore(url) as store:
        store.save("s", SessionState("weather", ("geocode",), (), kept))
    with SessionStore(url) as store:  # another process's view
        state = store.load("s")
    assert state is not None and state.history == ("geocode",)
    assert state.answers == kept[-MAX_ANSWERS:]  # the last ones, oldest first
    last = kept[-1]
    assert state.answer(last.request_id, last.call) == last
    assert state.answer(last.request_id, "another call") is None  # same id, another call
    assert state.answer(str(last.request_id), last.call) is None  # "12" is not 12
    assert state.answer(None, last.call) is None
    assert state.answer(kept[0].request_id, kept[0].call) is None  # dropped: too old
    big = Answer.of("r", "c", {"content": [{"type": "text", "text": "x" * MAX_ANSWER_CHARS}]})
    assert big.result is None and big.size > MAX_ANSWER_CHARS


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"request_id": True, "call": "c", "result": None}, "Answer.request_id"),
        ({"request_id": 1, "call": "", "result": None}, "Answer.call"),
        ({"request_id": 1, "call": "c", "result": [1]}, "Answer.result"),
    ],
)
def test_bad_answers_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Answer(**kwargs)
    with pytest.raises(ValueError, match=r"SessionState\.answers"):
        SessionState(answers=("not an answer",))  # type: ignore[arg-type,unused-ignore]


def test_a_version_2_store_upgrades_in_place_to_keep_answers(url: str) -> None:  # noqa: F811
    engine = create_engine(store_url(url))
    with engine.begin() as conn:  # a store as version 2 wrote it (no answers), one session
        assert schema.upgrade(conn, schema.MIGRATIONS[:2]) == (0, 2)
        conn.execute(text("ALTER TABLE dtdr_sessions DROP COLUMN answers"))
        conn.execute(
            text(
                "INSERT INTO dtdr_sessions (key, request, history, found, updated_at) "
                "VALUES ('old', 'weather', '[\"geocode\"]', '[]', :now)"
            ),
            {"now": datetime.now(UTC)},
        )
    engine.dispose()
    with SessionStore(url) as store:
        assert (store.upgraded_from, store.schema_version) == (2, schema.SCHEMA_VERSION)
        assert store.load("old") == SessionState("weather", ("geocode",), ())
        store.save("k", SessionState("r", ("geocode",), (), (answer(1),)))
        assert store.load("k") == SessionState("r", ("geocode",), (), (answer(1),))


def test_a_malformed_answers_entry_is_a_store_error_naming_the_session(url: str) -> None:  # noqa: F811
    with SessionStore(url) as store:
        store.save("bad", SessionState("r", (), (), (answer(1),)))
        with store.engine.begin() as conn:
            conn.execute(
                text("UPDATE dtdr_sessions SET answers = :a WHERE key = 'bad'"),
                {"a": '[[true, "c", null, 0]]'},
            )
        with pytest.raises(StoreError, match=r"session 'bad' in dtdr_sessions is malformed"):
            store.load("bad")


# ------------------------------------------------------------------------------ the proxy
def rpc(endpoint: str, key: str, rid: int, method: str, params: dict[str, Any]) -> Any:
    """One JSON-RPC request of session `key` with request id `rid`; its result (or error)."""
    body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    reply = httpx.post(
        endpoint, json=body, headers={**HEADERS, "X-Dtdr-Session": key}, timeout=BOUND
    )
    reply.raise_for_status()
    message = reply.json()
    assert message["id"] == rid
    return message.get("result", message.get("error"))


def call(endpoint: str, key: str, rid: int, name: str, arguments: dict[str, Any]) -> Any:
    return rpc(endpoint, key, rid, "tools/call", {"name": name, "arguments": arguments})


@contextmanager
def store_at(backend: str, tmp_path: Path) -> Iterator[str]:
    """A session store URL: an SQLite file, or a throw-away PostgreSQL server."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'sessions.db'}"
        return
    from dtdr_agents.store.testing import postgres_server, postgres_unavailable

    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)
    with postgres_server() as pg:
        yield pg


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_retried_call_gets_its_recorded_answer_from_any_replica(
    model: tuple[Path, Path, list[Demonstration]], tmp_path: Path, backend: str
) -> None:
    """Replica A records a call and is killed; the retry reaches B: same answer, run once."""
    log = tmp_path / "calls.log"
    request = model[2][0].query
    with store_at(backend, tmp_path) as sessions:
        flags = ("--session-store", sessions)
        upstream = ("--log-calls", str(log))
        with (
            serve(str(model[0]), model[1], *flags, upstream_flags=upstream) as a,
            serve(str(model[0]), model[1], *flags, upstream_flags=upstream) as b,
        ):
            call(a.url, "ann", 1, "set_task", {"request": request})
            offered = [t["name"] for t in rpc(a.url, "ann", 2, "tools/list", {})["tools"]][2:]
            assert 0 < len(offered) <= K
            first = call(a.url, "ann", 3, offered[0], {"city": "Oslo"})
            assert first["isError"] is False
            a.proc.kill()  # as if killed before the answer reached the client
            a.proc.wait(BOUND)
            again = call(b.url, "ann", 3, offered[0], {"city": "Oslo"})
            assert again == first
            assert log.read_text(encoding="utf-8").split() == [offered[0]]  # ran once
            with SessionStore(sessions) as store:
                saved = store.load("ann")
            assert saved is not None and saved.history == (offered[0],)  # recorded once
            now = [t["name"] for t in rpc(b.url, "ann", 4, "tools/list", {})["tools"]][2:]
            fresh = call(b.url, "ann", 5, now[0], {"city": "Oslo"})  # a new id: a new call
            assert fresh["isError"] is False
            assert log.read_text(encoding="utf-8").split() == [offered[0], now[0]]


@pytest.mark.slow
def test_idle_sessions_are_expired_on_a_schedule(
    model: tuple[Path, Path, list[Demonstration]], tmp_path: Path
) -> None:
    sessions = f"sqlite:///{tmp_path / 'sessions.db'}"
    flags = ("--session-store", sessions, "--session-ttl", "1.5", "--expire-interval", "0.2")
    request = model[2][0].query
    with serve(str(model[0]), model[1], *flags) as proxy:
        for key in ("idle", "busy"):
            call(proxy.url, key, 1, "set_task", {"request": request})
        end = time.monotonic() + BOUND
        with SessionStore(sessions) as store:
            while store.load("idle") is not None and time.monotonic() < end:
                call(proxy.url, "busy", 1, "set_task", {"request": request})  # kept written
                time.sleep(0.2)
            assert store.load("idle") is None and store.load("busy") is not None
        assert proxy.wait_for(r"expired 1 session\(s\) not written for 1\.5 s")


def test_expiry_options_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    upstream = ["--", "python", str(UPSTREAM), "--tools", "tools.json"]
    http = ["mcp-proxy", "--transport", "streamable-http", "--port", "0"]
    assert cli_main([*http, "--session-ttl", "60", *upstream]) != 0
    assert "--session-ttl and --expire-interval are options of --session-store" in (
        capsys.readouterr().err
    )
    store = ["--session-store", "sqlite://"]
    assert cli_main([*http, *store, "--expire-interval", "0", *upstream]) != 0
    assert "must be > 0 seconds" in capsys.readouterr().err
    from mcp_dtdr.proxy import run_proxy

    with pytest.raises(ValueError, match="session_ttl must be > 0 seconds"):
        run_proxy(None, ["python"], transport="streamable-http", session_ttl=-1)
