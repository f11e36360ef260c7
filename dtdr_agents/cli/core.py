"""Core commands: `demo`, `fit`, `rank` and `speed`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from dtdr_agents._version import __version__
from dtdr_agents.cli._common import (
    CLIError,
    check_encoder_option,
    non_empty,
    non_negative_int,
    parse_params,
    positive_int,
    split_ids,
)
from dtdr_agents.cli._flags import flag_words
from dtdr_agents.foundation.encoders import default_cache_dir
from dtdr_agents.foundation.progress import no_progress, progress_bar, ticking
from dtdr_agents.foundation.words import did_you_mean, plural

if TYPE_CHECKING:
    from dtdr_agents.datasets.base import Dataset
    from dtdr_agents.retrievers import ToolRetriever

DEMO_RETRIEVERS = ("dr", "lr", "dtdr-c", "dtdr-l", "dtdr-l-s", "hybrid")
NO_DEMOS_ID = "hybrid-0demos"
"""The demo's row of `hybrid` fitted with no demonstrations."""
ENCODE_BATCH = 200
"""Requests the demo encodes at a time, so its progress bar moves (2,400 requests: 12 steps)."""


def cmd_demo(args: argparse.Namespace) -> int:
    """Fit the demo retrievers on the embedded demo data and print the comparison."""
    from dataclasses import replace

    from dtdr_agents.datasets.split import split_demonstrations
    from dtdr_agents.datasets.synthetic import make_demo_dataset
    from dtdr_agents.evaluation.bench import run_seeded
    from dtdr_agents.evaluation.report import (
        LEGEND,
        build_report,
        format_table,
        provenance,
        write_json,
    )
    from dtdr_agents.foundation.encoders import get_encoder

    check_encoder_option(args.encoder)
    data = make_demo_dataset(n=args.n, seed=args.seed)
    seeds = [args.seed + i for i in range(args.seeds)]
    origin = provenance(seeds, getattr(args, "argv", None))
    encoder = get_encoder(args.encoder, cache_dir=args.cache_dir)
    ids = args.retrievers.split(",") if args.retrievers else list(DEMO_RETRIEVERS)
    print(
        f"dtdr-agents {__version__} demo: {len(data.tools)} tools, {len(data.demos)} "
        f"demonstrations, 70/30 splits drawn with seeds {seeds}, encoder {encoder.id}",
        file=sys.stderr,
    )
    if getattr(encoder, "is_fitted", True):  # TF-IDF: each retriever fits it on its own data
        t0 = time.perf_counter()
        queries = [d.query for d in data.demos]
        wrap = progress_bar(not args.quiet) or no_progress
        batch: list[str] = []
        for n, query in enumerate(wrap(queries, "encode", len(queries)), start=1):
            batch.append(query)  # once, shared by every retriever (the encoder caches them)
            if len(batch) == ENCODE_BATCH or n == len(queries):
                encoder.encode(batch)
                batch = []
        print(
            f"encoded {len(data.demos)} requests in {time.perf_counter() - t0:.1f} s "
            "(model load included; fit_s below excludes it)",
            file=sys.stderr,
        )

    def load(seed: int) -> tuple[Dataset, Dataset]:
        train, test = split_demonstrations(data.demos, test_size=0.3, seed=seed)
        return replace(data, demos=train), replace(data, demos=test)

    run = run_seeded(load, ids, seeds, encoder=encoder, progress=progress_bar(not args.quiet))
    assert run.train is not None and run.test is not None
    runs = dict(run.runs)
    if "hybrid" in ids:  # the same test requests, fitted on the tools alone: a new user's day one

        def load_zero(seed: int) -> tuple[Dataset, Dataset]:
            train, test = load(seed)
            return replace(train, demos=()), test

        zero = run_seeded(
            load_zero,
            ["hybrid"],
            seeds,
            encoder=encoder,
            progress=progress_bar(not args.quiet),
        )
        runs[NO_DEMOS_ID] = zero.runs["hybrid"]
    report = build_report(
        dataset=data.name,
        n_train=len(run.train.demos),
        n_test=len(run.test.demos),
        encoder=encoder.id,
        runs=runs,
        seeds=seeds,
        same_requests=run.same_requests,
        extra={"skipped": run.skipped},
        origin=origin,
    )
    print(format_table(report))
    print(LEGEND)
    if NO_DEMOS_ID in runs:
        print(
            f"{NO_DEMOS_ID}: hybrid fitted on the tools alone (zero demonstrations), scored on "
            "the same test requests: what a new user gets before any run is recorded."
        )
    print(
        "ms_per_step: ranking time per teacher-forced step after the run's encoder work was "
        "done in batches (requests, dtdr-l's history texts, hybrid's clauses); fit_s: seconds "
        "in fit.",
    )
    if args.json:
        write_json(args.json, report)
        print(f"wrote {args.json}", file=sys.stderr)
    return 1 if any(r.error for rs in runs.values() for r in rs) or run.skipped else 0


