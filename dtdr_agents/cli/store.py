"""`dtdr-agents store`: the run store (import traces, count what it holds)."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

from dtdr_agents.cli._common import CLIError

STORE_HELP = (
    "run store URL: sqlite:///runs.db (default), a path of an SQLite file, or "
    "postgresql://user@host/db (pip install 'dtdr-agents[postgres]')"
)


def cmd_store_import(args: argparse.Namespace) -> int:
    """Import trace files into the store; prints how many runs were new."""
    from dtdr_agents.store import RunStore, import_traces

    with RunStore(args.store) as store:
        for path in args.files:
            try:
                added, problems = import_traces(store, path, args.format)
            except FileNotFoundError as exc:
                raise CLIError(f"{path}: no such file") from exc
            for problem in problems:
                print(f"note: {problem}", file=sys.stderr)
            print(f"{path}: {added} new runs")
        print(f"the store holds {store.count()} runs")
    return 0


def cmd_store_stats(args: argparse.Namespace) -> int:
    """Print the store's schema version and its runs by source and outcome."""
    from dtdr_agents.store import RunStore

    with RunStore(args.store) as store:
        runs = list(store.iter_runs())
        print(f"schema version {store.schema_version}, {len(runs)} runs")
        by = Counter((r.source, r.outcome or "unknown") for r in runs)
        for (source, outcome), n in sorted(by.items()):
            print(f"  {source:<12} {outcome:<8} {n}")
        tools = Counter(c for r in runs for c in r.calls)
        if tools:
            top = ", ".join(f"{name} ({n})" for name, n in tools.most_common(10))
            print(f"most called: {top}")
    return 0


def cmd_store_bench(args: argparse.Namespace) -> int:
    """Writer processes into SQLite and PostgreSQL; print (and write) the load figures."""
    import json

    from dtdr_agents.evaluation.store_bench import store_bench
    from dtdr_agents.foundation.atomic import atomic_write_text

    if args.writers < 1 or args.runs < 1:
        raise CLIError("--writers and --runs must be at least 1")
    postgres = None if args.postgres == "off" else args.postgres
    result = store_bench(writers=args.writers, runs=args.runs, postgres=postgres)
    for backend in ("sqlite", "postgresql"):
        row = result.get(backend)
        if row is None:
            continue
        if "skipped" in row:
            print(f"{backend}: skipped ({row['skipped']})")
            continue
        print(
            f"{backend}: {row['read_back']} of {row['expected']} runs read back, "
            f"{row['torn']} torn, {row['failed_writers']} failed writers; "
            f"{row['runs_per_s']} runs/s, write p50 {row['write_ms_p50']} ms, "
            f"p99 {row['write_ms_p99']} ms ({row['writers']} writers x {row['runs_per_writer']})"
        )
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=2) + "\n")
    ok = all(
        row.get("read_back") == row.get("expected") and not row.get("torn")
        for row in (result.get("sqlite"), result.get("postgresql"))
        if row is not None and "skipped" not in row
    )
    return 0 if ok else 1


def add_commands(sub: Any) -> None:
    """Add ``store import``, ``store stats`` and ``store bench``."""
    store = sub.add_parser("store", help="the run store: import traces, show what it holds")
    cmds = store.add_subparsers(dest="store_command", required=True)
    imp = cmds.add_parser(
        "import",
        help="import trace files as runs (JSONL recordings, LangSmith exports, OTLP JSON)",
        description="Each trace becomes one run; importing a file again adds only new runs.",
    )
    imp.add_argument("files", nargs="+", help="trace files")
    imp.add_argument(
        "--format",
        choices=("jsonl", "langsmith", "otel"),
        default="jsonl",
        help="jsonl: DemonstrationRecorder files; langsmith: a run export (JSON); otel: "
        "OpenTelemetry GenAI spans (OTLP JSON). Default jsonl",
    )
    imp.add_argument("--store", default="sqlite:///runs.db", help=STORE_HELP)
    imp.set_defaults(func=cmd_store_import)
    stats = cmds.add_parser("stats", help="runs by source and outcome, most called tools")
    stats.add_argument("--store", default="sqlite:///runs.db", help=STORE_HELP)
    stats.set_defaults(func=cmd_store_stats)
    bench = cmds.add_parser(
        "bench",
        help="load figures: writer processes into SQLite and PostgreSQL, every run read back",
    )
    bench.add_argument("--writers", type=int, default=8, help="writer processes (default 8)")
    bench.add_argument("--runs", type=int, default=500, help="runs per writer (default 500)")
    bench.add_argument(
        "--postgres",
        default="auto",
        help="a postgresql:// URL of an empty database, 'auto' (start a throw-away server "
        "here if PostgreSQL is installed) or 'off'",
    )
    bench.add_argument("--json", help="write the figures to this JSON file")
    bench.set_defaults(func=cmd_store_bench)
