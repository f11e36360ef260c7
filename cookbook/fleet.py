"""A fleet on one machine: agents record to one store, a refit publishes, agents reload.

    python cookbook/fleet.py
    python cookbook/fleet.py --store postgresql://user@host/db   # a real PostgreSQL

1. Fit DTDR-C on a handful of demonstrations and publish it as v000001 (``DIR/latest``).
2. Put the seed demonstrations into the run store, and start N agents (threads standing in for
   processes or machines). Each is a `create_dtdr_agent` graph on its own `Reloader` of
   ``DIR`` and records every finished turn into the store (`DemonstrationRecorder(URL)`).
3. While they run, refit from the store (``dtdr-agents refit --store URL --publish DIR``):
   v000002 goes live behind ``DIR/latest`` with one atomic rename.
4. Every agent takes it up at the start of a step, within one poll interval; no step fails.
5. Score v000001 and v000002 on held-out requests.

Offline by default: the store is an SQLite file in a temporary folder and the scripted model
plays each request's recorded plan (``--model``/``--base-url`` use a real model).
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import base_parser, make_chat_model

from dtdr_agents.cli import main as dtdr_cli
from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.evaluation.protocol import evaluate
from dtdr_agents.foundation.types import Demonstration
from dtdr_agents.retrievers import load_retriever, make_retriever
from dtdr_agents.runtime.recording import DemonstrationRecorder
from dtdr_agents.store import Reloader, RunRecord, RunStore, publish
from langchain_dtdr.testing import langchain_tools
from langgraph_dtdr import create_dtdr_agent


def run_agent(
    name: str,
    graph: Any,
    models: Reloader[Any],
    requests: list[Demonstration],
    stop: threading.Event,
    log: list[dict[str, Any]],
) -> None:
    """Run requests in a loop until `stop`; log the version that served each turn."""
    i = 0
    while not stop.is_set():
        request = requests[i % len(requests)]
        i += 1
        try:
            graph.invoke({"messages": [("user", request.query)]})
            log.append({"agent": name, "t": time.monotonic(), "version": models.version.name})
        except Exception as exc:
            log.append({"agent": name, "t": time.monotonic(), "error": repr(exc)[:200]})


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--store", help="run store URL (default: SQLite in a temp folder)")
    parser.add_argument("--agents", type=int, default=4, help="agents running at once")
    parser.add_argument("--seed-demos", type=int, default=15, help="demonstrations of v1")
    parser.add_argument("--runs", type=int, default=40, help="runs recorded before the refit")
    parser.add_argument("--test", type=int, default=60, help="held-out requests to score")
    parser.add_argument("--poll", type=float, default=0.5, help="reload poll interval (s)")
    parser.add_argument("--after", type=float, default=3.0, help="seconds run after the publish")
    parser.add_argument("--json", help="write the figures to this JSON file")
    args = parser.parse_args(argv)

    data = make_demo_dataset(args.seed_demos + args.runs + args.test, seed=args.seed)
    seed = list(data.demos[: args.seed_demos])
    requests = list(data.demos[args.seed_demos : args.seed_demos + args.runs])
    held_out = list(data.demos[args.seed_demos + args.runs :])
    tmp = tempfile.TemporaryDirectory()
    folder = Path(tmp.name)
    url = args.store or f"sqlite:///{folder / 'runs.db'}"
    pub = folder / "model"
    tools_path = DemonstrationRecorder.write_tools(folder / "tools.json", data.tools)

    print(f"1. fit dtdr-c on {len(seed)} demonstrations; publish it to {pub}/latest")
    v1 = make_retriever("dtdr-c", encoder=args.encoder).fit(seed, data.tools)
    publish(pub, v1.save, check=load_retriever, note="seed demonstrations")

    with RunStore(url) as store:  # created (or upgraded) once, before the agents race
        store.add_many(RunRecord.from_demonstration(d, source="seed") for d in seed)
        print(f"2. {args.agents} agents run and record into {store.where}")
    plans = {d.query: d.calls for d in data.demos}
    stop, log = threading.Event(), []
    threads = []
    for a in range(args.agents):
        models = Reloader(pub, load_retriever, poll_interval=args.poll)
        recorder = DemonstrationRecorder(url, tools=data.tools, id_prefix=f"agent{a}")
        graph = create_dtdr_agent(
            make_chat_model(args, plans, data.tools),
            langchain_tools(data.tools),
            models,
            k=args.k,
            mode="soft",  # every tool bound, the retrieved ones named: no turn fails on them
            recorder=recorder,
        ).compile()
        mine = requests[a :: args.agents] or requests
        thread = threading.Thread(
            target=run_agent, args=(f"agent{a}", graph, models, mine, stop, log)
        )
        threads.append(thread)
        thread.start()
    with RunStore(url) as store:  # every request recorded once (repeats are not recorded again)
        while store.count() < len(seed) + len(requests) and all(t.is_alive() for t in threads):
            time.sleep(0.1)

    print("3. refit from the store and publish (while the agents keep running)")
    refit = ["refit", "--store", url, "--publish", str(pub), "--tools", str(tools_path)]
    refit += ["--retriever", "dtdr-c", "--encoder", args.encoder]
    print(f"   dtdr-agents {' '.join(refit)}")
    dtdr_cli(refit)
    published = time.monotonic()
    time.sleep(args.after)
    stop.set()
    for thread in threads:
        thread.join()

    failed = [e for e in log if "error" in e]
    takeup: dict[str, float | None] = {}
    for a in range(args.agents):
        first = [e["t"] for e in log if e["agent"] == f"agent{a}" and e.get("version") == "v000002"]
        takeup[f"agent{a}"] = round(min(first) - published, 3) if first else None
    print(f"4. {len(log)} turns, {len(failed)} failed; each agent's first turn on v000002:")
    for agent, seconds in takeup.items():
        when = "not yet" if seconds is None else f"{seconds:.2f} s after the publish"
        print(f"   {agent}: {when}")
    with RunStore(url) as store:
        print(f"   the store holds {store.count()} runs")

    print(f"5. teacher-forced scores on {len(held_out)} held-out requests")
    scores = {}
    for version in ("v000001", "v000002"):
        m = evaluate(load_retriever(pub / "versions" / version), held_out, ks=(args.k,)).metrics
        scores[version] = m["mrr"]
        print(f"   {version}: MRR {m['mrr']:.3f}  top-1 {m['top1']:.3f}")
    if args.json:
        figures = {"turns": len(log), "failed": len(failed), "takeup_s": takeup, "mrr": scores}
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    tmp.cleanup()
    return 0 if not failed and all(v is not None for v in takeup.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