def _store_dataset(args: argparse.Namespace) -> Dataset:
    """The run store at ``--path`` as a dataset over the ``--tools`` catalogue.

    With ``--skip-bad`` a run that calls a tool missing from the catalogue is skipped (and
    counted) instead of stopping the fit.
    """
    from dtdr_agents.datasets import load_tools
    from dtdr_agents.datasets.base import Dataset, Problem
    from dtdr_agents.foundation.errors import InvalidDemonstrationError
    from dtdr_agents.store.runs import RunStore

    if not args.path or not args.tools:
        raise CLIError(
            "--dataset store needs --path URL (e.g. sqlite:///runs.db) and --tools FILE "
            "(the catalogue the runs are checked against)"
        )
    tools = load_tools(args.tools)
    with RunStore(args.path) as store:
        demos, problems = [], []
        for demo in store.demonstrations():
            try:
                demo.check_tools(tools)
            except InvalidDemonstrationError as exc:
                hint = did_you_mean([c for c in demo.calls if not tools.has(c)], tools.names)
                if not args.skip_bad:
                    where = f"{store.where}: {exc}{hint}"
                    raise CLIError(f"{where} (--skip-bad skips such runs)") from None
                problems.append(Problem(store.where, f"skipped: {exc}{hint}"))
                continue
            demos.append(demo)
        source = store.where
    data = Dataset(name="store", tools=tools, demos=demos, problems=tuple(problems), source=source)
    if args.limit is not None:
        data = dataclasses.replace(data, demos=data.demos[: args.limit])
    return data


def _fit_data(args: argparse.Namespace) -> Dataset:
    """The demonstrations and catalogue `fit` reads, as its flags say."""
    from dtdr_agents.datasets import load_dataset, load_tools
    from dtdr_agents.datasets.base import Dataset

    if args.no_demos:
        if args.limit is not None:
            raise CLIError("--no-demos fits on no demonstrations; drop --limit")
        if args.dataset is None:
            if not args.tools or args.path:
                raise CLIError(
                    "--no-demos fits on the tool catalogue alone: give it as --tools FILE "
                    "(no --path), or with --dataset ID --path to take a dataset's catalogue"
                )
            tools = load_tools(args.tools, skip_bad=args.skip_bad)
            return Dataset(name="tools", tools=tools, demos=(), source=args.tools)
        args.limit = 0
    if args.dataset is None:
        raise CLIError(
            "fit needs --dataset ID --path FILE (the demonstrations), or --no-demos "
            "--tools FILE to fit on the tool catalogue alone"
        )
    if args.dataset == "store":
        return _store_dataset(args)
    if args.dataset.lower() == "jsonl" and not args.tools and not args.infer_tools:
        raise CLIError(
            "--dataset jsonl needs --tools FILE: the catalogue (names, descriptions, "
            "parameters) that ranking reads. --infer-tools builds it from the call names "
            "instead, with no descriptions: tools are then ranked only by the demonstrations, "
            "and a tool no demonstration calls is never offered"
        )
    with flag_words():
        return load_dataset(
            args.dataset, args.path, tools_path=args.tools, skip_bad=args.skip_bad, limit=args.limit
        )


