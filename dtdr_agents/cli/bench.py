"""Bench commands: `bench` (compare retrievers), `stats` (dataset statistics), `report`."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from dtdr_agents.cli._common import (
    CLIError,
    add_split_arguments,
    check_encoder_option,
    load_split,
    non_negative_int,
    positive_int,
    split_ids,
)
from dtdr_agents.datasets.base import Dataset
from dtdr_agents.evaluation.bench import ABLATIONS, run_seeded
from dtdr_agents.evaluation.report import (
    LEGEND,
    aggregate_ablations,
    build_report,
    format_report_markdown,
    format_table,
    provenance,
    write_json,
)
from dtdr_agents.foundation.encoders import default_cache_dir, get_encoder
from dtdr_agents.foundation.progress import progress_bar
from dtdr_agents.planning.sources import bench_planner, goal_planner, goal_report
from dtdr_agents.retrievers import default_bench_ids


def read_json_report(path: str) -> dict[str, Any]:
    """A JSON report file, with a clear error when it cannot be read."""
    from dtdr_agents.evaluation.docsync import ResultsError, read_json_object

    try:
        return read_json_object(Path(path))
    except ResultsError as exc:
        raise CLIError(str(exc)) from exc


def seed_list(args: argparse.Namespace) -> list[int]:
    """`--seed`, `--seed + 1`, ... (`--seeds` of them)."""
    return [args.seed + i for i in range(args.seeds)]


def first_demos(train: Dataset, test: Dataset, n: int | None) -> tuple[Dataset, Dataset]:
    """(train cut to its first `n` demonstrations, test); `n` None keeps them all."""
    if n is None:
        return train, test
    return dataclasses.replace(train, demos=list(train.demos)[:n]), test


TOOL_GRAPHS = ("dataset", "derived")
"""`bench --tool-graph`: the dataset's published graph where it has one, or always derived."""


def bench_split(args: argparse.Namespace) -> tuple[Dataset, Dataset]:
    """The bench's (demonstrations, test), `--n-demos` applied.

    Under `--tool-graph derived` the dataset's published graph is dropped, so the hybrid
    derives its own from the catalogue.
    """
    train, test = first_demos(*load_split(args), args.n_demos)
    if args.tool_graph == "derived":
        train = dataclasses.replace(train, tool_graph=None)
        test = dataclasses.replace(test, tool_graph=None)
    return train, test


