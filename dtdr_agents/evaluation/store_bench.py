"""Load figures of the run store: many writer processes, then every run read back intact.

`writer_load` starts `writers` processes that each record `runs` runs, one transaction per
run as an agent does, into one store; then it reads the store back and checks that exactly
``writers * runs`` runs are there, none duplicated and none torn (every field equal to what its
writer wrote). `store_bench` does that for an SQLite file and, when a PostgreSQL server is
given or can be started here (`dtdr_agents.store.testing`), for PostgreSQL.
"""

from __future__ import annotations

import multiprocessing
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from dtdr_agents.foundation.types import CallArguments
from dtdr_agents.store.runs import RunRecord, RunStore

TOOLS = ("geocode", "weather", "convert", "search", "summarize", "translate")


def expected_run(writer: int, i: int) -> RunRecord:
    """The run writer `writer` records as its `i`-th (deterministic, so reads can be checked)."""
    n = 1 + (writer + i) % 4
    calls = tuple(TOOLS[(writer * 7 + i + j) % len(TOOLS)] for j in range(n))
    return RunRecord(
        request=f"writer {writer} run {i}: " + " then ".join(calls),
        calls=calls,
        arguments=tuple(CallArguments.of({"step": j, "w": writer}) for j in range(n)),
        shown=tuple((c, TOOLS[(j + 1) % len(TOOLS)]) for j, c in enumerate(calls)),
        outcome="success" if i % 5 else "failure",
        session=f"w{writer}",
        source="bench",
        id=f"w{writer:02d}-{i:05d}",
    )


def _writer(url: str, writer: int, runs: int, latencies: Any) -> None:
    store = RunStore(url)
    records = [expected_run(writer, i) for i in range(runs)]
    times = []
    start = time.time()
    for run in records:
        t0 = time.perf_counter()
        store.add(run)
        times.append(time.perf_counter() - t0)
    end = time.time()
    store.close()
    latencies.put((times, start, end))


def writer_load(url: str, *, writers: int = 8, runs: int = 500) -> dict[str, Any]:
    """Run the writers against `url`; returns counts, checks and timings."""
    RunStore(url).close()  # create the schema once, before the writers race
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(url, w, runs, queue)) for w in range(writers)]
    for p in procs:
        p.start()
    latencies: list[float] = []
    spans: list[tuple[float, float]] = []
    for _ in procs:
        times, start, end = queue.get(timeout=3600)
        latencies.extend(times)
        spans.append((start, end))
    for p in procs:
        p.join()
    wall = max(e for _, e in spans) - min(s for s, _ in spans)  # first write to last
    failed = sum(1 for p in procs if p.exitcode != 0)
    with RunStore(url) as store:
        back = {r.id: r for r in store.iter_runs()}
    torn = sum(
        1
        for w in range(writers)
        for i in range(runs)
        if (got := back.get(f"w{w:02d}-{i:05d}")) is not None
        and _content(got) != _content(expected_run(w, i))
    )
    ms = sorted(x * 1000 for x in latencies)
    return {
        "writers": writers,
        "runs_per_writer": runs,
        "expected": writers * runs,
        "read_back": len(back),
        "torn": torn,
        "failed_writers": failed,
        "write_wall_s": round(wall, 3),
        "runs_per_s": round(writers * runs / wall, 1),
        "write_ms_p50": round(statistics.median(ms), 3) if ms else None,
        "write_ms_p99": round(ms[int(0.99 * (len(ms) - 1))], 3) if ms else None,
    }


def _content(run: RunRecord) -> tuple[Any, ...]:
    return (run.request, run.calls, run.arguments, run.shown, run.outcome, run.session)


def store_bench(
    *, writers: int = 8, runs: int = 500, postgres: str | None = "auto"
) -> dict[str, Any]:
    """`writer_load` into a fresh SQLite file and into PostgreSQL.

    Args:
        writers: Writer processes.
        runs: Runs each writer records.
        postgres: A ``postgresql://`` URL of an empty database, ``"auto"`` to start a
            throw-away server here when one can be started, or None to skip PostgreSQL.
    """
    from dtdr_agents.store.testing import postgres_server, postgres_unavailable

    out: dict[str, Any] = {"kind": "store-bench"}
    with tempfile.TemporaryDirectory(prefix="dtdr-store-bench-") as tmp:
        out["sqlite"] = writer_load(
            f"sqlite:///{Path(tmp) / 'runs.db'}", writers=writers, runs=runs
        )
    with ExitStack() as stack:
        if postgres == "auto":
            reason = postgres_unavailable()
            if reason:
                out["postgresql"] = {"skipped": reason}
                return out
            postgres = stack.enter_context(postgres_server())
        if postgres is not None:
            out["postgresql"] = writer_load(postgres, writers=writers, runs=runs)
    return out
