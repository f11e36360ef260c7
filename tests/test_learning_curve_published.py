"""The first week on published data (issue 40): a few demonstrations never make `hybrid` worse.

The fast size of the published learning curve (`bench --ablations n_demos`, docs/results):
seed 0, the curve's nested samples of the training split at 0, 1, 2, 5, 10 and 20
demonstrations, scored on the first test requests. At every point, tool-MRR is at least the
zero-demonstration point's, and end-of-plan leads no more tool steps (premature stops) than
there, each within a tolerance far below the dips issue 40 measured (tool-MRR 0.7974 against
0.8456 on NESTFUL at 5 demonstrations; end-of-plan first at 0.3333 of tool steps against
0.0714 at 2).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dtdr_agents.datasets import load_train_test
from dtdr_agents.evaluation.bench import LEARNING_CURVE_SIZES
from dtdr_agents.evaluation.protocol import fit_and_evaluate
from dtdr_agents.retrievers.hybrid import HybridRetriever

SIZES = tuple(s for s in LEARNING_CURVE_SIZES if s <= 20)
TEST_REQUESTS = 80
MRR_TOLERANCE = 0.01
END_FIRST_TOLERANCE = 0.02

DATASETS = {
    "taskbench": ("taskbench_hf_subset", {"skip_bad": True}),
    "nestful": ("nestful", {}),
}


def _curve(encoder: Any, root: Path, name: str) -> dict[int, tuple[float, float]]:
    folder, kwargs = DATASETS[name]
    train, test = load_train_test(name, str(root / folder), seed=0, **kwargs)
    test = dataclasses.replace(test, demos=list(test.demos)[:TEST_REQUESTS])
    demos = list(train.demos)
    order = np.random.default_rng(0).permutation(len(demos))  # as the published curve's
    graph = [list(edge) for edge in test.tool_graph] if test.tool_graph else None
    out = {}
    for size in SIZES:
        sub = [demos[i] for i in sorted(order[:size])]
        retriever = HybridRetriever(encoder=encoder, seed=0, graph=graph)
        summary = fit_and_evaluate(retriever, sub, test.demos, test.tools).summary()
        out[size] = (summary["tool_mrr"], summary["end_first_at_tool_steps"])
    return out


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_a_few_demonstrations_never_make_hybrid_worse(encoder, shared_datasets, name):
    curve = _curve(encoder, shared_datasets, name)
    mrr0, end0 = curve[0]
    dips = {n: v for n, v in curve.items() if v[0] < mrr0 - MRR_TOLERANCE}
    early = {n: v for n, v in curve.items() if v[1] > end0 + END_FIRST_TOLERANCE}
    assert not dips, f"tool-MRR below the 0 point ({mrr0:.4f}): {dips}"
    assert not early, f"end-of-plan first at more tool steps than at 0 ({end0:.4f}): {early}"