def tool_graph_note(args: argparse.Namespace, train: Dataset) -> str:
    """What the report records as the hybrid's tool graph."""
    if train.tool_graph:
        return f"dataset ({len(train.tool_graph)} published edges)"
    if args.tool_graph == "derived":
        return "derived from the catalogue (--tool-graph derived)"
    return "derived from the catalogue (the dataset publishes none)"


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the comparison over the seeds and print/write the results."""
    t_start = time.perf_counter()
    check_encoder_option(args.encoder)  # before any data is read
    ablations = split_ids(args.ablations, ABLATIONS) if args.ablations else []
    unknown = [a for a in ablations if a not in ABLATIONS]
    if unknown:
        raise CLIError(
            f"--ablations: unknown {', '.join(unknown)}; choose from {', '.join(ABLATIONS)}"
        )
    seeds = seed_list(args)
    origin = provenance(seeds, getattr(args, "argv", None))  # the code that runs is this commit
    train, test = bench_split(args)
    cache_dir = None if args.no_cache else (args.cache_dir or default_cache_dir())
    encoder = get_encoder(args.encoder, cache_dir=cache_dir)
    chat = None
    if args.chat_base_url or args.chat_model:
        from dtdr_agents.foundation.chat import OpenAIChat

        chat = OpenAIChat(model=args.chat_model or "gpt-4o-mini", base_url=args.chat_base_url)
    ids = split_ids(args.retrievers, default_bench_ids())
    planning = bench_planner(
        test,
        plans=args.plans,
        from_instruction=args.plans_from_instruction,
        chat_model=chat,
        record=args.record_plans,
        skip_bad=args.skip_bad,
    )
    for problem in planning.problems:
        print(f"plans: {problem}", file=sys.stderr)
    context: dict[str, Any] = {}
    if planning.planner is not None:
        context["planner"] = planning.planner
    goals = None
    if args.hybrid_goals == "planner":
        if chat is not None and any(rid.split(":")[0] == "toolqp" for rid in ids):
            raise CLIError(
                "--hybrid-goals planner with a live chat model: run toolqp in another run "
                "(each writes its own plans)"
            )
        goals = goal_planner(
            plans=args.plans, chat_model=chat, record=args.record_plans, skip_bad=args.skip_bad
        )
        # unbounded: a plan that came late would be counted planned where the clauses were used
        context.update(goal_planner=goals.planner, goal_planner_timeout=None)
    print(
        f"{train.name}: {len(train.demos)} demonstrations, {len(test.demos)} test plans, "
        f"{len(train.tools)} tools, encoder {encoder.id}, seeds {seeds}",
        file=sys.stderr,
    )
    loaded = {args.seed: (train, test)}

    def load(seed: int) -> tuple[Dataset, Dataset]:
        if seed not in loaded:
            loaded[seed] = bench_split(argparse.Namespace(**{**vars(args), "seed": seed}))
        return loaded.pop(seed)

    run = run_seeded(
        load,
        ids,
        seeds,
        encoder=encoder,
        ablations=ablations,
        chat_model=chat,
        progress=progress_bar(not args.quiet),
        context=context or None,
    )
    uses_planner = any(rid.split(":")[0] == "toolqp" for rid in ids)
    extra: dict[str, Any] = {
        "n_demos": len(train.demos),
        "tool_graph": tool_graph_note(args, train),
        "skipped": run.skipped,
    }
    if uses_planner:
        extra["planner"] = planning.to_json()
    if goals is not None:
        extra["hybrid_goals"] = goal_report(goals)
    if run.ablations:
        extra["ablations"] = aggregate_ablations(run.ablations, same_requests=run.same_requests)
    report = build_report(
        dataset=train.name,
        n_train=len(train.demos),
        n_test=len(test.demos),
        encoder=encoder.id,
        runs=run.runs,
        seeds=seeds,
        same_requests=run.same_requests,
        extra=extra,
        breakdowns=True,
        origin=origin,
    )
    print(format_table(report))
    print(LEGEND)
    if uses_planner and planning.planner is not None:
        print(f"toolqp planner: {planning.note}")
    if goals is not None:
        print(f"hybrid sub-goals: {extra['hybrid_goals']['note']}")
    for rid, reason in run.skipped.items():
        print(f"skipped {rid}: {reason}")
    report["wall_s"] = time.perf_counter() - t_start
    print(f"wall time {report['wall_s']:.1f} s", file=sys.stderr)
    if args.json:
        write_json(args.json, report)
        print(f"wrote {args.json}", file=sys.stderr)
    if args.plot:
        from dtdr_agents.evaluation.plots import plot_report

        plot_report(report, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 1 if any(r.error for rs in run.runs.values() for r in rs) else 0


def cmd_stats(args: argparse.Namespace) -> int:
    """Print Table-5-style statistics of a dataset."""
    from dtdr_agents.datasets import dataset_stats, format_stats, load_dataset

    kwargs: dict[str, Any] = {"skip_bad": args.skip_bad}
    if args.split:
        kwargs["split"] = args.split
    if args.tools:
        kwargs["tools_path"] = args.tools
    data = load_dataset(args.dataset, args.path, **kwargs)
    print(format_stats(dataset_stats(data)))
    for problem in data.problems[: args.show_problems]:
        print(f"  {problem}")
    if len(data.problems) > args.show_problems:
        print(f"  ... {len(data.problems) - args.show_problems} more problems")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Print one JSON report as Markdown, or regenerate the docs' tables from a results folder."""
    path = Path(args.file)
    if path.is_dir():
        return _sync_docs(path, args)
    if args.write or args.check:
        raise CLIError(f"{path}: --write and --check take a results folder, not one file")
    report = read_json_report(args.file)
    if report.get("kind") == "e2e":
        from dtdr_agents.evaluation.e2e import format_e2e_markdown

        print(format_e2e_markdown(report))
        return 0
    if report.get("kind") == "agent-bench":
        from dtdr_agents.evaluation.agent_bench import format_agent_bench_markdown

        print(format_agent_bench_markdown(report))
        return 0
    print(format_report_markdown(report))
    return 0


def _sync_docs(results: Path, args: argparse.Namespace) -> int:
    from dtdr_agents.evaluation.docsync import ResultsError, default_documents, loose_figures, sync

    documents = [Path(d) for d in args.docs] if args.docs else default_documents(Path(args.root))
    if not documents:
        raise CLIError(f"{args.root}: no README.md, docs/*.md or CHANGELOG.md to generate")
    try:
        stale = sync(results, documents, write=args.write)
    except ResultsError as exc:
        raise CLIError(f"{exc}; nothing written") from exc
    for s in stale:
        verb = "rewrote" if args.write else "stale"
        print(f"{verb} {s.doc}:{s.line}: {s.spec}")
    loose = [(d, n, line) for d in documents for n, line in loose_figures(d)]
    for doc, number, line in loose:
        print(f"{doc}:{number}: a figure outside a generated block: {line.strip()[:80]}")
    print(f"{len(documents)} documents, {len(stale)} stale block(s), {len(loose)} loose figure(s)")
    return 1 if (stale and not args.write) or loose else 0


