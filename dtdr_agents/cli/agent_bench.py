"""`dtdr-agents agent-bench`: live agents against all tools, bigtool, an LLM selector, search."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dtdr_agents.cli._common import (
    CLIError,
    add_plan_subset_arguments,
    add_split_arguments,
    load_split,
    plan_subset,
    positive_int,
    split_ids,
)

NEEDS_ENDPOINT = (
    "the live-agent benchmark needs an OpenAI-compatible chat endpoint: pass --base-url URL "
    "(and --model-name NAME), or --replay to rebuild the figures from the step cache"
)


CONTESTANT_GROUP = "dtdr_agents.agent_bench"
"""Entry-point group naming the module that provides the contestants (`CONTESTANTS`,
`make_contestants`); `langchain_dtdr.agent_bench` registers itself there, so the core names
no framework package."""


def _contestant_provider() -> tuple[Any, Any]:
    """(`CONTESTANTS`, `make_contestants`) of the installed contestant provider."""
    from importlib.metadata import entry_points

    found = list(entry_points(group=CONTESTANT_GROUP, name="contestants"))
    hint = "pip install 'dtdr-agents[langchain,openai,bench]'"
    if not found:
        raise CLIError(f"agent-bench runs its contestants on LangChain: {hint}")
    try:
        module = found[0].load()
    except ImportError as exc:
        raise CLIError(f"agent-bench runs its contestants on LangChain: {hint} ({exc})") from exc
    return module.CONTESTANTS, module.make_contestants


def cmd_agent_bench(args: argparse.Namespace) -> int:
    """Run (or replay) the live-agent benchmark and write its results JSON."""
    from dtdr_agents.cli.bench import first_demos
    from dtdr_agents.evaluation.agent_bench import (
        DEFAULT_CONTESTANTS,
        SYSTEM_PROMPT,
        BenchEndpoint,
        api_split,
        format_agent_bench_markdown,
        results_json,
        run_agent_bench,
    )
    from dtdr_agents.evaluation.e2e import StepCache, StepNotCachedError
    from dtdr_agents.evaluation.report import provenance
    from dtdr_agents.foundation.atomic import atomic_write_text
    from dtdr_agents.foundation.chat import OpenAIChat
    from dtdr_agents.foundation.encoders import default_cache_dir, get_encoder
    from dtdr_agents.foundation.errors import EncoderUnavailableError
    from dtdr_agents.foundation.retry import RetryPolicy
    from dtdr_agents.runtime.tokens import get_token_counter

    if not args.replay and not args.base_url:
        raise CLIError(NEEDS_ENDPOINT)
    names = split_ids(args.contestants, DEFAULT_CONTESTANTS)
    known, make_contestants = _contestant_provider()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise CLIError(f"--contestants: unknown {unknown}; choose from {', '.join(known)}")
    train, test = load_split(args)
    if test.set_valued:
        raise CLIError(f"dataset {train.name!r} is set-valued: a live agent needs ordered plans")
    test = plan_subset(
        test, first=args.plans, sample=args.test_sample, seed=args.seed, first_flag="--plans"
    )
    train, test, _ = api_split(train, test)
    zero_train = first_demos(train, test, 0)[0]
    cache_path = Path(args.step_cache or f"{args.json}.steps.jsonl")
    cache = StepCache(cache_path)
    counter = get_token_counter(args.tokens)
    chat = None
    if not args.replay:
        retry = RetryPolicy(max_retries=args.max_retries, timeout=args.timeout)
        chat = OpenAIChat(
            args.model_name, base_url=args.base_url, api_key=args.api_key, retry=retry
        )
    endpoint = BenchEndpoint(args.model_name, cache, chat, counter=counter)
    try:
        encoder = get_encoder(
            args.encoder, cache_dir=None if args.no_cache else default_cache_dir()
        )
        contestants = make_contestants(
            names,
            endpoint,
            train=train,
            zero_train=zero_train,
            tools=train.tools,
            encoder=encoder,
            k=args.k,
            seed=args.seed,
            system_prompt=SYSTEM_PROMPT,
        )
    except (ValueError, EncoderUnavailableError) as exc:
        raise CLIError(str(exc)) from exc
    print(
        f"{train.name}: {len(train.demos)} demonstrations, {len(test.demos)} test plans, "
        f"{len(train.tools)} tools; contestants {', '.join(names)}; model {args.model_name}"
        f"{' (replay)' if args.replay else ''}",
        file=sys.stderr,
    )
    log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    try:
        runs = run_agent_bench(
            test, contestants, endpoint, max_prompt_tokens=args.max_prompt_tokens, log=log
        )
    except StepNotCachedError as exc:
        raise CLIError(str(exc)) from exc
    meta: dict[str, Any] = {
        "dataset": train.name,
        "model": args.model_name,
        "replay": bool(args.replay),
        "k": args.k,
        "encoder": encoder.id,
        "token_counter": counter.name,
        "n_train": len(train.demos),
        "n_tools": len(train.tools),
        "step_cache": str(cache_path),
        "max_prompt_tokens": args.max_prompt_tokens,
        "provenance": provenance([args.seed]),
    }
    if args.replay:
        meta["replayed_changed_requests"] = endpoint.changed
    report = results_json(runs, names, len(test.demos), meta=meta, seed=args.seed)
    atomic_write_text(args.json, json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(format_agent_bench_markdown(report))
    if endpoint.changed:
        print(
            f"replay: {endpoint.changed} call(s) sent a request body other than the recorded "
            "one (a near tie ranked otherwise here) and got the answer recorded for that call "
            "of the run",
            file=sys.stderr,
        )
    faults = [r for r in runs if r.status == "endpoint_error"]
    if faults:
        print(
            f"error: {len(faults)} run(s) got no answer from the endpoint after the retries "
            f"(first: {faults[0].contestant} on plan {faults[0].plan}: {faults[0].error}); "
            "nothing of them is cached: run again to resume",
            file=sys.stderr,
        )
        return 1
    return 0


def add_commands(sub: Any) -> None:
    """Add the `agent-bench` command."""
    p = sub.add_parser(
        "agent-bench",
        help="live agents: DTDR against all tools, bigtool, an LLM selector and a search tool",
        description=(
            "Run each test plan's request as a live agent loop per contestant (the same chat "
            "model, system prompt and step limit: plan length + 3), with tool results "
            "simulated from the dataset; every model answer is cached by its request body. "
            "See docs/agent-bench.md."
        ),
    )
    add_split_arguments(p)
    p.add_argument(
        "--contestants",
        help="comma-separated, of all-tools, bigtool, llm-selector, search, dtdr, dtdr@0demos, "
        "bm25, dtdr+append (default: all but dtdr+append)",
    )
    p.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1")
    p.add_argument("--model-name", default="local", help="model name sent and cached under")
    p.add_argument("--api-key", help="API key (default $OPENAI_API_KEY; local servers need none)")
    p.add_argument("--json", required=True, help="results JSON to write")
    p.add_argument("--step-cache", help="answer cache (default <json>.steps.jsonl)")
    p.add_argument("--replay", action="store_true", help="answer from the cache only, send nothing")
    add_plan_subset_arguments(p, first="--plans")
    p.add_argument("--k", type=positive_int, default=5, help="tools per selection (default 5)")
    p.add_argument(
        "--max-prompt-tokens",
        type=positive_int,
        help="the model's context: contestants binding every tool do not run where the "
        "all-tools prompt is longer (recorded as 'does not fit' with its size)",
    )
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    p.add_argument("--max-retries", type=int, default=4, help="retries of a failed request")
    p.add_argument("--encoder", default="default", help="encoder of the retrievers and bigtool")
    p.add_argument("--no-cache", action="store_true", help="no on-disk embedding cache")
    p.add_argument("--tokens", default="auto", help="token counter where usage is missing")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_agent_bench)
