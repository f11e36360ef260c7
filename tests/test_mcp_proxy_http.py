"""The MCP proxy over streamable HTTP: many real SDK clients against one real server.

Each test starts ``python -m mcp_dtdr --transport streamable-http --port 0`` (a free loopback
port, read back from the proxy's stderr) in front of the real upstream server of
tests/mcp_upstream_server.py, and connects several `ClientSession`s concurrently with the
SDK's streamable HTTP client. Expected exposures are computed independently from the saved
model with the core `rank` + `select`, as in tests/test_mcp_proxy.py.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio
import mcp_common
import mcp_types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_common import Client, K, expected

from dtdr_agents.cli import main as cli_main
from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.types import Demonstration
from dtdr_agents.retrievers import load_retriever, make_retriever
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.store.publishing import publish

model = mcp_common.model  # the module-scoped fixtures
core = mcp_common.core

UPSTREAM = Path(__file__).with_name("mcp_upstream_server.py")
META = ["set_task", "search_tools"]
BOUND = 60  # seconds per test: two Python processes start, under load


class Server:
    """A proxy process serving streamable HTTP; its stderr lines are collected."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.url = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            found = re.search(r"streamable HTTP at (http://\S+)", line)
            if found:
                self.url = found.group(1)

    def close(self) -> None:
        """After the process ended: the reader is done and the pipe closed."""
        self._reader.join(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def wait_for(self, pattern: str, timeout: float = BOUND) -> str:
        """The first stderr line matching `pattern` (waits for it)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for line in list(self.lines):
                if re.search(pattern, line):
                    return line
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no stderr line matches {pattern!r}: {self.lines[-20:]}")


@contextmanager
def serve(
    model_arg: str | None,
    tools_file: Path,
    *args: str,
    upstream_flags: Sequence[str] = (),
) -> Iterator[Server]:
    """Start the proxy (options `args`) over streamable HTTP on a free loopback port."""
    argv = [sys.executable, "-m", "mcp_dtdr", "--transport", "streamable-http"]
    argv += ["--host", "127.0.0.1", "--port", "0", "-k", str(K), "--timeout", "20"]
    argv += [*(["--model", model_arg] if model_arg else []), *args]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PYTHONPATH")}
    env.update({"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    upstream = [sys.executable, str(UPSTREAM), "--tools", str(tools_file)]
    proc = subprocess.Popen(
        [*argv, "--", *upstream, *upstream_flags], stderr=subprocess.PIPE, text=True, env=env
    )
    server = Server(proc)
    try:
        server.wait_for(r"streamable HTTP at http://127\.0\.0\.1:\d+/mcp")
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        server.close()


@asynccontextmanager
async def connect(url: str) -> AsyncIterator[Client]:
    notes: list[str] = []

    async def on_message(message: Any) -> None:
        notes.append(type(message).__name__)

    async with (
        streamable_http_client(url) as (read, write),
        ClientSession(read, write, message_handler=on_message, read_timeout_seconds=BOUND) as s,
    ):
        await s.initialize()
        yield Client(s, notes)


def echoed(result: types.CallToolResult) -> dict[str, Any]:
    """What the upstream answered: ``{"tool": name, "args": {...}}``."""
    content = result.content[0]
    assert isinstance(content, types.TextContent), content
    answer: dict[str, Any] = json.loads(content.text)
    return answer


def distinct_requests(core: ToolRetriever, tests: list[Demonstration], n: int) -> list[str]:
    """`n` requests whose first exposed lists differ pairwise (so a mix-up would show)."""
    chosen: list[str] = []
    seen: list[list[str]] = []
    for demo in tests:
        first = expected(core, demo.query, ())
        if first and first not in seen:
            chosen.append(demo.query)
            seen.append(first)
        if len(chosen) == n:
            return chosen
    raise AssertionError("the demo data has too few requests with distinct first steps")


async def test_concurrent_sessions_keep_their_own_task_and_history(
    model: tuple[Path, Path, list[Demonstration]], core: ToolRetriever
) -> None:
    requests = distinct_requests(core, model[2], 3)
    seen: dict[int, list[list[str]]] = {}
    with anyio.fail_after(BOUND), serve(str(model[0]), model[1]) as server:

        async def session(i: int, a_called: anyio.Event) -> None:
            async with connect(server.url) as client:
                query = requests[i]
                await client.call("set_task", {"request": query})
                lists = [await client.names()]
                assert lists[0] == META + expected(core, query, ())
                if i == 0:  # session 0 calls first; the others list after that call
                    name = lists[0][2]
                    result = await client.call(name, {"session": i})
                    assert echoed(result) == {"tool": name, "args": {"session": i}}
                    lists.append(await client.names())
                    assert lists[1] == META + expected(core, query, [name])
                    a_called.set()
                else:
                    await a_called.wait()
                    # session 0's call is not in this session's history
                    lists.append(await client.names())
                    assert lists[1] == lists[0]
                    name = lists[1][2]
                    result = await client.call(name, {"session": i})
                    assert echoed(result)["args"] == {"session": i}
                    lists.append(await client.names())
                    assert lists[2] == META + expected(core, query, [name])
                assert client.changes() >= 1  # set_task changed its list: it was told
                seen[i] = lists

        a_called = anyio.Event()
        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(session, i, a_called)

        # a 2026-07-28 client has no MCP session over HTTP: a clear error, not a lost task
        from mcp import Client
        from mcp.shared.exceptions import MCPError

        async with Client(server.url) as modern:
            assert modern.protocol_version == "2026-07-28"
            with pytest.raises(MCPError, match="connect with the initialize handshake"):
                await modern.list_tools()
    assert len(seen) == 3
    firsts = [seen[i][0] for i in range(3)]
    assert len({tuple(f) for f in firsts}) == 3  # different tasks, different exposed tools


async def test_an_upstream_tool_change_reaches_every_session(
    model: tuple[Path, Path, list[Demonstration]], core: ToolRetriever, tmp_path: Path
) -> None:
    requests = distinct_requests(core, model[2], 3)
    exposed = {n for q in requests for n in expected(core, q, ())}
    specs = json.loads(model[1].read_text(encoding="utf-8"))
    kept = [s for s in specs if s["name"] not in exposed]  # every session's list must change
    swapped = tmp_path / "swapped.json"
    swapped.write_text(json.dumps(kept), encoding="utf-8")
    trigger = tmp_path / "swap-now"
    flags = ("--swap-tools", str(swapped), "--swap-when", str(trigger))
    with anyio.fail_after(BOUND), serve(str(model[0]), model[1], upstream_flags=flags) as server:
        async with connect(server.url) as a, connect(server.url) as b, connect(server.url) as c:
            clients = [a, b, c]
            for client, query in zip(clients, requests, strict=True):
                await client.call("set_task", {"request": query})
                assert (await client.names())[2:] == expected(core, query, ())
            before = [client.changes() for client in clients]
            trigger.touch()
            with anyio.fail_after(30):
                while any(c.changes() <= n for c, n in zip(clients, before, strict=True)):
                    await anyio.sleep(0.05)
            names = {s["name"] for s in kept}
            for client in clients:
                offered = (await client.names())[2:]
                assert set(offered) <= names, offered  # the dropped tools are gone
            for client in clients:  # each session still works on the new tools
                offered = (await client.names())[2:]
                if offered:
                    assert echoed(await client.call(offered[0]))["tool"] == offered[0]


def _refit(tests: list[Demonstration], core: ToolRetriever) -> tuple[ToolRetriever, str]:
    """A second version (fitted on far fewer demonstrations) and a request it ranks
    differently from `core` at the first step."""
    data = make_demo_dataset(340, seed=0)
    other = make_retriever("dtdr-c", encoder="tfidf").fit(data.demos[:25], data.tools)
    for demo in tests:
        mine = expected(core, demo.query, ())
        theirs = expected(other, demo.query, ())
        if mine and theirs and mine != theirs:
            return other, demo.query
    raise AssertionError("no request is ranked differently by the two versions")


async def test_a_new_published_version_serves_from_the_next_step(
    model: tuple[Path, Path, list[Demonstration]], core: ToolRetriever, tmp_path: Path
) -> None:
    v2, query = _refit(model[2], core)
    root = tmp_path / "published"
    publish(root, lambda folder: core.save(folder), check=load_retriever)
    flags = ("--reload-interval", "0.2")
    with anyio.fail_after(BOUND), serve(str(root / "latest"), model[1], *flags) as server:
        async with connect(server.url) as client:
            await client.call("set_task", {"request": query})
            assert (await client.names())[2:] == expected(core, query, ())  # v000001
            publish(root, lambda folder: v2.save(folder), check=load_retriever)
            await anyio.to_thread.run_sync(server.wait_for, "serving v000002")
            # the running task's list stays until its next step
            assert (await client.names())[2:] == expected(core, query, ())
            await client.call("set_task", {"request": query})  # the next step
            assert (await client.names())[2:] == expected(v2, query, ())

            def corrupt(folder: Path) -> None:
                folder.mkdir(parents=True)
                (folder / "manifest.json").write_text("{not json", encoding="utf-8")

            publish(root, corrupt, check=None)  # published unchecked: the proxy must refuse it
            await anyio.to_thread.run_sync(server.wait_for, r"v000003 is refused")
            await client.call("set_task", {"request": query})
            assert (await client.names())[2:] == expected(v2, query, ())  # v2 keeps serving


def test_bad_transport_and_port_are_refused_with_the_option_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    upstream = ["--", sys.executable, str(UPSTREAM), "--tools", "tools.json"]
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["mcp-proxy", "--transport", "http", *upstream])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--transport" in err and "invalid choice: 'http'" in err and "streamable-http" in err

    code = cli_main(["mcp-proxy", "--transport", "streamable-http", "--port", "70000", *upstream])
    assert code != 0
    assert "--port must be from 0 to 65535" in capsys.readouterr().err

    code = cli_main(["mcp-proxy", "--port", "8123", *upstream])  # stdio has no port
    assert code != 0
    assert "--host and --port are options of --transport streamable-http" in (
        capsys.readouterr().err
    )

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["mcp-proxy", "--transport", "streamable-http", "--port", str(port), *upstream]
        code = cli_main(args)
    assert code != 0
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


async def test_a_session_is_forgotten_when_its_client_disconnects(
    model: tuple[Path, Path, list[Demonstration]],
) -> None:
    """In process: the proxy keeps a `ProxySession` only while its MCP session lives."""
    import uvicorn

    from mcp_dtdr.proxy import ProxyConfig, Upstream, _build, listen

    sock = listen("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    upstream_argv = [sys.executable, str(UPSTREAM), "--tools", str(model[1])]
    with anyio.fail_after(BOUND), sock:
        async with AsyncExitStack() as stack:
            up = await Upstream.start(stack, upstream_argv, timeout=20)
            built = _build(up, load_retriever(model[0]), ProxyConfig(k=K), per_connection=True)
            app = built.server.streamable_http_app(host="127.0.0.1", json_response=True)
            web = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
            async with anyio.create_task_group() as tg:
                tg.start_soon(web.serve, [sock])
                while not web.started:
                    await anyio.sleep(0.02)
                async with connect(url) as a, connect(url) as b:
                    await a.call("set_task", {"request": model[2][0].query})
                    await b.call("set_task", {"request": model[2][1].query})
                    assert len(built.sessions) == 2
                    ids = set(built.sessions)
                with anyio.fail_after(10):  # both clients ended their sessions (DELETE)
                    while built.sessions:
                        await anyio.sleep(0.05)
                async with connect(url) as c:
                    assert await c.names() == META  # a new session: no task of a or b
                    assert len(built.sessions) == 1 and not ids & set(built.sessions)
                with anyio.fail_after(10):
                    while built.sessions:
                        await anyio.sleep(0.05)
                web.should_exit = True


def test_a_published_version_is_retargeted_to_the_upstreams_tools(
    model: tuple[Path, Path, list[Demonstration]], core: ToolRetriever, tmp_path: Path
) -> None:
    """A version fitted on the whole catalogue serves an upstream that lists fewer tools."""
    import warnings

    from dtdr_agents.foundation.types import Toolset
    from dtdr_agents.store.publishing import ReloadWarning
    from mcp_dtdr.reloading import publish_root, published_models
    from mcp_dtdr.session import ProxyConfig, _selector

    root = tmp_path / "published"
    publish(root, lambda folder: core.save(folder), check=load_retriever)
    assert publish_root(root / "latest") == root and publish_root(model[0]) is None
    models = published_models(root)
    upstream = Toolset(list(core.tools_)[:6])  # the upstream lists 6 of the tools
    selector = _selector(upstream, models, ProxyConfig(k=K), strict=True)
    query = model[2][0].query
    first = selector.select(query, ())
    assert set(first.bound) <= set(upstream.names)
    publish(root, lambda folder: core.save(folder), check=load_retriever)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReloadWarning)  # a refusal would fail the test
        assert models.reload() and models.version.name == "v000002"
        second = selector.select(query, ())
    assert selector.retriever is models.current()  # v000002 serves from this step
    assert tuple(second.bound) == tuple(first.bound)  # the same model, the same ranking


# ------------------------------------------------------------------ replicas on a session store
@asynccontextmanager
async def connect_as(url: str, key: str) -> AsyncIterator[Client]:
    """A client that names its session `key` in the ``X-Dtdr-Session`` header."""
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with (
        create_mcp_http_client(headers={"X-Dtdr-Session": key}) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, read_timeout_seconds=BOUND) as s,
    ):
        await s.initialize()
        yield Client(s, [])


def replay(
    model: tuple[Path, Path, list[Demonstration]], steps: Sequence[tuple[str, str]]
) -> list[str]:
    """The names one in-process `ProxySession` lists after `steps` (``(kind, argument)``)."""
    from dtdr_agents.foundation.types import Toolset
    from mcp_dtdr.session import ProxyConfig, ProxySession, _core_tool, _selector

    specs = json.loads(model[1].read_text(encoding="utf-8"))
    tools = [
        types.Tool(
            name=s["name"], description=s.get("description", ""), input_schema=s["parameters"]
        )
        for s in specs
    ]
    toolset = Toolset([_core_tool(t) for t in tools])
    selector = _selector(toolset, load_retriever(model[0]), ProxyConfig(k=K), strict=True)
    session = ProxySession(selector, {t.name: t for t in tools}, search_k=K)
    for kind, arg in steps:
        {"set_task": session.set_task, "search": session.search, "call": session.record_call}[kind](
            arg
        )
    return [t.name for t in session.list_tools()]


async def _two_replicas_share_sessions(
    model: tuple[Path, Path, list[Demonstration]], core: ToolRetriever, store: str
) -> None:
    alice_q, bob_q = distinct_requests(core, model[2], 2)
    flags = ("--session-store", store)
    with (
        anyio.fail_after(BOUND),
        serve(str(model[0]), model[1], *flags) as a,
        serve(str(model[0]), model[1], *flags) as b,
    ):
        assert a.url != b.url
        alice: list[tuple[str, str]] = [("set_task", alice_q)]
        async with connect_as(a.url, "alice") as via_a, connect_as(b.url, "alice") as via_b:
            await via_a.call("set_task", {"request": alice_q})
            first = await via_b.names()
            assert first == await via_a.names() == replay(model, alice)
            assert len(first) > 2
            name = first[2]
            assert echoed(await via_b.call(name, {"who": "alice"}))["tool"] == name
            alice.append(("call", name))
            assert replay(model, alice) != first  # the call moved the ranking on
            assert await via_a.names() == await via_b.names() == replay(model, alice)
            await via_a.call("search_tools", {"query": "convert the currency"})
            alice.append(("search", "convert the currency"))
            assert replay(model, alice) != replay(model, alice[:-1])  # it found new tools
            assert await via_b.names() == replay(model, alice)
            after_alice = await via_a.names()

        bob: list[tuple[str, str]] = [("set_task", bob_q)]
        async with connect_as(b.url, "bob") as bob_b, connect_as(a.url, "bob") as bob_a:
            assert await bob_a.names() == META  # a new key: no task, nothing of alice's
            await bob_b.call("set_task", {"request": bob_q})
            name = (await bob_a.names())[2]
            await bob_a.call(name, {"who": "bob"})
            bob.append(("call", name))
            assert await bob_b.names() == await bob_a.names() == replay(model, bob)
        async with connect_as(b.url, "alice") as again:  # bob's calls are not alice's
            assert await again.names() == after_alice == replay(model, alice)

        from mcp import Client as ModernClient
        from mcp.shared.exceptions import MCPError

        async with connect(a.url) as anonymous:  # no key: the error names the header
            with pytest.raises(MCPError, match="X-Dtdr-Session header"):
                await anonymous.names()
        async with ModernClient(b.url) as modern:  # a 2026-07-28 client, no key
            with pytest.raises(MCPError, match="X-Dtdr-Session header"):
                await modern.list_tools()


async def test_two_replicas_on_one_sqlite_store_answer_a_session_alike(
    model: tuple[Path, Path, list[Demonstration]], core: ToolRetriever, tmp_path: Path
) -> None:
    await _two_replicas_share_sessions(model, core, f"sqlite:///{tmp_path / 'sessions.db'}")


async def test_two_replicas_on_one_postgresql_store_answer_a_session_alike(
    model: tuple[Path, Path, list[Demonstration]], core: ToolRetriever
) -> None:
    from dtdr_agents.store.testing import postgres_server, postgres_unavailable

    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)
    with postgres_server() as url:
        await _two_replicas_share_sessions(model, core, url)


def test_a_session_store_is_an_option_of_streamable_http(
    capsys: pytest.CaptureFixture[str],
) -> None:
    upstream = ["--", sys.executable, str(UPSTREAM), "--tools", "tools.json"]
    code = cli_main(["mcp-proxy", "--session-store", "sqlite://", *upstream])
    assert code != 0
    assert "--session-store is an option of --transport streamable-http" in capsys.readouterr().err
    args = ["mcp-proxy", "--transport", "streamable-http", "--port", "0"]
    code = cli_main([*args, "--session-store", "mysql://u:secret@h/x", *upstream])
    err = capsys.readouterr().err
    assert code != 0 and "--session-store: session store URL 'mysql://u:***@h/x'" in err
    assert "secret" not in err


@pytest.mark.parametrize("cache", ["off", "append"])
def test_a_restored_session_binds_what_the_live_one_bound(
    model: tuple[Path, Path, list[Demonstration]], cache: str
) -> None:
    """`ProxySession.restore` from (request, history, found) lists what the session listed."""
    from dtdr_agents.foundation.types import Toolset
    from mcp_dtdr.session import ProxyConfig, ProxySession, _core_tool, _selector

    specs = json.loads(model[1].read_text(encoding="utf-8"))
    tools = {
        s["name"]: types.Tool(
            name=s["name"], description=s.get("description", ""), input_schema=s["parameters"]
        )
        for s in specs
    }
    toolset = Toolset([_core_tool(t) for t in tools.values()])
    config = ProxyConfig(k=K, cache=cache)
    selector = _selector(toolset, load_retriever(model[0]), config, strict=True)
    for demo in model[2][:8]:
        live = ProxySession(selector, tools, search_k=K)
        live.set_task(demo.query)
        for i, call in enumerate(demo.calls):
            if i == 1:
                live.search("send a message")
            live.record_call(call)
            restored = ProxySession(selector, tools, search_k=K)
            restored.restore(live.request, live.history, live.found)
            assert restored.list_tools() == live.list_tools(), (cache, demo.query, i)