def add_commands(sub: Any) -> None:
    """Register `bench`, `stats` and `report`."""
    bench = sub.add_parser("bench", help="compare retrievers on a dataset (tables, JSON, plots)")
    add_split_arguments(bench)
    bench.add_argument(
        "--retrievers",
        help="comma-separated ids, composites as outer:base (default "
        + ",".join(default_bench_ids())
        + ")",
    )
    bench.add_argument(
        "--encoder",
        default="default",
        help="'default' (MiniLM, offline), 'tfidf', a model name or a local model folder",
    )
    bench.add_argument("--json", help="write the report as JSON")
    bench.add_argument(
        "--n-demos",
        type=non_negative_int,
        metavar="N",
        help="fit on the first N demonstrations of the training split (0: zero-shot, every "
        "retriever fits on none); the test split is unchanged (default: all)",
    )
    bench.add_argument(
        "--tool-graph",
        choices=TOOL_GRAPHS,
        default="dataset",
        help="the hybrid's tool graph: the dataset's published one where it has one "
        "(TaskBench's graph_desc.json), or 'derived' from the catalogue's schemas and "
        "descriptions as for a user without one (default dataset)",
    )
    bench.add_argument(
        "--seeds",
        type=positive_int,
        default=1,
        help="run every fit over this many seeds (--seed, --seed + 1, ...) and report means "
        "with 95%% bootstrap intervals; published figures use at least 3 (default 1)",
    )
    bench.add_argument(
        "--plot", help="write a PNG (accuracy by plan length; ablations with --ablations)"
    )
    bench.add_argument(
        "--ablations",
        nargs="?",
        const=",".join(ABLATIONS),
        metavar="LIST",
        help="run ablations: " + ",".join(ABLATIONS) + " (all when LIST is omitted; "
        "n_demos is the learning curve)",
    )
    bench.add_argument(
        "--cache-dir", help=f"embedding cache folder (default {default_cache_dir()})"
    )
    bench.add_argument("--no-cache", action="store_true", help="no on-disk embedding cache")
    bench.add_argument("--chat-base-url", help="OpenAI-compatible endpoint for lim and toolqp")
    bench.add_argument("--chat-model", help="chat model name for lim and toolqp")
    bench.add_argument("--plans", help="toolqp: replay recorded plans (JSON lines)")
    bench.add_argument(
        "--plans-from-instruction",
        action="store_true",
        help="toolqp: each ToolRet query's instruction as a one-query plan (dataset-provided "
        "LLM text, not a live planner)",
    )
    bench.add_argument(
        "--record-plans",
        help="with a chat model: append its plans here (with --hybrid-goals planner, the plans "
        "already there are replayed, not asked again)",
    )
    bench.add_argument(
        "--hybrid-goals",
        choices=("clauses", "planner"),
        default="clauses",
        help="hybrid's sub-goals: the request's clauses, or a planner's (--plans FILE, or the "
        "chat model asked once per request, with no time bound; default clauses)",
    )
    bench.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    bench.set_defaults(func=cmd_bench)

    stats = sub.add_parser("stats", help="Table-5-style statistics of a dataset")
    stats.add_argument("--dataset", required=True)
    stats.add_argument("--path")
    stats.add_argument("--split")
    stats.add_argument("--tools")
    stats.add_argument("--skip-bad", action="store_true")
    stats.add_argument("--show-problems", type=int, default=5, help="problems to list (default 5)")
    stats.set_defaults(func=cmd_stats)

    report = sub.add_parser(
        "report",
        help="print a JSON report as Markdown, or regenerate the docs' tables from a results "
        "folder (--write / --check)",
    )
    report.add_argument(
        "file", help="JSON written by `dtdr-agents bench/e2e --json`, or a results folder"
    )
    mode = report.add_mutually_exclusive_group()
    mode.add_argument(
        "--write", action="store_true", help="rewrite the generated blocks of the documents"
    )
    mode.add_argument(
        "--check", action="store_true", help="exit 1 when a generated block is stale (default)"
    )
    report.add_argument("--root", default=".", help="repository root (default .)")
    report.add_argument(
        "--docs", nargs="+", help="documents to generate (default README.md docs/*.md CHANGELOG.md)"
    )
    report.set_defaults(func=cmd_report)
