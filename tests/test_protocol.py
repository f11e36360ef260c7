"""The protocol with end-of-plan scored apart: tool metrics, the stop decision, intervals."""

from __future__ import annotations

import numpy as np
import pytest

from dtdr_agents import Demonstration, Tool
from dtdr_agents.evaluation.intervals import estimate, paired_difference, verdict
from dtdr_agents.evaluation.protocol import (
    EvalResult,
    ScoredStep,
    evaluate,
    fit_and_evaluate,
    stop_metrics,
)
from dtdr_agents.evaluation.stop_rule import StopRule
from dtdr_agents.foundation.types import END_OF_PLAN
from dtdr_agents.retrievers import make_retriever


def _independent_tool_mrr(model, test) -> float:
    """Mean over tool steps of 1 / rank of the first gold tool, end-of-plan removed."""
    values = []
    for demo in test:
        first = None
        for step in demo.steps():
            ranking = model.rank(demo.query, step.history, ignore_unknown=True)
            if not model.uses_history:  # query-only: one ranking per request
                first = first or ranking
                ranking = first
            gold = step.acceptable - {END_OF_PLAN}
            if not gold:
                continue
            order = [n for n in ranking.ranked_names() if n != END_OF_PLAN]
            values.append(1.0 / (1 + min(order.index(g) for g in gold)))
    return float(np.mean(values))


@pytest.mark.parametrize("rid", ["bm25", "dtdr-c"])
def test_tool_mrr_ranks_tools_alone(rid, encoder, demo_data, demo_split):
    train, test = demo_split[0][:400], demo_split[1][:60]
    model = make_retriever(rid, lenient=True, encoder=encoder)
    result = fit_and_evaluate(model, train, test, demo_data.tools)
    assert result.error is None
    assert result.tool_metrics["tool_mrr"] == pytest.approx(_independent_tool_mrr(model, test))
    n_tool_steps = sum(len(d.calls) for d in test)
    assert result.n_tool_steps == n_tool_steps
    assert result.n_steps == n_tool_steps + len(test)
    assert set(result.tool_metrics) >= {"tool_top1", "tool_f1", "tool_recall@5", "tool_ndcg@10"}


def test_query_only_retrievers_are_judged_by_the_shared_stop_rule(demo_data, demo_split):
    train, test = demo_split[0][:400], demo_split[1][:60]
    bm25 = fit_and_evaluate(make_retriever("bm25"), train, test, demo_data.tools)
    assert bm25.stop_rule == "shared"
    rule = StopRule().fit(train)
    for row in bm25.rows:
        demo = test[row.query]
        history = demo.calls[: row.step]
        assert row.end_score == pytest.approx(rule.probability(demo.query, history))
        assert row.stop_pred == (row.end_score >= 0.5)
    # its own ranking gives end-of-plan one constant rate: the same at every step of a request
    model = make_retriever("bm25").fit(train, demo_data.tools)
    own = evaluate(model, test)
    assert own.stop_rule == "own"
    by_request: dict[int, set[float]] = {}
    for row in own.rows:
        by_request.setdefault(row.query, set()).add(row.end_score)
    assert all(len(scores) == 1 for scores in by_request.values())
    # the shared rule separates done from not done; the constant rate cannot
    assert bm25.stop["stop_auroc"] > 0.8
    assert own.stop["stop_auroc"] < bm25.stop["stop_auroc"]


def test_a_retriever_with_an_end_model_keeps_its_own_stop(encoder, demo_data, demo_split):
    train, test = demo_split[0][:400], demo_split[1][:40]
    model = make_retriever("dtdr-c", encoder=encoder)
    result = fit_and_evaluate(model, train, test, demo_data.tools)
    assert result.stop_rule == "own"
    for row in result.rows:
        demo = test[row.query]
        ranking = model.rank(demo.query, demo.calls[: row.step], ignore_unknown=True)
        assert row.stop_pred == (ranking.ranked_names()[0] == END_OF_PLAN)
    paper = result.metrics["mrr"]
    assert paper != result.tool_metrics["tool_mrr"]
    assert result.summary()["paper_mrr"] == paper


def test_a_composite_follows_its_base(encoder):
    from dtdr_agents.evaluation.protocol import has_own_stop

    assert not has_own_stop(make_retriever("toolqp:bm25"))
    assert has_own_stop(make_retriever("toolqp:dtdr-c", encoder=encoder))
    assert not has_own_stop(make_retriever("peer-gtc"))


