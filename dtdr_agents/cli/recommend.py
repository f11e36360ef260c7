"""`dtdr-agents recommend-bench`: TRACC, size error, calibration and latency of tool sets."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from dtdr_agents.cli._common import CLIError, split_ids


def add_commands(sub: Any) -> None:
    """Register `recommend-bench`."""
    cmd = sub.add_parser(
        "recommend-bench",
        help="tool-set recommendation on set-valued data: TRACC, size error, calibration, latency",
    )
    cmd.add_argument("--dataset", required=True, help="rectools, metatool or toolret")
    cmd.add_argument("--path", required=True, help="dataset file or folder")
    cmd.add_argument(
        "--protocol",
        choices=("bench", "ptr"),
        default="bench",
        help="bench: the bench's seeded 70/30 split; ptr: the first 100 queries are the test "
        "set, the rest the history (the PTR code)",
    )
    cmd.add_argument("--retrievers", default="ptr", help="comma-separated ids (default ptr)")
    cmd.add_argument("--ablations", action="store_true", help="PTR's Table 2 ablations")
    cmd.add_argument("--encoder", default="default")
    cmd.add_argument("--seed", type=int, default=0)
    cmd.add_argument("--json", help="write the scores as JSON")
    cmd.add_argument("--chat-base-url", help="OpenAI-compatible endpoint for PTR's Stage 2")
    cmd.add_argument("--chat-model", help="chat model name for PTR's Stage 2")
    cmd.set_defaults(func=cmd_recommend_bench)


def cmd_recommend_bench(args: argparse.Namespace) -> int:
    """Run the recommendation benchmark and print a Markdown table."""
    from dtdr_agents.datasets import load_dataset, load_train_test
    from dtdr_agents.evaluation.recommend_bench import (
        format_scores,
        ptr_protocol_split,
        run_recommend_bench,
    )
    from dtdr_agents.foundation.atomic import atomic_write_text
    from dtdr_agents.foundation.encoders import default_cache_dir, get_encoder

    if args.protocol == "ptr":
        data = load_dataset(args.dataset, args.path)
        train, test = ptr_protocol_split(data.demos)
        tools, name = data.tools, data.name
    else:
        train_set, test_set = load_train_test(args.dataset, args.path, seed=args.seed)
        train, test = list(train_set.demos), list(test_set.demos)
        tools, name = train_set.tools, train_set.name
        if not train_set.set_valued:
            raise CLIError(f"{args.dataset} is not set-valued: recommend-bench scores tool sets")
    encoder = get_encoder(args.encoder, cache_dir=default_cache_dir())
    params: dict[str, Any] = {"encoder": encoder, "seed": args.seed}
    if args.chat_base_url or args.chat_model:
        from dtdr_agents.foundation.chat import OpenAIChat

        params["chat_model"] = OpenAIChat(
            args.chat_model or "gpt-4o-mini", base_url=args.chat_base_url
        )
    print(
        f"{name} (protocol {args.protocol}): {len(train)} demonstrations, {len(test)} test "
        f"requests, {len(tools)} tools, encoder {encoder.id}",
        file=sys.stderr,
    )
    scores = run_recommend_bench(
        train, test, tools, split_ids(args.retrievers, ("ptr",)), ablations=args.ablations, **params
    )
    print(
        f"{name}, protocol {args.protocol}: {len(train)} demonstrations, {len(test)} test requests"
    )
    print(format_scores(scores))
    if args.json:
        report = {
            "dataset": name,
            "protocol": args.protocol,
            "n_train": len(train),
            "n_test": len(test),
            "encoder": encoder.id,
            "scores": [asdict(s) for s in scores],
        }
        atomic_write_text(args.json, json.dumps(report, indent=2) + "\n")
    return 0
