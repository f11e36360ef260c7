"""The MCP proxy's lifecycle (issue 41, item 8): whatever it starts ends on every exit path.

The upstream is the real server of tests/mcp_upstream_server.py with ``--ignore-term`` (SIGTERM
does not end it, as in the issue) and ``--grandchild`` (a process of its own that ignores
SIGTERM too); it writes both process ids to a file (``--pid-file``), which is how a test looks
up what the proxy started. A process counts as alive while it exists (psutil when installed,
else ``/proc/PID``), is not a zombie and still runs the upstream's (or the grandchild's)
command line, so a reused process id is never mistaken for a survivor.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio
from mcp import ClientSession
from mcp.shared.memory import create_client_server_memory_streams

from dtdr_agents.retrievers import make_retriever
from mcp_dtdr.proxy import ProxyConfig, serve_proxy

try:
    psutil: Any = importlib.import_module("psutil")
except ImportError:
    psutil = None

pytestmark = pytest.mark.skipif(
    psutil is None and not Path("/proc/self/stat").exists(),
    reason="needs psutil or /proc to look processes up",
)

UPSTREAM = Path(__file__).with_name("mcp_upstream_server.py")
MARKERS = ("mcp_upstream_server.py", "mcp_upstream_grandchild")
BOUND = 60  # seconds: a Python process starts under load
GONE_WITHIN = 15  # seconds: the SDK's and the guard's grace periods, under load
TOOLS = [
    {"name": "get_weather", "description": "Weather forecast for a city."},
    {"name": "web_search", "description": "Search the web for pages and news."},
]
KEEP_ENV = ("PATH", "HOME", "PYTHONPATH")


def alive(pid: int) -> bool:
    """Whether `pid` still runs the upstream (or its grandchild): not gone, not a zombie."""
    if psutil is not None:
        try:
            process = psutil.Process(pid)
            running = process.status() != psutil.STATUS_ZOMBIE
            return running and any(m in " ".join(process.cmdline()) for m in MARKERS)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X") and any(m in cmdline for m in MARKERS)


def started(pid_file: Path, timeout: float = BOUND) -> list[int]:
    """The process ids the upstream wrote (itself, its grandchild), once it wrote them."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pid_file.exists():
            return [int(line) for line in pid_file.read_text(encoding="utf-8").split()]
        time.sleep(0.05)
    raise AssertionError(f"the upstream never wrote {pid_file}")


def survivors(pids: list[int], within: float = GONE_WITHIN) -> list[int]:
    """The processes of `pids` still alive after waiting up to `within` seconds."""
    end = time.monotonic() + within
    while time.monotonic() < end and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    """After a failed test, SIGKILL what its upstream left (only the ids it wrote)."""
    yield
    pid_file = tmp_path / "upstream.pids"
    if pid_file.exists():
        for pid in [int(line) for line in pid_file.read_text(encoding="utf-8").split()]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def _upstream(tmp_path: Path, *flags: str) -> tuple[list[str], Path]:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(TOOLS), encoding="utf-8")
    pid_file = tmp_path / "upstream.pids"
    argv = [sys.executable, str(UPSTREAM), "--tools", str(tools_file), "--ignore-term"]
    return [*argv, "--grandchild", "--pid-file", str(pid_file), *flags], pid_file


def initialize(proc: subprocess.Popen[bytes]) -> None:
    """Send the proxy the MCP ``initialize`` request and wait for its answer.

    The proxy serves its client only once the upstream's start is over, so an answer means
    the upstream completed its handshake (or failed, which the test then sees).
    """
    assert proc.stdin is not None and proc.stdout is not None
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}}
    hello["clientInfo"] = {"name": "lifecycle-test", "version": "0"}
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
    proc.stdin.write(json.dumps(request).encode() + b"\n")
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], BOUND)
    assert ready, "the proxy did not answer initialize"
    answer = json.loads(proc.stdout.readline())
    assert answer["id"] == 1 and "result" in answer, answer


@contextmanager
def proxy_process(tmp_path: Path, *flags: str, timeout: float) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m mcp_dtdr`` over stdio (a saved BM25 model) in front of the upstream."""
    upstream, _ = _upstream(tmp_path, *flags)
    model = tmp_path / "model"
    make_retriever("bm25").fit([], TOOLS).save(model)
    env = {k: v for k, v in os.environ.items() if k in KEEP_ENV}
    env.update({"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    argv = [sys.executable, "-m", "mcp_dtdr", "--model", str(model), "--timeout", f"{timeout:g}"]
    argv += ["--", *upstream]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(BOUND)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        proc.stdout.close()


def test_an_upstream_that_never_completes_the_handshake_is_ended_at_once(
    tmp_path: Path,
) -> None:
    """The handshake times out: the upstream and its grandchild end while the proxy serves on."""
    with proxy_process(tmp_path, "--hang-start", timeout=2) as proc:
        pids = started(tmp_path / "upstream.pids")
        assert len(pids) == 2 and all(alive(p) for p in pids)
        assert survivors(pids, within=2 + GONE_WITHIN) == []
        assert proc.poll() is None  # the proxy serves on, answering why there are no tools


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
@pytest.mark.parametrize("hang", [True, False], ids=["in-handshake", "serving"])
def test_a_killed_proxy_leaves_no_upstream(tmp_path: Path, signum: int, hang: bool) -> None:
    """Killed (even by SIGKILL), the proxy's upstream and grandchild end within a bound."""
    flags = ("--hang-start",) if hang else ()
    with proxy_process(tmp_path, *flags, timeout=BOUND) as proc:
        pids = started(tmp_path / "upstream.pids")
        if not hang:
            initialize(proc)  # the proxy answers: its upstream completed the handshake
        assert all(alive(p) for p in pids)
        proc.send_signal(signum)
        proc.wait(BOUND)
        assert survivors(pids) == []