def _row(query, step, *, rr=None, gold=None, pred=None, score=None):
    tool = None if rr is None else {"tool_mrr": rr, "tool_top1": float(rr == 1.0)}
    return ScoredStep(query, step, 2, {"mrr": rr or 0.0}, tool, gold, pred, score)


def test_stop_metrics_by_hand():
    rows = [
        _row(0, 0, rr=1.0, gold=False, pred=False, score=0.1),
        _row(0, 1, rr=0.5, gold=False, pred=True, score=0.6),  # false stop at a tool step
        _row(0, 2, gold=True, pred=True, score=0.9),
        _row(1, 0, rr=1.0, gold=False, pred=False, score=0.2),
        _row(1, 1, gold=True, pred=False, score=0.4),  # missed stop
    ]
    out = stop_metrics(rows)
    assert out["stop_precision"] == 0.5 and out["stop_recall"] == 0.5
    assert out["stop_f1"] == 0.5
    assert out["end_first_at_tool_steps"] == pytest.approx(1 / 3)
    # 2 positives (0.9, 0.4) x 3 negatives (0.1, 0.6, 0.2): 0.9 beats all, 0.4 beats 2
    assert out["stop_auroc"] == pytest.approx(5 / 6)
    assert stop_metrics([_row(0, 0, rr=1.0)]) == {}  # set-valued rows have no stop


def _run(rrs_per_request):
    rows = [
        _row(q, s, rr=rr, gold=False, pred=False, score=0.0)
        for q, rrs in enumerate(rrs_per_request)
        for s, rr in enumerate(rrs)
    ]
    return EvalResult("x", rows=rows)


def test_estimate_is_the_step_weighted_mean_with_an_interval_over_requests():
    run = _run([[1.0, 0.5], [0.25], [1.0, 1.0, 1.0], [0.0]])
    est = estimate([run], "tool_mrr", same_requests=True, n_boot=500)
    assert est.mean == pytest.approx((1.5 + 0.25 + 3.0 + 0.0) / 7)
    assert est.ci[0] < est.mean < est.ci[1]
    assert est.ci[0] >= 0.0 and est.ci[1] <= 1.0
    two = estimate(
        [run, _run([[0.0, 0.0], [0.0], [0.0, 0.0, 0.0], [0.0]])],
        "tool_mrr",
        same_requests=True,
        n_boot=200,
    )
    assert two.mean == pytest.approx(est.mean / 2)
    assert two.per_seed == (pytest.approx(est.mean), 0.0)


def test_paired_difference_and_verdicts():
    rng = np.random.default_rng(0)
    base = [[float(x) for x in rng.uniform(0.2, 0.8, size=3)] for _ in range(40)]
    better = [[min(1.0, x + 0.1) for x in r] for r in base]
    a, b = _run(better), _run(base)
    diff = paired_difference([a], [b], "tool_mrr", same_requests=True, n_boot=500)
    assert diff.mean > 0.09 and diff.ci[0] > 0 and verdict(diff) == "beats"
    back = paired_difference([b], [a], "tool_mrr", same_requests=True, n_boot=500)
    assert verdict(back) == "loses to"
    same = paired_difference([a], [a], "tool_mrr", same_requests=True, n_boot=100)
    assert same.mean == 0.0 and same.ci == (0.0, 0.0)
    assert verdict(same) == "no clear difference"
    with pytest.raises(ValueError, match="same seeds and requests"):
        paired_difference([a], [_run(base[:5])], "tool_mrr", same_requests=True)


def test_drawn_splits_resample_each_seed_on_its_own():
    small, large = _run([[1.0], [0.0]]), _run([[0.5]] * 30)
    est = estimate([small, large], "tool_mrr", same_requests=False, n_boot=300)
    assert est.mean == pytest.approx((0.5 + 0.5) / 2)
    assert est.ci[0] < est.mean < est.ci[1]


def test_stop_rule_learns_when_plans_end():
    tools = [Tool("a", "alpha"), Tool("b", "beta")]
    demos = [
        Demonstration(f"find the alpha {i} and then send the beta {i}", ("a", "b"))
        for i in range(30)
    ]
    rule = StopRule().fit(demos)
    query = "find the alpha item and then send the beta item"
    assert rule.probability(query, ()) < 0.5
    assert rule.probability(query, ("a",)) < 0.5
    assert rule.probability(query, ("a", "b")) > 0.5
    with pytest.raises(ValueError, match="at least one demonstration"):
        StopRule().fit([])
    assert tools  # the rule never reads the catalogue
