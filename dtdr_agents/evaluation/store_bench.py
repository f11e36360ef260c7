"""Load figures of the run store: many writer processes, then every run read back intact.

`writer_load` starts `writers` processes that each record `runs` runs, one transaction per
run as an agent does, into one store; then it reads the store back and checks that exactly
``writers * runs`` runs are there, none duplicated and none torn (every field equal to what its
writer wrote). `store_bench` does that for an SQLite file and, when a PostgreSQL server is
given or can be started here (`dtdr_agents.store.testing`), for PostgreSQL. `reload_load`
refits, publishes and hot-reloads a model while agents run steps in a loop.
"""

from __future__ import annotations

import multiprocessing
import statistics
import tempfile
import threading
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
    *,
    writers: int = 8,
    runs: int = 500,
    postgres: str | None = "auto",
    agents: int = 4,
    poll: float = 0.5,
) -> dict[str, Any]:
    """`writer_load` into a fresh SQLite file and into PostgreSQL, then `reload_load`.

    Args:
        writers: Writer processes.
        runs: Runs each writer records.
        postgres: A ``postgresql://`` URL of an empty database, ``"auto"`` to start a
            throw-away server here when one can be started, or None to skip PostgreSQL.
        agents: Agents of the refit-publish-reload run (0 skips it); it records into SQLite.
        poll: Their reload poll interval in seconds.
    """
    from dtdr_agents.store.testing import postgres_server, postgres_unavailable

    out: dict[str, Any] = {"kind": "store-bench"}
    with tempfile.TemporaryDirectory(prefix="dtdr-store-bench-") as tmp:
        out["sqlite"] = writer_load(
            f"sqlite:///{Path(tmp) / 'runs.db'}", writers=writers, runs=runs
        )
        if agents:
            out["reload"] = reload_load(
                f"sqlite:///{Path(tmp) / 'fleet.db'}", agents=agents, poll=poll
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


def _agent_loop(
    name: str,
    selector: Any,
    reloader: Any,
    recorder: Any,
    requests: list[Any],
    stop: threading.Event,
    log: list[dict[str, Any]],
) -> None:
    """Run `requests` step by step until `stop`; log each step's version (or its error)."""
    i = 0
    while not stop.is_set():
        demo = requests[i % len(requests)]
        i += 1
        for n in range(len(demo.calls) + 1):
            start = time.monotonic()
            entry: dict[str, Any] = {"agent": name, "t": start}
            try:
                selector.select(demo.query, demo.calls[:n])
                entry["version"] = reloader.version.name  # the version this step ran on
            except Exception as exc:  # every failed step is counted, not raised
                entry["error"] = repr(exc)[:200]
            entry["s"] = time.monotonic() - start
            log.append(entry)  # one append per step: the list is shared by the agents
        recorder.record(demo.query, demo.calls, edges=demo.edges)


def reload_load(
    url: str,
    *,
    agents: int = 4,
    poll: float = 0.5,
    seed_demos: int = 15,
    runs: int = 40,
    after: float = 3.0,
    encoder: str = "tfidf",
    seed: int = 0,
    takeup_timeout: float = 60.0,
) -> dict[str, Any]:
    """Refit, publish and hot reload while `agents` threads run steps in a loop.

    Each agent is a `StepSelector` on its own `Reloader` of one publish folder (polling every
    `poll` seconds) and records each finished request into the store at `url`. Once the store
    holds the seed demonstrations and `runs` recorded runs, DTDR-C is refitted on the store
    and published as v000002 (`refit_and_publish`). The agents run on until every one has
    run a step on it (at most `takeup_timeout` seconds), then for `after` more seconds: a
    loaded machine makes a take-up late, never missed.

    Returns:
        Steps, failed steps, step times, and when each agent's first step on v000002 started,
        in seconds after the publish (None: not taken up); ``agents_late`` counts the agents
        whose take-up came later than one poll interval.
    """
    from dtdr_agents.datasets.synthetic import make_demo_dataset
    from dtdr_agents.retrievers import load_retriever, make_retriever
    from dtdr_agents.retrievers.refit import refit_and_publish
    from dtdr_agents.runtime.recording import DemonstrationRecorder
    from dtdr_agents.runtime.selector import StepSelector
    from dtdr_agents.store.publishing import Reloader, publish

    data = make_demo_dataset(seed_demos + runs, seed=seed)
    first, requests = list(data.demos[:seed_demos]), list(data.demos[seed_demos:])
    with tempfile.TemporaryDirectory(prefix="dtdr-reload-bench-") as tmp:
        pub = Path(tmp) / "model"
        model = make_retriever("dtdr-c", encoder=encoder).fit(first, data.tools)
        publish(pub, model.save, check=load_retriever, note="seed demonstrations")
        with RunStore(url) as store:
            store.add_many(RunRecord.from_demonstration(d, source="seed") for d in first)
        stop, log = threading.Event(), list[dict[str, Any]]()
        threads = []
        for a in range(agents):
            reloader = Reloader(pub, load_retriever, poll_interval=poll)
            selector = StepSelector(data.tools, reloader)
            recorder = DemonstrationRecorder(url, tools=data.tools, id_prefix=f"agent{a}")
            mine = requests[a::agents] or requests
            args = (f"agent{a}", selector, reloader, recorder, mine, stop, log)
            threads.append(threading.Thread(target=_agent_loop, args=args, daemon=True))
        for thread in threads:
            thread.start()
        with RunStore(url) as store:
            deadline = time.monotonic() + 600
            while store.count() < seed_demos + runs and time.monotonic() < deadline:
                time.sleep(0.05)
            recorded = store.count()
        t0 = time.monotonic()
        report = refit_and_publish(url, pub, data.tools, retriever="dtdr-c", encoder=encoder)
        version, fitted_on = report.version, report.runs_fitted
        published = time.monotonic()
        names = {f"agent{a}" for a in range(agents)}
        while time.monotonic() < published + takeup_timeout:
            took = {e["agent"] for e in list(log) if e.get("version") == version.name}
            if took >= names:
                break
            time.sleep(0.05)
        time.sleep(after)
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    takeup: dict[str, float | None] = {}
    for a in range(agents):
        on_new = [
            e["t"] for e in log if e["agent"] == f"agent{a}" and e.get("version") == version.name
        ]
        takeup[f"agent{a}"] = round(min(on_new) - published, 3) if on_new else None
    failed = [e["error"] for e in log if "error" in e]
    late = [s for s in takeup.values() if s is None or s > poll]
    step_ms = sorted(e["s"] * 1000 for e in log)
    return {
        "agents": agents,
        "poll_interval_s": poll,
        "runs_in_store_at_refit": recorded,
        "refit_on_runs": fitted_on,
        "refit_publish_s": round(published - t0, 3),
        "published": version.name,
        "steps": len(log),
        "failed_steps": len(failed),
        "first_errors": failed[:3],
        "step_ms_p50": round(statistics.median(step_ms), 3) if step_ms else None,
        "step_ms_p99": round(step_ms[int(0.99 * (len(step_ms) - 1))], 3) if step_ms else None,
        "takeup_s": takeup,
        "agents_late": len(late),
    }
