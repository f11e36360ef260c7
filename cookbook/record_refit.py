"""Run -> record -> refit: learn the retriever from your own agent's runs.

    python cookbook/record_refit.py
    python cookbook/record_refit.py --out runs/    # keep runs.jsonl and tools.json

1. Fit DTDR-C on a handful of demonstrations (a weak retriever).
2. Run the agent on new requests in soft-mask mode (every tool bound, the retrieved ones
   named), with a `DTDRRecorderCallback` that appends each finished turn (request and ordered
   tool calls) to ``runs.jsonl``; turns where a tool failed are skipped.
3. Refit on the seed demonstrations plus the recorded runs, in process and with the command
   line (``dtdr-agents fit --dataset jsonl --path runs.jsonl --tools tools.json``).
4. Compare the retrievers on held-out requests (teacher-forced MRR, top-1, recall@k).

Offline, the scripted model plays each request's recorded plan, standing in for a strong
model whose good runs you want to learn from; with --model / --base-url the real model's runs
are recorded instead.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from _common import base_parser, make_chat_model

from dtdr_agents.cli import main as dtdr_cli
from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.evaluation.protocol import evaluate
from dtdr_agents.retrievers import load_retriever, make_retriever
from dtdr_agents.runtime.recording import DemonstrationRecorder
from langchain_dtdr import DTDRRecorderCallback
from langchain_dtdr.testing import langchain_tools
from langgraph_dtdr import create_dtdr_agent


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--seed-demos", type=int, default=20, help="demonstrations fitted first")
    parser.add_argument("--runs", type=int, default=100, help="agent runs to record")
    parser.add_argument("--test", type=int, default=60, help="held-out requests to score")
    parser.add_argument("--out", help="folder for runs.jsonl / tools.json (default: a temp dir)")
    args = parser.parse_args(argv)

    data = make_demo_dataset(args.seed_demos + args.runs + args.test, seed=args.seed)
    seed_demos = list(data.demos[: args.seed_demos])
    requests = data.demos[args.seed_demos : args.seed_demos + args.runs]
    held_out = list(data.demos[args.seed_demos + args.runs :])

    print(f"1. fit dtdr-c on {len(seed_demos)} seed demonstrations")
    before = make_retriever("dtdr-c", encoder=args.encoder).fit(seed_demos, data.tools)

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        runs_path, tools_path = out / "runs.jsonl", out / "tools.json"
        runs_path.unlink(missing_ok=True)
        recorder = DemonstrationRecorder(runs_path, tools=data.tools)
        recorder.write_tools(tools_path, data.tools)
        tools = langchain_tools(data.tools)
        model = make_chat_model(args, {d.query: d.calls for d in requests}, data.tools)
        agent = create_dtdr_agent(model, tools, before, k=args.k, mode="soft").compile()
        callback = DTDRRecorderCallback(recorder)
        print(f"2. run the agent on {len(requests)} new requests, recording to {runs_path}")
        for i, request in enumerate(requests):
            state = agent.invoke({"messages": [("user", request.query)]}, {"callbacks": [callback]})
            if i < 2:
                calls = [r["selected"][:3] for r in state["tool_selections"]]
                print(f"   {request.query}\n     preferred per step: {calls}")
        print(f"   recorded {len(recorder)} runs, skipped {recorder.skipped}")

        print("3. refit on seed demonstrations + recorded runs")
        recorded = recorder.load(tools_path)
        after = make_retriever("dtdr-c", encoder=args.encoder).fit(
            [*seed_demos, *recorded.demos], data.tools
        )
        model_dir = out / "model"
        cli_args = [
            "fit",
            "--dataset",
            "jsonl",
            "--path",
            str(runs_path),
            "--tools",
            str(tools_path),
            "--retriever",
            "dtdr-c",
            "--encoder",
            args.encoder,
            "-o",
            str(model_dir),
        ]
        print(f"   same from the command line: dtdr-agents {' '.join(cli_args)}")
        dtdr_cli(cli_args)
        from_cli = load_retriever(model_dir)

        print(f"4. teacher-forced scores on {len(held_out)} held-out requests")
        for name, retriever in (
            ("seed only", before),
            ("seed + runs", after),
            ("runs only (CLI)", from_cli),
        ):
            m = evaluate(retriever, held_out, ks=(args.k,)).metrics
            print(
                f"   {name:>16}: MRR {m['mrr']:.3f}  top-1 {m['top1']:.3f}  "
                f"recall@{args.k} {m[f'recall@{args.k}']:.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
