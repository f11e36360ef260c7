"""`dtdr-agents e2e`: end-to-end function-calling evaluation against an OpenAI-compatible API."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from dtdr_agents.cli._common import (
    CLIError,
    add_plan_subset_arguments,
    add_split_arguments,
    load_split,
    non_negative_int,
    plan_subset,
    positive_int,
    split_ids,
)

DEFAULT_RETRIEVERS = ("none", "dr", "lr", "dtdr-c", "dtdr-l")
"""The methods of the DTDR paper's Table 3 (``none`` = No ICL)."""

DEFAULT_MODES = ("no_icl", "hard_weighted")
"""Table 3's setting: weighted hard masking, and the No-ICL baseline."""

NEEDS_ENDPOINT = (
    "the end-to-end evaluation needs an OpenAI-compatible chat endpoint: pass --base-url URL "
    "--model NAME (e.g. --base-url http://localhost:11434/v1 --model qwen3:4b for Ollama), or "
    "--dry-run to count the calls and prompt tokens offline"
)


def _step_cache_path(args: argparse.Namespace, dataset: str) -> Path | None:
    if args.no_step_cache:
        return None
    if args.step_cache:
        return Path(args.step_cache)
    if args.json:
        return Path(f"{args.json}.steps.jsonl")
    from dtdr_agents.foundation.encoders import default_cache_dir

    model = re.sub(r"[^A-Za-z0-9_.-]", "_", args.model or "model")
    return default_cache_dir() / "e2e" / f"{dataset}-{model}.jsonl"


def _uncommitted() -> list[str] | None:
    """Package files that differ from the recorded commit (None: not a git checkout)."""
    import subprocess

    here = Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return [line[3:] for line in out.stdout.splitlines() if line.strip()]


def _check_replay(args: argparse.Namespace) -> None:
    if args.dry_run:
        raise CLIError("--replay and --dry-run exclude each other (a dry run asks nothing either)")
    if args.base_url:
        raise CLIError("--replay sends no request: drop --base-url (or drop --replay to run)")
    if not args.model:
        raise CLIError("--replay needs --model: the model name the step cache was written with")
    if args.no_step_cache:
        raise CLIError("--replay reads every answer from the step cache: drop --no-step-cache")


def _check_cache_only(args: argparse.Namespace) -> str | None:
    """The cache-only action asked for (--check-prompts, --record-prompts), its options checked."""
    flags = [
        f
        for f, on in (
            ("--check-prompts", args.check_prompts),
            ("--record-prompts", args.record_prompts),
        )
        if on
    ]
    if not flags:
        return None
    if len(flags) > 1 or args.replay or args.dry_run or args.base_url:
        raise CLIError(
            f"{flags[0]} reads the step cache and sends nothing: use it without --replay, "
            "--dry-run, --base-url or the other of --check-prompts and --record-prompts"
        )
    if not args.model or args.no_step_cache:
        raise CLIError(
            f"{flags[0]} needs --model and the step cache the run wrote (its keys hold both)"
        )
    return flags[0]


def _cache_only(action: str, plan: Any, cache: Any, model: str) -> int:
    """Run --check-prompts (exit 1 when a prompt changed or has no answer) or --record-prompts."""
    from dtdr_agents.evaluation.e2e.harness import (
        check_prompts,
        format_prompt_check,
        record_prompts,
    )

    if action == "--record-prompts":
        n = record_prompts(plan, cache, model)
        print(
            f"step cache {cache.path}: recorded the prompt of {n} older row(s) whose key "
            "this commit rebuilds"
        )
        return 0
    check = check_prompts(plan, cache, model)
    print(format_prompt_check(check))
    return 1 if check["changed"] or check["missing"] else 0