def cmd_fit(args: argparse.Namespace) -> int:
    """Fit a retriever on a dataset (or on the tool catalogue alone) and save it."""
    from dtdr_agents.datasets.stats import problem_summary
    from dtdr_agents.foundation.persistence import check_save_target
    from dtdr_agents.retrievers import make_retriever

    check_save_target(args.output)  # refuse a foreign -o folder before any work
    params = parse_params(args.param)
    if isinstance(params.get("encoder"), str):
        check_encoder_option(params["encoder"], "--param encoder")
    check_encoder_option(args.encoder)
    if args.encoder:
        params["encoder"] = args.encoder
    retriever = make_retriever(args.retriever, **params)
    if "encoder" not in params:
        _check_default_encoders(retriever, args.retriever)
    data = _fit_data(args)
    if data.problems:
        print(
            f"loader: {problem_summary(data.problems)} (first: {data.problems[0]})",
            file=sys.stderr,
        )
    if not data.demos and args.limit != 0 and not args.no_demos:
        why = (
            f"every record was skipped ({problem_summary(data.problems)})"
            if data.problems
            else "the dataset holds none"
        )
        raise CLIError(
            f"no demonstrations in {data.source or args.path}: {why}; nothing was fitted "
            "(--no-demos fits on the tools alone, for retrievers that work without any)"
        )
    print(
        f"fitting {args.retriever} on {plural(len(data.demos), 'demonstration')}, "
        f"{plural(len(data.tools), 'tool')} ...",
        file=sys.stderr,
    )
    with ticking(progress_bar(not args.quiet), f"fit {args.retriever}"):
        retriever.fit(data.demos, data.tools)
    out = retriever.save(args.output)
    print(f"saved {args.retriever} to {out}")
    return 0


_NO_ENCODER = object()


def _check_default_encoders(retriever: ToolRetriever, rid: str) -> None:
    """Check the encoder each part of `retriever` uses by default (no --encoder given)."""
    todo = [retriever]
    while todo:
        part = todo.pop()
        todo.extend(part.parts().values())
        spec = part.get_params().get("encoder", _NO_ENCODER)
        if part.uses_encoder and (spec is None or isinstance(spec, str)):
            check_encoder_option(spec or "default", f"--encoder not given; {rid} uses encoder")


def load_model(args: argparse.Namespace) -> ToolRetriever:
    """The saved retriever at `--model`, with `--encoder` and `--allow-encoder-change`.

    The encoder is checked before the model is read, and an encoder mismatch is reported
    with this command's flags (the library's message names its Python keywords).
    """
    import shlex

    from dtdr_agents.foundation.persistence import EncoderMismatchError
    from dtdr_agents.retrievers import load_retriever

    check_encoder_option(args.encoder)
    try:
        return load_retriever(
            args.model, encoder=args.encoder, allow_encoder_change=args.allow_encoder_change
        )
    except EncoderMismatchError as exc:
        message = exc.describe(
            allow="--allow-encoder-change", encoder=f"--encoder {shlex.quote(exc.fitted)}"
        )
        raise CLIError(message) from None


def cmd_rank(args: argparse.Namespace) -> int:
    """Rank the next tools with a saved retriever."""
    from dtdr_agents.foundation.errors import UnknownToolError
    from dtdr_agents.foundation.selection import TOP_K, select
    from dtdr_agents.foundation.types import as_history
    from dtdr_agents.retrievers.explain import ranking_words

    model = load_model(args)
    try:
        ranking = model.rank(args.query, args.history or (), ignore_unknown=args.ignore_unknown)
    except UnknownToolError as exc:  # the library's message names its keyword, not the flag
        hint = did_you_mean(exc.names, model.tools_.names)
        raise CLIError(
            f"--history names tools that are not in the model's catalogue: "
            f"{', '.join(map(repr, exc.names))}{hint}; --ignore-unknown drops them"
        ) from None
    sel = select(ranking, dataclasses.replace(TOP_K, k=args.k))
    top = ranking.top(args.k)
    if sel.fallback:  # the rows shown are what is selected: the fallback's, not the top k
        chosen = set(sel.names)
        top = [t for t in ranking.top(None) if t.name in chosen]
    if args.json:
        print(
            json.dumps(
                {
                    "query": args.query,
                    "history": list(as_history(args.history)),
                    "fallback": sel.fallback,
                    "fallback_reason": ranking.fallback_reason,
                    "explanation": {
                        k: list(v) if isinstance(v, tuple) else v
                        for k, v in ranking.explanation.items()
                    },
                    "ranking": [
                        {"name": t.name, "probability": t.probability, "rank": t.rank, "why": t.why}
                        for t in top
                    ],
                    "selected": list(sel.names),
                    "selected_by": "fallback_k" if sel.fallback else "k",
                },
                indent=2,
            )
        )
        return 0
    if sel.fallback:
        print(
            f"note: out of distribution ({ranking.fallback_reason}): selected the ranking's "
            f"best {len(sel.names)} tools (fallback_k={TOP_K.fallback_k}), not the top {args.k}"
        )
    left_out = set(getattr(ranking, "replaces", ()))  # what every tool's why leaves out
    shared = {k: v for k, v in ranking.explanation.items() if k in left_out or k == "method"}
    if len(shared) > 1:  # said once
        print(f"note: {ranking_words(shared)}")
    width = max(len(t.name) for t in top)
    for t in top:
        print(f"{t.rank:>3}. {t.name.ljust(width)}  {t.probability:.3f}  {t.why}")
    return 0


