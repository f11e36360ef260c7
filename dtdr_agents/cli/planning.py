"""`dtdr-agents toolqp-speed`: ToolQP's planning overhead with recorded plans (no LLM)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from dtdr_agents.cli._common import CLIError


def cmd_toolqp_speed(args: argparse.Namespace) -> int:
    """Time ToolQP's planning overhead beyond the encoder and print p50 / p99."""
    from dtdr_agents.datasets import load_train_test
    from dtdr_agents.evaluation.report import write_json
    from dtdr_agents.evaluation.toolqp_speed import format_overhead, measure_overhead
    from dtdr_agents.foundation.encoders import default_cache_dir, get_encoder
    from dtdr_agents.retrievers import make_retriever

    if args.queries < 1:
        raise CLIError("--queries must be at least 1")
    train, test = load_train_test(args.dataset, args.path, seed=args.seed, limit=args.limit)
    encoder = get_encoder(args.encoder, cache_dir=None if args.no_cache else default_cache_dir())
    instruction = getattr(test, "instruction", None)
    instructions = {d.query: instruction(d) for d in test.demos} if instruction else {}
    base = make_retriever(args.base, lenient=True, encoder=encoder, seed=args.seed)
    result = measure_overhead(
        train.demos,
        test.demos,
        train.tools,
        base=base,
        instructions={q: i for q, i in instructions.items() if i},
        n_queries=args.queries,
        fusion=args.fusion,
        blas_threads=args.blas_threads or None,
    )
    label = f"{args.dataset} {args.path or ''}".strip()
    print(format_overhead(result, f"{label} (base {args.base})"))
    if args.json:
        summary: dict[str, Any] = {"dataset": label, "base": args.base, **result.summary()}
        write_json(args.json, summary)
        print(f"wrote {args.json}", file=sys.stderr)
        if args.verbose:
            print(json.dumps(summary, indent=2))
    return 0


def add_commands(sub: Any) -> None:
    """Register `toolqp-speed`."""
    speed = sub.add_parser(
        "toolqp-speed",
        help="ToolQP planning overhead (base retrievals + fusion) beyond the encoder, no LLM",
    )
    speed.add_argument("--dataset", default="toolret", help="dataset id (default toolret)")
    speed.add_argument("--path", required=True, help="dataset folder, e.g. toolret/toolink")
    speed.add_argument("--base", default="qts", help="base retriever id (default qts)")
    speed.add_argument("--queries", type=int, default=5, help="recorded queries per request")
    speed.add_argument("--fusion", default="peak", choices=("peak", "rrf"))
    speed.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="BLAS threads while timing (default 1; 0 keeps the library's setting)",
    )
    speed.add_argument("--encoder", default="default")
    speed.add_argument("--limit", type=int, help="use only the first N samples")
    speed.add_argument("--seed", type=int, default=0)
    speed.add_argument("--no-cache", action="store_true", help="no on-disk embedding cache")
    speed.add_argument("--json", help="write the figures as JSON")
    speed.add_argument("-v", "--verbose", action="store_true", help="also print the JSON")
    speed.set_defaults(func=cmd_toolqp_speed)
