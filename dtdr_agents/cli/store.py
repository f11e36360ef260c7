"""`dtdr-agents store`, `refit` and `rollback`: the run store and published model versions."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
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

    from dtdr_agents.evaluation.report import provenance
    from dtdr_agents.evaluation.store_bench import store_bench
    from dtdr_agents.foundation.atomic import atomic_write_text

    if args.writers < 1 or args.runs < 1:
        raise CLIError("--writers and --runs must be at least 1")
    postgres = None if args.postgres == "off" else args.postgres
    if args.agents < 0 or not args.poll > 0:
        raise CLIError("--agents must be at least 0 and --poll above 0")
    result = store_bench(
        writers=args.writers, runs=args.runs, postgres=postgres, agents=args.agents, poll=args.poll
    )
    result["provenance"] = provenance([], args.argv)
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
    reload = result.get("reload")
    if reload is not None:
        takeup = ", ".join(
            "not taken up" if t is None else f"{t:.3f}" for t in reload["takeup_s"].values()
        )
        print(
            f"reload: {reload['agents']} agents, {reload['steps']} steps, "
            f"{reload['failed_steps']} failed; {reload['published']} refitted on "
            f"{reload['refit_on_runs']} runs and published in {reload['refit_publish_s']} s; "
            f"first step on it after {takeup} s (poll {reload['poll_interval_s']} s, "
            f"{reload['agents_late']} late); step p50 {reload['step_ms_p50']} ms, "
            f"p99 {reload['step_ms_p99']} ms"
        )
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=2) + "\n")
    ok = all(
        row.get("read_back") == row.get("expected") and not row.get("torn")
        for row in (result.get("sqlite"), result.get("postgresql"))
        if row is not None and "skipped" not in row
    ) and (reload is None or (not reload["failed_steps"] and not reload["agents_late"]))
    return 0 if ok else 1


def cmd_refit_bench(args: argparse.Namespace) -> int:
    """Fit and refit costs on a large generated store; print (and write) the figures."""
    import json

    from dtdr_agents.evaluation.refit_bench import format_refit, refit_bench
    from dtdr_agents.evaluation.report import provenance
    from dtdr_agents.foundation.atomic import atomic_write_text

    if min(args.store_runs, args.new_runs, args.fit_runs, args.max_runs) < 1:
        raise CLIError("--store-runs, --new-runs, --fit-runs and --max-runs must be at least 1")
    result = refit_bench(
        store_runs=args.store_runs,
        new_runs=args.new_runs,
        fit_runs=args.fit_runs,
        max_runs=args.max_runs,
        retriever=args.retriever,
        encoder=args.encoder,
    )
    result["provenance"] = provenance([], args.argv)
    print(format_refit(result))
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=2) + "\n")
    return 0 if all(result["checks"].values()) else 1


def cmd_refit(args: argparse.Namespace) -> int:
    """Fit on the store's runs and publish the model as a new version behind `latest`."""
    from dtdr_agents.retrievers import load_retriever
    from dtdr_agents.retrievers.refit import refit_and_publish
    from dtdr_agents.runtime.checks import fitted_tools
    from dtdr_agents.store.publishing import POINTER, current

    if args.keep < 1:
        raise CLIError("--keep must be at least 1")
    if args.max_runs < 0:
        raise CLIError("--max-runs must be at least 0 (0: every run)")
    if args.tools:
        from dtdr_agents.datasets import load_tools

        tools = load_tools(args.tools)
    else:
        live = current(args.publish) if Path(args.publish, POINTER).exists() else None
        if live is None:
            raise CLIError(
                f"{args.publish}: nothing published yet; give the catalogue with --tools FILE"
            )
        tools = fitted_tools(load_retriever(Path(args.publish) / POINTER))
    params: dict[str, Any] = {"encoder": args.encoder} if args.encoder else {}
    print(
        f"fitting {args.retriever} on the runs of the store, {len(tools)} tools ...",
        file=sys.stderr,
    )
    report = refit_and_publish(
        args.store,
        args.publish,
        tools,
        retriever=args.retriever,
        keep=args.keep,
        include_failures=args.include_failures,
        max_runs=args.max_runs or None,
        cache_dir=args.cache_dir,
        **params,
    )
    version = report.version
    print(f"published {version.name} to {Path(args.publish) / POINTER} ({version.note})")
    print(report.summary())
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    """Move `latest` back to the previous (or a named) version."""
    from dtdr_agents.store import rollback

    version = rollback(args.publish, args.to)
    print(f"{Path(args.publish) / 'latest'} -> {version.name} ({version.note or 'no note'})")
    return 0


