"""Hard vs cache-stable (``cache="append"``) binding on TaskBench-HF plans.

Replays the held-out plans through the integration runtime with a scripted plan-following
model (no LLM: at every step the "model" calls the next planned tool) and prints, per binding:
bound-schema tokens per model call, prefix reuse (share of calls whose tools array starts with
the previous call's, what provider prompt caches need) and bound-tool recall (share of plan
steps where a tool the plan allows next was bound).

    python cookbook/cache_append.py --path ../shared/datasets/taskbench_hf_subset

Without ``--path`` it reads ``DTDR_DATASETS/taskbench_hf_subset`` when that environment
variable names the datasets folder, else ``shared/datasets/taskbench_hf_subset`` beside the
repository.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path

from dtdr_agents.datasets import load_train_test
from dtdr_agents.foundation.selection import SelectionPolicy
from dtdr_agents.retrievers import make_retriever
from dtdr_agents.runtime import StepSelector
from dtdr_agents.runtime.prompting import get_token_counter
from dtdr_agents.runtime.replay import replay_plans

DEFAULT_PATH = str(
    Path(os.environ.get("DTDR_DATASETS") or Path(__file__).resolve().parents[2] / "shared/datasets")
    / "taskbench_hf_subset"
)


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="taskbench")
    parser.add_argument("--path", default=DEFAULT_PATH)
    parser.add_argument("--retriever", default="dtdr-c")
    parser.add_argument("--encoder", default="default", help="default (MiniLM) or tfidf")
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--caps", default="10,15", help="cache caps of the append rows")
    parser.add_argument(
        "--threshold",
        default="0",
        help="selection threshold: 0 (the agents' default: drop zero-probability tools) or none",
    )
    parser.add_argument("--limit", type=int, default=None, help="replay at most N test plans")
    args = parser.parse_args(argv)

    train, test = load_train_test(args.dataset, args.path)
    start = time.perf_counter()
    retriever = make_retriever(args.retriever, encoder=args.encoder).fit(train.demos, train.tools)
    fit_s = time.perf_counter() - start
    demos = test.demos[: args.limit] if args.limit else test.demos
    counter = get_token_counter()
    threshold = None if args.threshold.lower() == "none" else float(args.threshold)
    policy = SelectionPolicy(k=args.k, threshold=threshold)
    settings = [("hard", policy)] + [
        (f"append cap={cap}", dataclasses.replace(policy, cache="append", cache_cap=int(cap)))
        for cap in args.caps.split(",")
        if cap.strip()
    ]
    print(
        f"{args.dataset}: {len(train.demos)} train / {len(demos)} replayed plans, "
        f"{len(train.tools)} tools, retriever {args.retriever} ({args.encoder}, "
        f"fit {fit_s:.1f} s), k={args.k}, threshold={threshold}, tokens: {counter.name}; "
        "scripted plan-following model (no LLM)"
    )
    header = (
        "binding          calls  prefix_reuse  tokens/call  uncached/call  tools/call  recall"
        "  prefix_breaks"
    )
    print(header)
    print("-" * len(header))
    rows = []
    for name, step_policy in settings:
        selector = StepSelector(train.tools, retriever, policy=step_policy, token_counter=counter)
        s = replay_plans(selector, demos)
        rows.append({"binding": name, **s.__dict__})
        print(
            f"{name:<15} {s.model_calls:>6}  {s.prefix_reuse or 0:>12.3f}  "
            f"{s.bound_tokens_per_call:>11.1f}  {s.uncached_tokens_per_call:>13.1f}  "
            f"{s.tools_per_call:>10.2f}  "
            f"{s.recall or 0:>6.3f}  {s.prefix_breaks:>13}"
        )
    return rows


if __name__ == "__main__":
    main()