def cmd_speed(args: argparse.Namespace) -> int:
    """Speed and memory benchmark of DTDR-C and DTDR-L."""
    from dtdr_agents.evaluation.perf import format_speed, run_speed

    check_encoder_option(args.encoder)
    if args.peers:
        return _speed_peers(args)
    if args.startup:
        return _speed_startup(args)
    if args.catalogue_size:
        return _speed_scale(args)
    origin = _speed_provenance(args)
    figures = run_speed(
        n_demos=args.n_demos,
        n_queries=args.queries,
        encoder=args.encoder,
        seed=args.seed,
        include_text_fit=not args.skip_text_fit,
    )
    figures["provenance"] = origin
    print(format_speed(figures))
    if args.json:
        from dtdr_agents.evaluation.report import write_json

        write_json(args.json, figures)
    return 0


def _speed_provenance(args: argparse.Namespace) -> dict[str, Any]:
    """`provenance` of a speed run, with the machine's load when it started and `--note`."""
    import os
    import shlex

    from dtdr_agents.evaluation.report import provenance

    origin = provenance([args.seed], getattr(args, "argv", None))  # the code that runs
    origin["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    if args.note:  # quoted in the command, so that it can be run again as it stands
        origin["command"] = origin["command"].replace(args.note, shlex.quote(args.note))
        origin["note"] = args.note
    return origin


def _speed_startup(args: argparse.Namespace) -> int:
    """`speed --startup`: the cold start of `dtdr-agents rank`, in fresh processes."""
    import os

    from dtdr_agents.evaluation.perf import ProxyTimer, format_startup, run_startup
    from dtdr_agents.foundation.encoders.onnx import BACKEND_ENV

    origin = _speed_provenance(args)
    if os.environ.get(BACKEND_ENV):  # the backend is part of the command that ran
        origin["command"] = f"{BACKEND_ENV}={os.environ[BACKEND_ENV]} {origin['command']}"
    time_proxy: ProxyTimer | None = None
    if args.mcp:
        try:
            from mcp_dtdr.startup import time_proxy
        except ImportError as exc:
            raise CLIError(
                f"--mcp needs the MCP SDK ({exc}): pip install 'dtdr-agents[mcp]'"
            ) from exc
    figures = run_startup(
        args.model,
        repeats=args.repeats,
        encoder=args.encoder,
        seed=args.seed,
        time_proxy=time_proxy,
    )
    figures["provenance"] = origin
    print(format_startup(figures))
    if args.json:
        from dtdr_agents.evaluation.report import write_json

        write_json(args.json, figures)
    return 0


def _speed_peers(args: argparse.Namespace) -> int:
    """`speed --peers`: hybrid, graph-tool-call and bigtool's store search, per step."""
    from dtdr_agents.datasets import load_train_test
    from dtdr_agents.evaluation.perf import format_peers, load_peer_factory, run_peers
    from dtdr_agents.evaluation.report import provenance, write_json

    origin = provenance([args.seed], getattr(args, "argv", None))  # the code that runs
    try:
        make_peers = load_peer_factory()
    except ImportError as exc:
        raise CLIError(str(exc)) from exc
    dataset = args.dataset or "demo"
    with flag_words():  # the loader's errors name its keywords: say the flags
        try:
            train, test = load_train_test(
                dataset, args.path, seed=args.seed, skip_bad=args.skip_bad, limit=args.limit
            )
        except (FileNotFoundError, ValueError) as exc:
            raise CLIError(str(exc)) from exc
    try:
        figures = run_peers(
            train.demos,
            test.demos,
            train.tools,
            make_peers=make_peers,
            dataset=train.name,
            encoder=args.encoder,
            k=args.k,
            n_queries=args.queries,
            seed=args.seed,
        )
    except ValueError as exc:
        raise CLIError(str(exc)) from exc
    figures["provenance"] = origin
    print(format_peers([(args.json or "(not written)", figures)]))
    if args.json:
        write_json(args.json, figures)
    return 0


def _speed_scale(args: argparse.Namespace) -> int:
    """`speed --catalogue-size`: the hybrid's fit, index and per-step latency by catalogue size."""
    from dtdr_agents.evaluation.perf import SCALE_BLAS_THREADS, format_scale, run_scale

    try:
        sizes = [int(s) for s in split_ids(args.catalogue_size, ())]
    except ValueError as exc:
        raise CLIError(f"--catalogue-size must be integers like 1000,10000: {exc}") from exc
    origin = _speed_provenance(args)
    try:
        figures = run_scale(
            sizes,
            datasets_dir=args.datasets,
            encoder=args.encoder,
            cache_dir=None if args.no_cache else (args.cache_dir or default_cache_dir()),
            n_queries=args.queries,
            seed=args.seed,
            blas_threads=SCALE_BLAS_THREADS if args.blas_threads is None else args.blas_threads,
        )
    except (FileNotFoundError, ValueError) as exc:
        raise CLIError(str(exc)) from exc
    figures["provenance"] = origin
    print(format_scale(figures))
    if args.json:
        from dtdr_agents.evaluation.report import write_json

        write_json(args.json, figures)
    return 0


def add_commands(sub: Any) -> None:
    """Register `demo`, `fit`, `rank` and `speed`."""
    demo = sub.add_parser(
        "demo", help="fit DR, LR, DTDR-C, DTDR-L and hybrid on embedded data and compare"
    )
    demo.add_argument("--json", help="also write the results as JSON to this file")
    demo.add_argument(
        "--n", type=int, default=2400, help="demonstrations to generate (default 2400)"
    )
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument(
        "--seeds",
        type=positive_int,
        default=1,
        help="draw the split and fit this many times (--seed, --seed + 1, ...) and report means "
        "with 95%% bootstrap intervals; the published demo table uses 3 (default 1)",
    )
    demo.add_argument(
        "--encoder",
        default="default",
        help="'default' (MiniLM, offline), 'tfidf', a model name or path",
    )
    demo.add_argument(
        "--retrievers", help=f"comma-separated ids (default {','.join(DEMO_RETRIEVERS)})"
    )
    demo.add_argument("--cache-dir", help="on-disk embedding cache folder (default: none)")
    demo.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    demo.set_defaults(func=cmd_demo)

    fit = sub.add_parser("fit", help="fit a retriever on a dataset and save it to a folder")
    fit.add_argument(
        "--dataset",
        help="dataset id (jsonl, taskbench, sealtools, nestful, ...), or 'store': the run store "
        "at --path URL (failed runs left out), checked against the --tools catalogue",
    )
    fit.add_argument("--path", help="dataset file or folder (a store URL for --dataset store)")
    fit.add_argument("--tools", help="tools file (JSON list or JSONL) for --dataset jsonl")
    fit.add_argument(
        "--no-demos",
        action="store_true",
        help="fit on the --tools catalogue alone, with no demonstration: a zero-shot model "
        "(hybrid ranks from the request and the catalogue) to start with",
    )
    fit.add_argument(
        "--infer-tools",
        action="store_true",
        help="--dataset jsonl without --tools: build the catalogue from the call names (no "
        "descriptions: ranking then rests on the demonstrations alone)",
    )
    fit.add_argument("--retriever", default="hybrid", help="retriever id (default hybrid)")
    fit.add_argument(
        "--encoder",
        help="'default' (MiniLM, offline), 'tfidf', a model name or a local model folder "
        "(default: the retriever's default)",
    )
    fit.add_argument(
        "--param", action="append", metavar="KEY=VALUE", help="retriever parameter (repeatable)"
    )
    fit.add_argument(
        "--skip-bad", action="store_true", help="skip malformed lines instead of stopping"
    )
    fit.add_argument(
        "--limit",
        type=non_negative_int,
        help="use only the first N demonstrations (0: the dataset's catalogue alone)",
    )
    fit.add_argument("-o", "--output", required=True, help="model folder to write")
    fit.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    fit.set_defaults(func=cmd_fit)

    rank = sub.add_parser("rank", help="rank the next tools with a saved model")
    rank.add_argument("--model", required=True, help="model folder written by `fit`")
    rank.add_argument("--query", required=True, type=non_empty)
    rank.add_argument("--history", default="", help="comma-separated tools called so far")
    rank.add_argument("-k", type=positive_int, default=5, help="how many to show (default 5)")
    rank.add_argument(
        "--encoder",
        help="encoder to use instead of the recorded one; its id must match unless "
        "--allow-encoder-change ('default', 'tfidf', a model name or a local model folder)",
    )
    rank.add_argument(
        "--allow-encoder-change",
        action="store_true",
        help="accept an --encoder whose id differs from the one the model was fitted with",
    )
    rank.add_argument("--ignore-unknown", action="store_true", help="drop unknown history names")
    rank.add_argument("--json", action="store_true", help="print JSON")
    rank.set_defaults(func=cmd_rank)

    speed = sub.add_parser(
        "speed", help="speed and memory benchmark (fit time, rank latency, peak RSS)"
    )
    speed.add_argument("--n-demos", type=int, default=10000)
    speed.add_argument("--queries", type=int, default=300, help="test queries to time")
    speed.add_argument(
        "--encoder", default="default", help="'default' (MiniLM, offline), 'tfidf', a model name"
    )
    speed.add_argument("--seed", type=int, default=0)
    speed.add_argument(
        "--skip-text-fit", action="store_true", help="skip fitting the (slow) text-history DTDR-L"
    )
    speed.add_argument(
        "--catalogue-size",
        help="comma-separated catalogue sizes (e.g. 1000,10000,100000): time the hybrid "
        "retriever on real Seal-Tools + ToolRet tools expanded by seeded variations",
    )
    speed.add_argument(
        "--datasets",
        default="../shared/datasets",
        help="folder holding sealtools/ and toolret/ (for --catalogue-size)",
    )
    speed.add_argument("--cache-dir", help="embedding cache folder (for --catalogue-size)")
    speed.add_argument(
        "--blas-threads",
        type=non_negative_int,
        help="--catalogue-size: BLAS threads while the steps are timed; 0 leaves the library's "
        "default (default: `SCALE_BLAS_THREADS` of dtdr_agents.evaluation.perf, one)",
    )
    speed.add_argument(
        "--note", help="a note on the machine (e.g. other work running) kept in the JSON"
    )
    speed.add_argument("--no-cache", action="store_true", help="no on-disk embedding cache")
    speed.add_argument(
        "--startup",
        action="store_true",
        help="time the cold start of `dtdr-agents rank` instead: fresh processes, wall time, p50",
    )
    speed.add_argument(
        "--model",
        help="saved model for --startup (default: hybrid fitted on 200 generated requests)",
    )
    speed.add_argument(
        "--repeats", type=positive_int, default=5, help="processes per --startup figure (5)"
    )
    speed.add_argument(
        "--mcp",
        action="store_true",
        help="with --startup: also time the MCP proxy over stdio on the model, from its start "
        "to the answers to initialize and to the first set_task (needs the mcp extra)",
    )
    speed.add_argument(
        "--peers",
        action="store_true",
        help="time hybrid, graph-tool-call's retrieve and a langgraph-bigtool store search per "
        "step instead, interleaved in one process, with the same encoder "
        "(pip install 'dtdr-agents[langgraph,peer]')",
    )
    speed.add_argument(
        "--dataset", help="dataset id for --peers (default demo: the embedded demo data)"
    )
    speed.add_argument("--path", help="dataset file or folder for --peers")
    speed.add_argument(
        "--skip-bad", action="store_true", help="--peers: skip malformed dataset lines"
    )
    speed.add_argument(
        "--limit", type=positive_int, help="--peers: use only the first N samples of the dataset"
    )
    speed.add_argument(
        "-k", type=positive_int, default=5, help="tools a --peers peer returns per step (5)"
    )
    speed.add_argument("--json", help="also write the figures as JSON")
    speed.set_defaults(func=cmd_speed)