async def test_a_proxy_that_stops_in_process_ends_its_upstream(tmp_path: Path) -> None:
    """`serve_proxy` unwound (a crash or a cancel) ends the upstream and its grandchild."""
    upstream, pid_file = _upstream(tmp_path)
    env = {k: v for k, v in os.environ.items() if k in KEEP_ENV}
    retriever = make_retriever("bm25").fit([], TOOLS)
    with anyio.fail_after(BOUND):
        async with (
            create_client_server_memory_streams() as (streams, server),
            anyio.create_task_group() as tg,
        ):
            config = ProxyConfig(k=2, timeout=BOUND)
            tg.start_soon(partial(serve_proxy, retriever, upstream, *server, config, env=env))
            async with ClientSession(*streams, read_timeout_seconds=BOUND) as session:
                await session.initialize()
                assert len((await session.list_tools()).tools) == 2  # the meta-tools
                pids = await anyio.to_thread.run_sync(started, pid_file)
                assert all(alive(p) for p in pids)
                tg.cancel_scope.cancel()
    assert await anyio.to_thread.run_sync(survivors, pids) == []


async def test_a_model_loaded_beside_the_upstream_serves_and_a_failed_load_ends_it(
    tmp_path: Path,
) -> None:
    """`serve_proxy(load=...)` restores the model while the upstream starts (as `run_proxy`).

    A load that succeeds serves as a given retriever does; one that fails is raised once the
    upstream has started, and the upstream (and its grandchild) ends with it.
    """
    from dtdr_agents.foundation.errors import ModelLoadError

    upstream, pid_file = _upstream(tmp_path)
    env = {k: v for k, v in os.environ.items() if k in KEEP_ENV}
    config = ProxyConfig(k=2, timeout=BOUND)
    threads: list[str] = []

    def load() -> Any:
        threads.append(threading.current_thread().name)
        return make_retriever("bm25").fit([], TOOLS)

    with anyio.fail_after(BOUND):
        async with (
            create_client_server_memory_streams() as (streams, server),
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(partial(serve_proxy, None, upstream, *server, config, env=env, load=load))
            async with ClientSession(*streams, read_timeout_seconds=BOUND) as session:
                await session.initialize()
                await session.call_tool("set_task", {"request": "weather in Paris"})
                names = {t.name for t in (await session.list_tools()).tools}
                assert "get_weather" in names  # ranked by the loaded model
                tg.cancel_scope.cancel()
    assert threads == ["dtdr-model-load"]

    def broken() -> Any:
        raise ModelLoadError("model/manifest.json: feature_revision 5 is not 6")

    pid_file.unlink(missing_ok=True)
    with anyio.fail_after(BOUND):
        async with create_client_server_memory_streams() as (_, server):
            with pytest.raises(ModelLoadError, match="feature_revision"):
                await serve_proxy(None, upstream, *server, config, env=env, load=broken)
    pids = await anyio.to_thread.run_sync(started, pid_file)
    assert await anyio.to_thread.run_sync(survivors, pids) == []


LATE_FAILURE = """
import sys
import mcp_dtdr.proxy as proxy
from dtdr_agents.cli import main
from dtdr_agents.foundation.errors import ModelLoadError

def load_retriever(*args, **kwargs):  # a folder that reads but does not restore
    raise ModelLoadError("hybrid state: feature_revision 5 is not this version's 6")

proxy.load_retriever = load_retriever
sys.exit(main(["mcp-proxy", "--model", sys.argv[1], "--", *sys.argv[2:]]))
"""


def test_a_model_that_fails_once_the_upstream_started_is_said_in_a_line(tmp_path: Path) -> None:
    """The command line names the load's error (exit 2), not a task group's traceback."""
    upstream, pid_file = _upstream(tmp_path)
    model = tmp_path / "model"
    make_retriever("bm25").fit([], TOOLS).save(model)
    script = tmp_path / "late.py"
    script.write_text(LATE_FAILURE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k in KEEP_ENV}
    done = subprocess.run(
        [sys.executable, str(script), str(model), *upstream],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=BOUND,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "error: hybrid state: feature_revision 5" in done.stderr
    assert "Traceback" not in done.stderr
    assert survivors(started(pid_file)) == []


async def test_a_command_that_is_not_found_is_reported_before_anything_starts() -> None:
    from contextlib import AsyncExitStack

    from mcp_dtdr.upstream import Upstream

    async with AsyncExitStack() as stack:
        upstream = await Upstream.start(stack, ["no-such-mcp-server-here"], timeout=BOUND)
    assert upstream.session is None
    assert upstream.error is not None
    assert "'no-such-mcp-server-here' could not be started" in upstream.error
    assert "FileNotFoundError" in upstream.error


def test_the_guard_says_why_a_command_does_not_start_and_exits_127(tmp_path: Path) -> None:
    from mcp_dtdr import guard

    done = subprocess.run(
        [sys.executable, "-I", "-S", guard.__file__, str(os.getpid()), "1", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    assert done.returncode == guard.NOT_STARTED
    assert "cannot start the upstream MCP server" in done.stderr
