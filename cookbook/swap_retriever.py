"""The ReAct graph of react_agent.py with the retriever swapped by one constructor argument.

    python cookbook/swap_retriever.py
    python cookbook/swap_retriever.py --retrievers dtdr-c,dtdr-l,dr,lr,bm25,qts

Each retriever id is fitted on the same demonstrations and handed to the same
`create_dtdr_agent` call; the graph, the tools and the model do not change. For every
retriever the script prints the tools bound at each step of the same request, then how often
the next planned tool was among the bound ones.
"""

from __future__ import annotations

import dataclasses
import sys

from _common import base_parser, load_demo, make_chat_model

from dtdr_agents.retrievers import retriever_ids
from dtdr_agents.runtime import DEFAULT_POLICY
from langchain_dtdr.testing import langchain_tools
from langgraph_dtdr import create_dtdr_agent

DEFAULT_RETRIEVERS = ("dtdr-c", "dr", "lr", "bm25", "qts")


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--retrievers",
        default=",".join(DEFAULT_RETRIEVERS),
        help="comma-separated retriever ids (ids not in this installation are skipped)",
    )
    args = parser.parse_args(argv)
    available = set(retriever_ids())
    wanted = [r.strip() for r in args.retrievers.split(",") if r.strip()]
    skipped = [r for r in wanted if r not in available]
    if skipped:
        print(f"skipping retrievers not in this installation: {skipped} (have {sorted(available)})")
    requests = load_demo(args).test[: args.queries]
    scores: dict[str, tuple[int, int]] = {}
    for rid in [r for r in wanted if r in available]:
        demo = load_demo(args, retriever=rid)  # fitted on the same demonstrations
        tools = langchain_tools(demo.tools)
        model = make_chat_model(args, demo.plans(), demo.tools)
        # The one argument that changes between runs: which fitted retriever the graph gets.
        # The scripted model follows the recorded plan whether or not its next tool is bound;
        # on_unbound="allow" lets it go on, so every retriever is scored on the whole plan.
        policy = dataclasses.replace(DEFAULT_POLICY, k=args.k, mode=args.mode, on_unbound="allow")
        app = create_dtdr_agent(model, tools, demo.retriever, policy=policy).compile()
        hits = steps = 0
        print(f"\n##### retriever {rid}: {demo.retriever!r}")
        for request in requests:
            print(f"=== {request.query}\n    recorded plan: {' -> '.join(request.calls)}")
            state = app.invoke({"messages": [("user", request.query)]})
            for note in state["tool_selections"]:
                if note["widened"]:
                    continue
                done = len(note["history"])
                target = request.calls[done] if done < len(request.calls) else None
                mark = ""
                if target is not None:
                    steps += 1
                    hit = target in note["bound"]
                    hits += hit
                    mark = f"   next planned: {target} {'(bound)' if hit else '(NOT bound)'}"
                print(f"  step {done}: bound {note['bound']}{mark}")
        scores[rid] = (hits, steps)
    print("\nnext planned tool among the bound tools:")
    for rid, (hits, steps) in scores.items():
        print(f"  {rid:>8}: {hits}/{steps} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