def add_commands(sub: Any) -> None:
    """Add ``store import|stats|bench|refit-bench``, ``refit`` and ``rollback``."""
    from dtdr_agents.retrievers.refit import DEFAULT_MAX_RUNS

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
        help="load figures: writer processes into SQLite and PostgreSQL, every run read back; "
        "a refit published and hot-reloaded while agents run steps",
    )
    bench.add_argument("--writers", type=int, default=8, help="writer processes (default 8)")
    bench.add_argument("--runs", type=int, default=500, help="runs per writer (default 500)")
    bench.add_argument(
        "--postgres",
        default="auto",
        help="a postgresql:// URL of an empty database, 'auto' (start a throw-away server "
        "here if PostgreSQL is installed) or 'off'",
    )
    bench.add_argument(
        "--agents",
        type=int,
        default=4,
        help="agents running steps while a refit is published and hot-reloaded (default 4; "
        "0 skips that run)",
    )
    bench.add_argument(
        "--poll", type=float, default=0.5, help="their reload poll interval, s (default 0.5)"
    )
    bench.add_argument("--json", help="write the figures to this JSON file")
    bench.set_defaults(func=cmd_store_bench)
    rbench = cmds.add_parser(
        "refit-bench",
        help="fit and refit costs: a fit on --fit-runs runs, then refits of a generated store "
        "of --store-runs runs before and after --new-runs new ones (wall time, peak RSS)",
    )
    rbench.add_argument("--store-runs", type=int, default=100_000, help="default 100000")
    rbench.add_argument("--new-runs", type=int, default=1_000, help="default 1000")
    rbench.add_argument("--fit-runs", type=int, default=1_000, help="default 1000")
    rbench.add_argument(
        "--max-runs",
        type=int,
        default=DEFAULT_MAX_RUNS,
        help=f"the refit's window (default {DEFAULT_MAX_RUNS})",
    )
    rbench.add_argument("--retriever", default="hybrid", help="retriever id (default hybrid)")
    rbench.add_argument(
        "--encoder", default="default", help="encoder (default MiniLM, with the bench's cache)"
    )
    rbench.add_argument("--json", help="write the figures to this JSON file")
    rbench.set_defaults(func=cmd_refit_bench)
    refit = sub.add_parser(
        "refit",
        help="fit on the run store and publish a new model version behind DIR/latest",
        description=(
            "Fit a retriever on the store's runs (failed runs left out) and publish it as a "
            "new version of DIR: the version is checked by loading it, then DIR/latest moves "
            "to it in one atomic rename. Agents started on DIR/latest take it up between steps. "
            "The store is read newest first, a batch of rows at a time, up to --max-runs runs; "
            "texts already in the embedding cache are not encoded again. Prints what was read, "
            "how many runs are new since the last refit, the texts encoded and the cache hits."
        ),
    )
    refit.add_argument("--store", default="sqlite:///runs.db", help=STORE_HELP)
    refit.add_argument("--publish", required=True, metavar="DIR", help="publish folder")
    refit.add_argument(
        "--tools", help="tools file (JSON list or JSONL); default: the published catalogue"
    )
    refit.add_argument("--retriever", default="hybrid", help="retriever id (default hybrid)")
    refit.add_argument("--encoder", help="encoder ('default', 'tfidf', a model name or folder)")
    refit.add_argument("--keep", type=int, default=5, help="versions kept (default 5)")
    refit.add_argument("--include-failures", action="store_true", help="learn from failed runs too")
    refit.add_argument(
        "--max-runs",
        type=int,
        default=DEFAULT_MAX_RUNS,
        help=f"learn from the store's most recent runs, at most this many (default "
        f"{DEFAULT_MAX_RUNS}; 0: every run, and memory and time grow with the store)",
    )
    refit.add_argument(
        "--cache-dir", help="embedding cache folder (default: the user cache folder)"
    )
    refit.set_defaults(func=cmd_refit)
    back = sub.add_parser("rollback", help="move DIR/latest back to an earlier version")
    back.add_argument("--publish", required=True, metavar="DIR", help="publish folder")
    back.add_argument("--to", help="the version (e.g. v000003); default: the one before")
    back.set_defaults(func=cmd_rollback)
