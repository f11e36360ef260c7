"""Load bench of the MCP proxy over streamable HTTP: many concurrent sessions, 1,000 tools.

    python -m mcp_dtdr.loadbench --json docs/results/mcp_http.json [--sessions 64] [--steps 20]
        [--think 0,1] [--client-procs 2] [--retriever dtdr-c] [--encoder tfidf]

It generates a catalogue of 1,000 tools (50 domains x 20 actions) and demonstrations of
typical plans, fits a retriever on them and saves it, starts the proxy
(``python -m mcp_dtdr --transport streamable-http --port 0``) in front of an upstream that
echoes every call (`loadbench_world.echo_upstream`), and drives it from client processes
with the SDK's streamable HTTP client: `sessions` concurrent MCP sessions (split over
``--client-procs`` processes), each calls ``set_task`` with its own request, then `steps`
times ``tools/list`` and ``tools/call`` of the first tool offered (``set_task`` again when
none is offered). One run per ``--think`` value: the pause before each step (0: back to back,
the proxy saturated; 1: an agent whose model takes a second per step).

It counts errors and leaks. A leak is a ``tools/list`` answer that differs from what the
session's own request and history give: every session is replayed here, step by step, on a
`ProxySession` over the same saved model (the proxy's ranking is deterministic), and every
listed answer is compared with the replay. A session that saw another's request or history
gets another list and is counted. Every call also carries the session and step in its
arguments, and the upstream's echo must return them (a call answered for another session is
counted too). Latency is measured at the client, per request, while all sessions run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_dtdr.loadbench_world import (
    catalogue,
    demonstrations,
    echo_upstream,
    session_request,
)


# ---------------------------------------------------------------------------------- clients
@dataclass
class SessionLog:
    """What one client session did and saw."""

    index: int
    request: str
    lists: list[list[str]] = field(default_factory=list)  # upstream names seen per step
    actions: list[tuple[str, str]] = field(default_factory=list)  # ("call"|"set_task", name)
    list_ms: list[float] = field(default_factory=list)
    call_ms: list[float] = field(default_factory=list)
    set_task_ms: list[float] = field(default_factory=list)
    misrouted: int = 0
    errors: list[str] = field(default_factory=list)


async def run_session(
    url: str, log: SessionLog, steps: int, gate: Gate, think_s: float = 0.0
) -> None:
    """One MCP session: ``set_task``, then `steps` x (``tools/list``, ``tools/call``).

    `think_s`: a pause before each step (the time an agent's model would take), 0: none.
    """
    import anyio
    import mcp_types as types
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with (
        streamable_http_client(url) as (read, write),
        ClientSession(read, write, read_timeout_seconds=120) as session,
    ):
        await session.initialize()
        await gate.wait()  # every session is connected: the load starts at once
        t0 = time.perf_counter()
        await session.call_tool("set_task", {"request": log.request})
        log.set_task_ms.append(1000 * (time.perf_counter() - t0))
        for step in range(steps):
            if think_s > 0:
                await anyio.sleep(think_s)
            t0 = time.perf_counter()
            listed = await session.list_tools()
            log.list_ms.append(1000 * (time.perf_counter() - t0))
            names = [t.name for t in listed.tools if t.name not in ("set_task", "search_tools")]
            log.lists.append(names)
            if not names:  # the plan is complete: the next step starts the task again
                t0 = time.perf_counter()
                await session.call_tool("set_task", {"request": log.request})
                log.set_task_ms.append(1000 * (time.perf_counter() - t0))
                log.actions.append(("set_task", ""))
                continue
            args = {"session": log.index, "step": step}
            t0 = time.perf_counter()
            result = await session.call_tool(names[0], args)
            log.call_ms.append(1000 * (time.perf_counter() - t0))
            log.actions.append(("call", names[0]))
            content = result.content[0] if result.content else None
            text = content.text if isinstance(content, types.TextContent) else ""
            if result.is_error or json.loads(text or "{}") != {"tool": names[0], "args": args}:
                log.misrouted += 1


async def drive(
    url: str,
    indices: Sequence[int],
    steps: int,
    think_s: float,
    ready: Any = None,
    go: Any = None,
) -> tuple[list[SessionLog], float]:
    """The sessions `indices` at once; returns their logs and the wall time of the load.

    With `ready` (a queue) and `go` (an event) of other client processes, the load starts
    when every process has connected its sessions.
    """
    import anyio

    logs = [SessionLog(i, session_request(i)) for i in indices]
    gate = Gate(len(logs))

    async def one(log: SessionLog) -> None:
        try:
            await run_session(url, log, steps, gate, think_s)
        except Exception as exc:  # counted, never hidden
            log.errors.append(f"{type(exc).__name__}: {_first_error(exc)}")
        finally:
            gate.leave()  # a session that failed before the gate does not hold the others

    async def start_together() -> None:
        await gate.connected.wait()
        if ready is not None and go is not None:
            ready.put(os.getpid())
            await anyio.to_thread.run_sync(go.wait, 600)
        gate.opened.set()

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(start_together)
        for log in logs:
            tg.start_soon(one, log)
        await gate.opened.wait()
        t0 = time.perf_counter()
    return logs, time.perf_counter() - t0


class Gate:
    """Opens when every session is connected (or has failed), so the load starts at once."""

    def __init__(self, sessions: int) -> None:
        import anyio

        self.waiting = sessions
        self.connected = anyio.Event()
        self.opened = anyio.Event()
        if sessions <= 0:
            self.connected.set()

    def leave(self) -> None:
        """One session is connected, or failed: it is no longer waited for.

        A session leaves again when it ends; by then the gate is open, so that is harmless.
        """
        self.waiting -= 1
        if self.waiting <= 0:
            self.connected.set()

    async def wait(self) -> None:
        """Wait until every session is connected and the load starts."""
        self.leave()
        await self.opened.wait()


def _client_process(
    url: str, indices: list[int], steps: int, think_s: float, ready: Any, go: Any, out: Any
) -> None:
    """A client process: its sessions' logs and load wall time go to `out`."""
    import anyio

    out.put(anyio.run(drive, url, indices, steps, think_s, ready, go))


def drive_processes(
    url: str, sessions: int, steps: int, think_s: float, procs: int
) -> tuple[list[SessionLog], float]:
    """The sessions split over `procs` client processes that start the load together."""
    import multiprocessing

    import anyio

    if procs <= 1:
        return anyio.run(drive, url, list(range(sessions)), steps, think_s)
    ctx = multiprocessing.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    shares = [list(range(sessions))[p::procs] for p in range(procs)]
    workers = [
        ctx.Process(target=_client_process, args=(url, share, steps, think_s, ready, go, out))
        for share in shares
    ]
    for w in workers:
        w.start()
    for _ in workers:
        ready.get(timeout=600)
    t0 = time.perf_counter()
    go.set()
    results = [out.get(timeout=3600) for _ in workers]
    wall = time.perf_counter() - t0
    for w in workers:
        w.join(30)
    logs = sorted((log for part, _ in results for log in part), key=lambda log: log.index)
    return logs, wall


def _first_error(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc)[:300]


async def unloaded_lists(url: str, n: int) -> list[float]:
    """`n` ``tools/list`` latencies of one session alone (after ``set_task``)."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    out = []
    async with (
        streamable_http_client(url) as (read, write),
        ClientSession(read, write, read_timeout_seconds=120) as session,
    ):
        await session.initialize()
        await session.call_tool("set_task", {"request": session_request(0)})
        for _ in range(n):
            t0 = time.perf_counter()
            await session.list_tools()
            out.append(1000 * (time.perf_counter() - t0))
    return out


# ----------------------------------------------------------------------------------- replay
def replay(model_dir: Path, tools_file: Path, k: int, logs: Sequence[SessionLog]) -> list[int]:
    """For each session, how many of its ``tools/list`` answers differ from its own replay."""
    import mcp_types as types

    from dtdr_agents.foundation.types import Toolset
    from dtdr_agents.retrievers import load_retriever
    from mcp_dtdr.session import ProxyConfig, ProxySession, _core_tool, _selector

    specs = json.loads(tools_file.read_text(encoding="utf-8"))
    tools = [
        types.Tool(name=s["name"], description=s["description"], input_schema=s["parameters"])
        for s in specs
    ]
    toolset = Toolset([_core_tool(t) for t in tools])
    selector = _selector(toolset, load_retriever(model_dir), ProxyConfig(k=k), strict=True)
    upstream = {t.name: t for t in tools}
    leaks = []
    for log in logs:
        mine = ProxySession(selector, upstream, search_k=k)
        mine.set_task(log.request)
        wrong = 0
        for seen, (kind, name) in zip(log.lists, log.actions, strict=False):
            if seen != list(mine.exposed()):
                wrong += 1
            if kind == "call":
                mine.record_call(name)
            else:
                mine.set_task(log.request)
        if len(log.lists) > len(log.actions) and log.lists[-1] != list(mine.exposed()):
            wrong += 1
        leaks.append(wrong)
    return leaks


# -------------------------------------------------------------------------------------- main
def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _figures(values: Sequence[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50_ms": round(_pct(values, 0.50), 3),
        "p99_ms": round(_pct(values, 0.99), 3),
        "mean_ms": round(statistics.fmean(values), 3) if values else None,
        "max_ms": round(max(values), 3) if values else None,
    }


def _start_proxy(model_dir: Path, tools_file: Path, k: int, log_file: Path) -> Any:
    argv = [sys.executable, "-m", "mcp_dtdr", "--transport", "streamable-http"]
    argv += ["--host", "127.0.0.1", "--port", "0", "--model", str(model_dir), "-k", str(k)]
    argv += ["--timeout", "60", "--", *echo_upstream(tools_file)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env)
    found: dict[str, str] = {}
    seen = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        with log_file.open("w", encoding="utf-8") as out:
            for line in proc.stderr:
                out.write(line)
                out.flush()
                match = re.search(r"streamable HTTP at (http://\S+)", line)
                if match:
                    found["url"] = match.group(1)
                    seen.set()
        seen.set()

    threading.Thread(target=read, daemon=True).start()
    if not seen.wait(600) or "url" not in found:
        proc.kill()
        raise RuntimeError(f"the proxy did not start: {log_file.read_text()[-2000:]}")
    return proc, found["url"]


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process and its waited-for children (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def bench(
    *,
    sessions: int,
    steps: int,
    k: int,
    retriever_id: str,
    encoder: str,
    unloaded: int,
    thinks: Sequence[float] = (0.0,),
    client_procs: int = 1,
) -> dict[str, Any]:
    """Fit once, then one load run per think time; returns the report."""
    from dtdr_agents.foundation.types import Toolset
    from dtdr_agents.retrievers import make_retriever

    tools = catalogue()
    with tempfile.TemporaryDirectory(prefix="dtdr-mcp-loadbench-") as tmp:
        folder = Path(tmp)
        tools_file = folder / "tools.json"
        tools_file.write_text(json.dumps(tools), encoding="utf-8")
        t0 = time.perf_counter()
        retriever = make_retriever(retriever_id, encoder=encoder).fit(
            demonstrations(), Toolset(tools)
        )
        retriever.save(folder / "model")
        fit_s = time.perf_counter() - t0
        runs = [
            load_run(
                folder,
                tools_file,
                k=k,
                sessions=sessions,
                steps=steps,
                think_s=think,
                client_procs=client_procs,
                unloaded=unloaded,
            )
            for think in thinks
        ]
    return {
        "kind": "mcp-http-bench",
        "setup": {
            "tools": len(tools),
            "sessions": sessions,
            "steps_per_session": steps,
            "k": k,
            "retriever": retriever_id,
            "encoder": encoder,
            "demonstrations": len(demonstrations()),
            "fit_s": round(fit_s, 1),
            "client_processes": client_procs,
            "transport": "streamable-http (MCP SDK, uvicorn), loopback",
        },
        "runs": runs,
    }


def load_run(
    folder: Path,
    tools_file: Path,
    *,
    k: int,
    sessions: int,
    steps: int,
    think_s: float,
    client_procs: int,
    unloaded: int,
) -> dict[str, Any]:
    """One proxy process under the load; its counts, latencies and machine facts."""
    import anyio

    proc, url = _start_proxy(folder / "model", tools_file, k, folder / "proxy.log")
    try:
        anyio.run(unloaded_lists, url, 5)  # warm-up (first requests, lazy imports)
        load_before = os.getloadavg()
        cpu_before = _cpu_seconds(proc.pid)
        logs, wall = drive_processes(url, sessions, steps, think_s, client_procs)
        cpu_after = _cpu_seconds(proc.pid)
        load_after = os.getloadavg()
        alone = anyio.run(unloaded_lists, url, unloaded)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
    leaks = replay(folder / "model", tools_file, k, logs)
    # the check can fail: each session's answers against its neighbour's request
    swapped = [
        dataclasses.replace(log, request=logs[(j + 1) % len(logs)].request)
        for j, log in enumerate(logs)
    ]
    caught = replay(folder / "model", tools_file, k, swapped)
    # and against its own request with its neighbour's calls as history
    crossed = [
        dataclasses.replace(log, actions=logs[(j + 1) % len(logs)].actions)
        for j, log in enumerate(logs)
    ]
    caught_history = replay(folder / "model", tools_file, k, crossed)
    lists = [ms for log in logs for ms in log.list_ms]
    calls = [ms for log in logs for ms in log.call_ms]
    set_tasks = [ms for log in logs for ms in log.set_task_ms]
    requests = len(lists) + len(calls) + len(set_tasks)
    return {
        "think_s": think_s,
        "counts": {
            "sessions_completed": sum(1 for log in logs if not log.errors),
            "errors": sum(len(log.errors) for log in logs),
            "error_samples": sorted({e for log in logs for e in log.errors})[:5],
            "leaked_lists": sum(leaks),
            "sessions_with_leaks": sum(1 for n in leaks if n),
            "misrouted_calls": sum(log.misrouted for log in logs),
            "lists_checked": len(lists),
            "calls_checked": len(calls),
            "distinct_first_lists": len({tuple(log.lists[0]) for log in logs if log.lists}),
            "lists_flagged_with_swapped_requests": sum(caught),
            "lists_flagged_with_swapped_histories": sum(caught_history),
        },
        "latency": {
            "tools_list": _figures(lists),
            "tools_call": _figures(calls),
            "set_task": _figures(set_tasks),
            "tools_list_one_session_alone": _figures(alone),
        },
        "throughput": {
            "wall_s": round(wall, 2),
            "requests": requests,
            "requests_per_s": round(requests / wall, 1),
            "proxy_cpu_s": None
            if cpu_before is None or cpu_after is None
            else round(cpu_after - cpu_before, 2),
        },
        "machine": {
            "loadavg_1m_before": round(load_before[0], 2),
            "loadavg_1m_after": round(load_after[0], 2),
        },
    }


def _provenance(argv: Sequence[str]) -> dict[str, Any]:
    from importlib.metadata import version

    from dtdr_agents.evaluation.report import provenance

    out = provenance([], argv)
    out["command"] = " ".join(["python -m mcp_dtdr.loadbench", *argv])
    out["mcp"] = version("mcp")
    out["platform"] = platform.platform()
    return out


def print_report(report: dict[str, Any]) -> None:
    """The figures, one decimal (as docs/mcp-proxy-http.md quotes them)."""
    s = report["setup"]
    print(
        f"{s['sessions']} sessions x {s['steps_per_session']} steps, {s['tools']} tools, "
        f"k={s['k']}, {s['retriever']}/{s['encoder']}, {s['client_processes']} client "
        f"process(es); cpu_count={report['provenance']['cpu_count']}"
    )
    for run in report["runs"]:
        c, lat, t, m = run["counts"], run["latency"], run["throughput"], run["machine"]
        print(f"-- think {run['think_s']:g} s before each step")
        print(
            f"errors {c['errors']}, sessions completed {c['sessions_completed']}/"
            f"{s['sessions']}, leaked lists {c['leaked_lists']} of {c['lists_checked']} "
            f"(the same check flags {c['lists_flagged_with_swapped_requests']} with the "
            f"requests swapped, {c['lists_flagged_with_swapped_histories']} with the "
            f"histories swapped), misrouted calls {c['misrouted_calls']} of "
            f"{c['calls_checked']}, distinct first lists {c['distinct_first_lists']}"
        )
        for name, fig in lat.items():
            print(
                f"{name}: n={fig['n']} p50 {fig['p50_ms']:.1f} ms, p99 {fig['p99_ms']:.1f} ms, "
                f"max {fig['max_ms']:.1f} ms"
            )
        print(
            f"wall {t['wall_s']:.1f} s, {t['requests']} requests, {t['requests_per_s']:.1f}/s, "
            f"proxy CPU {t['proxy_cpu_s']} s; load average {m['loadavg_1m_before']} -> "
            f"{m['loadavg_1m_after']}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Command line of the bench."""
    parser = argparse.ArgumentParser(prog="python -m mcp_dtdr.loadbench", description=__doc__)
    parser.add_argument("--json", help="write the report here")
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--retriever", default="dtdr-c", help="a retriever id (default dtdr-c)")
    parser.add_argument("--encoder", default="tfidf", help="tfidf (default) or default (MiniLM)")
    parser.add_argument("--unloaded", type=int, default=200, help="lists of one session alone")
    parser.add_argument(
        "--think",
        default="0,1",
        help="comma-separated seconds each session pauses before a step (an agent's model "
        "thinking); one run each (default 0,1: back to back, then 1 s)",
    )
    parser.add_argument("--client-procs", type=int, default=2, help="client processes")
    args = parser.parse_args(argv)
    try:
        thinks = [float(x) for x in args.think.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--think must be comma-separated seconds, got {args.think!r}")
    if not thinks or any(not t >= 0 for t in thinks):
        parser.error(f"--think must be seconds >= 0, got {args.think!r}")
    for name in ("sessions", "steps", "k", "unloaded", "client_procs"):
        if getattr(args, name) < 1:
            flag = name.replace("_", "-")
            parser.error(f"--{flag} must be >= 1, got {getattr(args, name)}")
    report = bench(
        sessions=args.sessions,
        steps=args.steps,
        k=args.k,
        retriever_id=args.retriever,
        encoder=args.encoder,
        unloaded=args.unloaded,
        thinks=thinks,
        client_procs=args.client_procs,
    )
    report["provenance"] = _provenance(list(sys.argv[1:] if argv is None else argv))
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    bad = [
        run
        for run in report["runs"]
        if any(run["counts"][n] for n in ("errors", "leaked_lists", "misrouted_calls"))
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
