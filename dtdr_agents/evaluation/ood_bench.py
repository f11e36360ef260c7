"""How often a retriever flags a request as out of distribution, in and out of distribution.

Two shares per dataset, through `rank` (`Ranking.fallback`):

* in-distribution: every step of every held-out demonstration (the teacher-forced history),
  for the retriever fitted on the other demonstrations, and for the same retriever fitted
  with no demonstration (the catalogue alone);
* unrelated: generated requests that no catalogue serves (`unrelated_requests`: gibberish
  words, words of other scripts, emoji), at their first step.

Run ``python -m dtdr_agents.evaluation.ood_bench [--taskbench DIR]``; the benchmark test
``tests/test_hybrid_ood.py`` runs it and checks the targets (at most 2% of in-distribution
steps flagged, at least 90% of unrelated requests).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.retrievers import make_retriever
from dtdr_agents.retrievers.base import ToolRetriever

UNRELATED_KINDS = ("gibberish", "other scripts", "emoji")
"""The kinds of `unrelated_requests`, in the order they alternate."""

_SCRIPTS = (
    (0x4E00, 0x9FFF),  # CJK ideographs
    (0x0400, 0x04FF),  # Cyrillic
    (0x0600, 0x06FF),  # Arabic
    (0x0900, 0x097F),  # Devanagari
    (0x0370, 0x03FF),  # Greek
    (0x05D0, 0x05EA),  # Hebrew
    (0x0E01, 0x0E3A),  # Thai
    (0xAC00, 0xD7A3),  # Hangul
)
_EMOJI = tuple(chr(c) for c in range(0x1F300, 0x1F64F))
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def unrelated_requests(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """`n` seeded requests no tool catalogue serves, as ``(kind, text)``, kinds alternating."""
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    for i in range(n):
        kind = UNRELATED_KINDS[i % len(UNRELATED_KINDS)]
        if kind == "gibberish":
            words = ("".join(rng.choices(_LETTERS, k=rng.randint(3, 9))) for _ in range(12))
            text = " ".join(list(words)[: rng.randint(2, 10)])
        elif kind == "other scripts":
            lo, hi = rng.choice(_SCRIPTS)
            count = rng.randint(2, 8)
            text = " ".join(
                "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(2, 7)))
                for _ in range(count)
            )
        else:
            text = " ".join(
                "".join(rng.choices(_EMOJI, k=rng.randint(1, 4))) for _ in range(rng.randint(1, 6))
            )
        out.append((kind, text))
    return out


@dataclass(frozen=True)
class OODShares:
    """Out-of-distribution flags of one retriever on one dataset.

    Attributes:
        dataset: The dataset's name.
        retriever: The retriever id.
        n_train: Demonstrations it was fitted on.
        in_steps: In-distribution steps ranked.
        in_flagged: Of those, the steps flagged.
        unrelated: Unrelated requests ranked.
        unrelated_flagged: Of those, the requests flagged.
        by_kind: Flagged / ranked unrelated requests per kind.
    """

    dataset: str
    retriever: str
    n_train: int
    in_steps: int
    in_flagged: int
    unrelated: int
    unrelated_flagged: int
    by_kind: dict[str, tuple[int, int]]

    @property
    def in_share(self) -> float:
        """Share of in-distribution steps flagged."""
        return self.in_flagged / self.in_steps if self.in_steps else 0.0

    @property
    def unrelated_share(self) -> float:
        """Share of unrelated requests flagged."""
        return self.unrelated_flagged / self.unrelated if self.unrelated else 0.0


def measure(
    retriever: ToolRetriever,
    test: Sequence[Demonstration],
    *,
    dataset: str,
    n_train: int,
    n_unrelated: int = 300,
    seed: int = 0,
) -> OODShares:
    """Rank every step of `test` and `n_unrelated` unrelated requests with a fitted `retriever`."""
    flagged = steps = 0
    for demo in test:
        for step in demo.steps():
            steps += 1
            flagged += retriever.rank(demo.query, step.history).fallback
    by_kind: dict[str, tuple[int, int]] = {k: (0, 0) for k in UNRELATED_KINDS}
    for kind, text in unrelated_requests(n_unrelated, seed):
        hit, seen = by_kind[kind]
        by_kind[kind] = (hit + retriever.rank(text).fallback, seen + 1)
    return OODShares(
        dataset=dataset,
        retriever=str(retriever.retriever_id),
        n_train=n_train,
        in_steps=steps,
        in_flagged=flagged,
        unrelated=n_unrelated,
        unrelated_flagged=sum(h for h, _ in by_kind.values()),
        by_kind=by_kind,
    )


def run(
    datasets: Sequence[tuple[str, Sequence[Demonstration], Sequence[Demonstration], Toolset]],
    *,
    retriever: str = "hybrid",
    params: dict[str, Any] | None = None,
    zero_demos: bool = True,
) -> list[OODShares]:
    """`measure` per ``(name, train, test, tools)``: fitted on train, and on no demonstration."""
    out = []
    for name, train, test, tools in datasets:
        fits = [list(train), []] if zero_demos else [list(train)]
        for demos in fits:
            model = make_retriever(retriever, **(params or {})).fit(demos, tools)
            out.append(measure(model, test, dataset=name, n_train=len(demos)))
    return out


def format_shares(rows: Sequence[OODShares]) -> str:
    """A plain-text table of `rows`."""
    lines = [
        f"{'dataset':<10} {'retriever':<9} {'demos':>5}  in-distribution flagged   "
        "unrelated flagged   (gibberish / other scripts / emoji)"
    ]
    for r in rows:
        kinds = " / ".join(f"{h}/{n}" for h, n in r.by_kind.values())
        lines.append(
            f"{r.dataset:<10} {r.retriever:<9} {r.n_train:>5}  "
            f"{r.in_flagged:>4}/{r.in_steps:<5} = {r.in_share:6.2%}     "
            f"{r.unrelated_flagged:>3}/{r.unrelated:<3} = {r.unrelated_share:6.2%}   ({kinds})"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure on the demo data and, with ``--taskbench DIR``, a TaskBench domain."""
    from dtdr_agents.datasets import load_train_test

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--taskbench", help="a TaskBench domain folder (e.g. data_huggingface)")
    parser.add_argument("--retriever", default="hybrid")
    parser.add_argument("--encoder", default=None, help="encoder spec (default: the retriever's)")
    parser.add_argument(
        "--params",
        default="{}",
        help="more retriever hyperparameters as JSON, e.g. '{\"select_l2\": false}'",
    )
    parser.add_argument(
        "--demo-n", type=int, default=2400, help="demonstrations of the generated demo data"
    )
    parser.add_argument("--json", help="also write the figures as JSON to this file")
    args = parser.parse_args(argv)
    sets = []
    for name, path in (("demo", None), ("taskbench", args.taskbench)):
        if name == "taskbench" and path is None:
            continue
        extra = {"n": args.demo_n} if name == "demo" else {}
        train, test = load_train_test(name, path, **extra)
        sets.append((name, train.demos, test.demos, train.tools))
    params = dict(json.loads(args.params))
    if args.encoder is not None:
        params["encoder"] = args.encoder
    rows = run(sets, retriever=args.retriever, params=params)
    print(format_shares(rows))
    if args.json:
        from dtdr_agents.evaluation.report import write_json

        rows_json = [
            {**asdict(r), "in_share": r.in_share, "unrelated_share": r.unrelated_share}
            for r in rows
        ]
        write_json(args.json, {"rows": rows_json})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["UNRELATED_KINDS", "OODShares", "format_shares", "measure", "run", "unrelated_requests"]