def cmd_e2e(args: argparse.Namespace) -> int:
    """Run (or dry-run, or replay from the step cache, or check its prompts) the evaluation."""
    cache_only = _check_cache_only(args)
    if args.replay:
        _check_replay(args)
    elif not args.dry_run and not args.base_url and not cache_only:
        raise CLIError(NEEDS_ENDPOINT)
    if args.base_url and not args.model:
        raise CLIError("--model is required with --base-url (the model name the server serves)")
    if args.concurrency < 1 or args.k < 1 or args.max_retries < 0 or args.timeout <= 0:
        raise CLIError("--concurrency and --k must be >= 1, --max-retries >= 0, --timeout > 0")
    if not 0.0 <= args.max_error_rate <= 1.0:  # NaN fails this too
        raise CLIError(f"--max-error-rate must be in [0, 1], got {args.max_error_rate}")
    from dtdr_agents.cli.bench import first_demos
    from dtdr_agents.evaluation.e2e import (
        EndpointUnreachableError,
        ReplayChat,
        StepCache,
        StepNotCachedError,
        dry_run_report,
        format_e2e_markdown,
        plot_e2e,
        prepare_e2e,
        run_e2e,
    )
    from dtdr_agents.evaluation.e2e.protocol import split_spec
    from dtdr_agents.evaluation.report import provenance, write_json
    from dtdr_agents.foundation.encoders import default_cache_dir, get_encoder
    from dtdr_agents.foundation.errors import EncoderUnavailableError
    from dtdr_agents.runtime.prompting import get_token_counter

    retrievers = split_ids(args.retrievers, DEFAULT_RETRIEVERS)
    modes = split_ids(args.modes, DEFAULT_MODES)
    try:
        zero_shot = [r for r in retrievers if split_spec(r)[1]]
    except ValueError as exc:
        raise CLIError(f"--retrievers: {exc}") from exc
    origin = provenance([args.seed], getattr(args, "argv", None))
    origin["uncommitted"] = _uncommitted()  # the code that ran is the commit plus these
    train, test = load_split(args)
    test = plan_subset(
        test,
        first=args.test_limit,
        sample=args.test_sample,
        seed=args.seed,
        first_flag="--test-limit",
    )
    zero_train = first_demos(train, test, 0)[0] if zero_shot else None
    cache_dir = None if args.no_cache else (args.cache_dir or default_cache_dir())
    encoder = get_encoder(args.encoder, cache_dir=cache_dir)
    print(
        f"{train.name}: {len(train.demos)} demonstrations, {len(test.demos)} test plans, "
        f"{len(train.tools)} tools, encoder {encoder.id}",
        file=sys.stderr,
    )
    chat: Any = None
    if args.replay:
        chat = ReplayChat(args.model)
    elif not args.dry_run and not cache_only:
        from dtdr_agents.foundation.chat import OpenAIChat
        from dtdr_agents.foundation.retry import RetryPolicy

        chat = OpenAIChat(
            args.model,
            base_url=args.base_url,
            api_key=args.api_key,
            temperature=args.temperature,
            max_tokens=args.max_tokens,
            retry=RetryPolicy(max_retries=args.max_retries, timeout=args.timeout),
        )
    try:
        counter = get_token_counter(args.tokens)
        plan = prepare_e2e(
            train,
            test,
            retrievers,
            modes,
            encoder=encoder,
            seed=args.seed,
            k=args.k,
            counter=counter,
            chat_model=None if args.replay else chat,  # lim asks the same model for ideal tools
            log=lambda msg: print(msg, file=sys.stderr),
            zero_train=zero_train,
            max_prompt_tokens=args.max_prompt_tokens,
        )
    except (ValueError, EncoderUnavailableError) as exc:
        raise CLIError(str(exc)) from exc
    if not plan.cells:
        reasons = [f"{rid}: {why}" for rid, why in plan.skipped.items()]
        reasons += [f"{c['retriever']}/{c['mode']}: {c['reason']}" for c in plan.skipped_cells]
        raise CLIError(f"no retriever could run ({'; '.join(reasons)})")
    cache_path = _step_cache_path(args, train.name)
    cache = StepCache(cache_path) if cache_path is not None else None
    if cache is not None and cache.skipped_lines:
        print(
            f"step cache {cache_path}: skipped {cache.skipped_lines} unreadable line(s)",
            file=sys.stderr,
        )
    if cache_only:
        assert cache is not None  # _check_cache_only refused --no-step-cache
        return _cache_only(cache_only, plan, cache, args.model)
    if chat is None:
        report = dry_run_report(plan, model=args.model, cache=cache)
    else:
        from dtdr_agents.foundation.progress import progress_bar

        if cache is not None:
            print(f"step cache {cache_path} ({len(cache)} steps cached)", file=sys.stderr)
        try:
            report = run_e2e(
                plan,
                chat,
                cache=cache,
                concurrency=args.concurrency,
                progress=progress_bar(not args.quiet and not args.replay),
                tool_choice=None if args.tool_choice == "unset" else args.tool_choice,
                text_ends_plan=not args.strict_end,
                stop_on_unreachable=args.on_unreachable == "stop",
                n_boot=args.n_boot,
            )
        except (ImportError, StepNotCachedError, EndpointUnreachableError) as exc:
            raise CLIError(str(exc)) from exc  # ImportError: the openai package is an extra
        if report.get("replayed_changed_prompts"):
            print(
                f"replay: {report['replayed_changed_prompts']} step(s) answered a prompt that "
                "differs from this commit's (the recorded prompt is used; --check-prompts "
                "lists them)",
                file=sys.stderr,
            )
    report["test_limit"] = args.test_limit
    report["test_sample"] = args.test_sample
    report["provenance"] = origin
    print(format_e2e_markdown(report))
    if args.json:
        write_json(args.json, report)
        print(f"wrote {args.json}", file=sys.stderr)
    if args.plot:
        plot_e2e(report, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    results = report["results"]
    errors = sum(
        int(r.get("n_errors") or 0) + int(r.get("n_argument_errors") or 0) for r in results
    )
    endpoint = sum(
        int(r.get("n_endpoint_errors") or 0)
        + int((r.get("argument_errors") or {}).get("endpoint", 0))
        for r in results
    )
    steps = sum(int(r.get("n_steps") or 0) for r in results)
    if errors:
        print(
            f"{errors} step(s) got no answer after their retries, for the function or its "
            f"arguments ({endpoint} endpoint fault(s): an HTTP 200 that was not a completion); "
            "they are not cached: run again to retry them",
            file=sys.stderr,
        )
    rate = errors / steps if steps else 0.0
    return 1 if errors and rate > args.max_error_rate else 0


def add_commands(sub: Any) -> None:
    """Register `e2e`."""
    from dtdr_agents.evaluation.e2e import E2E_MODES

    e2e = sub.add_parser(
        "e2e",
        help="end-to-end function calling: does the retrieval make a model call the right tool?",
        description="Teacher-forced per-step evaluation of a chat model behind an "
        "OpenAI-compatible endpoint (DTDR paper, Section 5): FSA, SR (function selection, and "
        "the paper's SR with parameter filling where the dataset records arguments), "
        "end-of-plan accuracy, prompt tokens, latency, unbound calls, per (retriever, mode).",
    )
    add_split_arguments(e2e)
    e2e.add_argument(
        "--max-error-rate",
        type=float,
        default=0.0,
        help="exit 0 while at most this share of steps failed after their retries (default 0: "
        "any failed step exits 1)",
    )
    e2e.add_argument(
        "--retrievers",
        help=f"comma-separated ids; 'none' is No ICL (default {','.join(DEFAULT_RETRIEVERS)}); "
        "an id ending in @0demos (e.g. hybrid@0demos) is that retriever fitted on no "
        "demonstrations (as `bench --n-demos 0`) with prompts that carry no example "
        "demonstration either: a new user's first run, reported as its own row",
    )
    add_plan_subset_arguments(e2e, first="--test-limit")
    e2e.add_argument(
        "--max-prompt-tokens",
        type=positive_int,
        metavar="N",
        help="refuse every (retriever, mode) cell with a prompt over N tokens (by --tokens): "
        "not run, reported as skipped with the measured sizes (e.g. all tools of a large "
        "catalogue past the model's context)",
    )
    e2e.add_argument(
        "--replay",
        action="store_true",
        help="no endpoint: every answer comes from the step cache (--model names the cached "
        "model), each step's for the prompt the cache recorded there (bound tools, mode text), "
        "even where this commit's retrievers give another; the first step missing from it is "
        "an error naming it",
    )
    e2e.add_argument(
        "--check-prompts",
        action="store_true",
        help="no endpoint: count the steps whose prompt at this commit differs from the one "
        "the step cache answered (a --replay uses the recorded one) or has no answer; exit 1 "
        "when any does",
    )
    e2e.add_argument(
        "--record-prompts",
        action="store_true",
        help="no endpoint: add the prompt (bound tools, mode text) to step-cache rows written "
        "before rows recorded it, where this commit builds the prompt of their key; the "
        "others are left as they are",
    )
    e2e.add_argument(
        "--on-unreachable",
        choices=("stop", "record"),
        default="stop",
        help="when a step's endpoint stays unreachable after its retries: stop the run with "
        "an error (default; answered steps stay in the step cache) or record the step as "
        "failed and go on",
    )
    e2e.add_argument(
        "--n-boot",
        type=non_negative_int,
        default=2000,
        help="bootstrap replicates of the intervals over test plans (default 2000)",
    )
    e2e.add_argument(
        "--modes",
        help=f"comma-separated, of {','.join(E2E_MODES)} (default {','.join(DEFAULT_MODES)})",
    )
    e2e.add_argument("--k", type=int, default=5, help="retrieved tools per step (default 5)")
    e2e.add_argument("--encoder", default="default")
    e2e.add_argument("--cache-dir", help="embedding cache folder")
    e2e.add_argument("--no-cache", action="store_true", help="no on-disk embedding cache")
    e2e.add_argument(
        "--tokens",
        default="auto",
        help="token counter: auto (tiktoken if its encoding loads, else the MiniLM WordPiece "
        "tokenizer, else chars/4), tiktoken, wordpiece, approx",
    )
    e2e.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
    e2e.add_argument("--model", help="model name served by the endpoint")
    e2e.add_argument("--api-key", help="API key (default $OPENAI_API_KEY; local servers need none)")
    e2e.add_argument("--concurrency", type=int, default=4, help="requests in flight (default 4)")
    e2e.add_argument("--timeout", type=float, default=60.0, help="seconds per request (default 60)")
    e2e.add_argument("--max-retries", type=int, default=4, help="retries on 429/5xx/time-outs")
    e2e.add_argument("--temperature", type=float, default=0.0)
    e2e.add_argument("--max-tokens", type=int, help="answer token limit (default: the server's)")
    e2e.add_argument(
        "--tool-choice",
        default="auto",
        choices=("auto", "required", "unset"),
        help="tool_choice sent with each request ('unset' sends none; default auto)",
    )
    e2e.add_argument(
        "--strict-end", action="store_true", help="a text answer never counts as end-of-plan"
    )
    e2e.add_argument(
        "--step-cache",
        help="JSONL file of answered steps, for resuming (default: <json>.steps.jsonl, or the "
        "dtdr-agents cache folder)",
    )
    e2e.add_argument("--no-step-cache", action="store_true", help="do not cache steps")
    e2e.add_argument("--json", help="write the report as JSON (`dtdr-agents report` reads it)")
    e2e.add_argument("--plot", help="write a PNG of FSA against prompt tokens per mode")
    e2e.add_argument(
        "--dry-run",
        action="store_true",
        help="count the calls and prompt tokens offline and list the parameter-filling "
        "prompts (no endpoint needed)",
    )
    e2e.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    e2e.set_defaults(func=cmd_e2e)


__all__ = ["DEFAULT_MODES", "DEFAULT_RETRIEVERS", "add_commands", "cmd_e2e"]
