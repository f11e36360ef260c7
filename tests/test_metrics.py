"""Tests for dtdr_agents.evaluation.metrics: hand-worked values, edge cases and cross-checks."""

from __future__ import annotations

import copy
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import ndcg_score

from dtdr_agents.evaluation import metrics as dm

H = 1.0 / math.log2(3)  # discount at position 2
Q = 1.0 / math.log2(5)  # discount at position 4

RANKED = ["a", "b", "c", "d", "e"]


# ----------------------------------------------------------------------------- reciprocal rank


def test_reciprocal_rank_first_acceptable_counts():
    # first acceptable ("c") is at position 3 -> 1/3; "e" later does not matter
    assert dm.reciprocal_rank(RANKED, {"c", "e"}) == pytest.approx(1 / 3)
    # at position 1 -> 1/1
    assert dm.reciprocal_rank(RANKED, ["a"]) == 1.0
    # position 5 -> 0.2
    assert dm.reciprocal_rank(RANKED, ("e",)) == pytest.approx(0.2)


def test_reciprocal_rank_absent_is_zero():
    assert dm.reciprocal_rank(RANKED, {"z"}) == 0.0
    assert dm.reciprocal_rank([], {"z"}) == 0.0


def test_reciprocal_rank_duplicates_do_not_matter():
    # ["a", "a", "c"]: first acceptable "c" at position 3 -> 1/3
    assert dm.reciprocal_rank(["a", "a", "c"], {"c"}) == pytest.approx(1 / 3)


# ----------------------------------------------------------------------------- top-1


def test_top1_accuracy():
    assert dm.top1_accuracy(RANKED, {"a", "x"}) == 1.0
    assert dm.top1_accuracy(RANKED, {"b"}) == 0.0
    assert dm.top1_accuracy([], {"b"}) == 0.0


# ----------------------------------------------------------------------------- precision / recall


def test_precision_and_recall_hand_worked():
    rel = {"b", "d", "z"}
    # top-2 = {a, b}: hits 1 -> P = 1/2, R = 1/3
    assert dm.precision_at_k(RANKED, rel, 2) == pytest.approx(1 / 2)
    assert dm.recall_at_k(RANKED, rel, 2) == pytest.approx(1 / 3)
    # top-4 = {a, b, c, d}: hits 2 -> P = 2/4, R = 2/3 ("z" is never ranked)
    assert dm.precision_at_k(RANKED, rel, 4) == pytest.approx(0.5)
    assert dm.recall_at_k(RANKED, rel, 4) == pytest.approx(2 / 3)


def test_k_larger_than_ranking():
    # k = 10 > 5 entries: hits 2 ("b", "d"); P = 2/10 (missing slots are misses), R = 2/2
    assert dm.precision_at_k(RANKED, {"b", "d"}, 10) == pytest.approx(0.2)
    assert dm.recall_at_k(RANKED, {"b", "d"}, 10) == 1.0
    assert dm.ndcg_at_k(RANKED, {"b", "d"}, 10) == pytest.approx((H + 1 / math.log2(5)) / (1 + H))
    assert dm.completeness_at_k(RANKED, {"b", "d"}, 10) == 1.0


def test_duplicates_occupy_slots_but_earn_nothing():
    ranked = ["a", "a", "b"]
    rel = {"a", "b"}
    # top-3 set = {a, b}: hits 2 -> P = 2/3 (the repeated "a" is a wasted slot), R = 1
    assert dm.precision_at_k(ranked, rel, 3) == pytest.approx(2 / 3)
    assert dm.recall_at_k(ranked, rel, 3) == 1.0
    # top-2 = [a, a]: only one distinct hit -> P = 1/2, R = 1/2, never > 1
    assert dm.precision_at_k(ranked, rel, 2) == pytest.approx(0.5)
    assert dm.recall_at_k(ranked, rel, 2) == pytest.approx(0.5)
    # DCG@3 = 1/log2(2) + 0 (repeat) + 1/log2(4) = 1.5; IDCG@3 = 1 + 1/log2(3)
    assert dm.dcg_at_k(ranked, rel, 3) == pytest.approx(1.5)
    assert dm.ndcg_at_k(ranked, rel, 3) == pytest.approx(1.5 / (1 + H))
    assert dm.pass_at_k(ranked, rel, 2) == 0.0
    assert dm.pass_at_k(ranked, rel, 3) == 1.0


# ----------------------------------------------------------------------------- F1


def test_f1_default_k_is_number_of_acceptable_tools():
    rel = {"b", "e"}
    # k = |rel| = 2: top-2 = {a, b}, hits 1 -> P = 1/2, R = 1/2, F1 = 1/2
    assert dm.f1_at_k(RANKED, rel) == pytest.approx(0.5)
    # explicit k = 5: hits 2 -> P = 2/5, R = 1, F1 = 2 * 0.4 * 1 / 1.4 = 4/7
    assert dm.f1_at_k(RANKED, rel, 5) == pytest.approx(4 / 7)
    # no hit -> 0
    assert dm.f1_at_k(RANKED, {"z"}) == 0.0


def test_f1_default_equals_precision_and_recall():
    rel = {"c", "a", "q"}
    # k = 3: top-3 = {a, b, c}, hits 2 -> P = R = F1 = 2/3
    assert dm.f1_at_k(RANKED, rel) == pytest.approx(2 / 3)
    assert dm.precision_at_k(RANKED, rel, 3) == pytest.approx(2 / 3)
    assert dm.recall_at_k(RANKED, rel, 3) == pytest.approx(2 / 3)


# ----------------------------------------------------------------------------- nDCG


def test_ndcg_hand_worked():
    rel = {"b", "d"}
    # DCG@5 = 1/log2(3) + 1/log2(5) (positions 2 and 4); IDCG = 1 + 1/log2(3)
    assert dm.dcg_at_k(RANKED, rel, 5) == pytest.approx(H + Q)
    assert dm.ndcg_at_k(RANKED, rel, 5) == pytest.approx((H + Q) / (1 + H))
    # k = 1: DCG@1 = 0 ("a" not relevant)
    assert dm.ndcg_at_k(RANKED, rel, 1) == 0.0
    # k = 2: DCG = 1/log2(3); IDCG over min(2, 2) = 1 + 1/log2(3)
    assert dm.ndcg_at_k(RANKED, rel, 2) == pytest.approx(H / (1 + H))


def test_ndcg_ideal_uses_min_k_relevant():
    # 3 relevant, k = 2, both top slots relevant -> IDCG@2 = 1 + 1/log2(3) = DCG -> 1.0
    assert dm.ndcg_at_k(RANKED, {"a", "b", "e"}, 2) == 1.0
    # relevant not ranked still counts in the ideal: rel = {a, z}, k = 2
    # DCG = 1, IDCG = 1 + 1/log2(3)
    assert dm.ndcg_at_k(RANKED, {"a", "z"}, 2) == pytest.approx(1 / (1 + H))
    assert dm.ndcg_at_k(RANKED, {"z"}, 5) == 0.0


def test_ndcg_matches_sklearn_on_random_cases():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(2, 30))
        names = [f"t{i}" for i in range(n)]
        scores = rng.permutation(n).astype(float)  # distinct scores: no ties
        n_rel = int(rng.integers(1, n + 1))
        rel_idx = rng.choice(n, size=n_rel, replace=False)
        y_true = np.zeros(n)
        y_true[rel_idx] = 1.0
        k = int(rng.integers(1, n + 5))
        ranked = [names[i] for i in np.argsort(-scores)]
        relevant = {names[i] for i in rel_idx}
        expected = ndcg_score(y_true[None, :], scores[None, :], k=k)
        assert dm.ndcg_at_k(ranked, relevant, k) == pytest.approx(expected, abs=1e-12)


# ----------------------------------------------------------------------------- MRR cross-check


def _naive_rr(ranked: list[str], relevant: set[str]) -> float:
    ranks = [i + 1 for i, name in enumerate(ranked) if name in relevant]
    return 1.0 / min(ranks) if ranks else 0.0


def test_mrr_matches_naive_on_random_cases():
    rnd = random.Random(1)
    rows = []
    naive = []
    for _ in range(300):
        pool = [f"t{i}" for i in range(rnd.randint(1, 20))]
        ranked = rnd.sample(pool, rnd.randint(0, len(pool)))
        relevant = set(rnd.sample([*pool, "x", "y"], rnd.randint(1, 3)))
        rows.append({"mrr": dm.reciprocal_rank(ranked, relevant)})
        naive.append(_naive_rr(ranked, relevant))
        assert rows[-1]["mrr"] == naive[-1]
    assert dm.mean_metrics(rows)["mrr"] == pytest.approx(sum(naive) / len(naive))


# ----------------------------------------------------------------------------- pass / completeness


def test_pass_and_completeness_hand_worked():
    rel = {"a", "c"}
    # top-2 = {a, b}: c missing -> 0; top-3 = {a, b, c} ⊇ rel -> 1
    assert dm.pass_at_k(RANKED, rel, 2) == 0.0
    assert dm.pass_at_k(RANKED, rel, 3) == 1.0
    assert dm.completeness_at_k(RANKED, rel, 2) == 0.0
    assert dm.completeness_at_k(RANKED, rel, 3) == 1.0
    # more relevant tools than k -> impossible -> 0
    assert dm.completeness_at_k(RANKED, {"a", "b", "c"}, 2) == 0.0
    # a relevant tool never ranked -> 0 for every k
    assert dm.pass_at_k(RANKED, {"a", "z"}, 100) == 0.0


# ----------------------------------------------------------------------------- set metrics


def test_set_metrics_hand_worked():
    pred = ["a", "b", "x"]
    rel = {"a", "b", "c", "d"}
    # |P ∩ R| = 2: precision 2/3, recall 2/4, F1 = 2 * 2 / (3 + 4) = 4/7
    assert dm.set_precision(pred, rel) == pytest.approx(2 / 3)
    assert dm.set_recall(pred, rel) == pytest.approx(0.5)
    assert dm.set_f1(pred, rel) == pytest.approx(4 / 7)
    # harmonic-mean form agrees: 2 * (2/3) * (1/2) / (2/3 + 1/2) = 4/7
    assert dm.set_f1(pred, rel) == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))


def test_set_metrics_empty_prediction_and_duplicates():
    assert dm.set_precision([], {"a"}) == 0.0
    assert dm.set_recall([], {"a"}) == 0.0
    assert dm.set_f1([], {"a"}) == 0.0
    # duplicates collapse: {a} vs {a, b} -> P = 1, R = 1/2, F1 = 2/3
    assert dm.set_precision(["a", "a"], {"a", "b"}) == 1.0
    assert dm.set_f1(["a", "a"], {"a", "b"}) == pytest.approx(2 / 3)


# ----------------------------------------------------------------------------- TRACC


def test_tracc_paper_examples():
    a = {"a", "b", "c"}
    # PTR Appendix C, exact solving: ACC = 3/3, penalty 0 -> 1.0
    assert dm.tracc({"a", "b", "c"}, a) == 1.0
    # oversolving {a,b,c,x,y}: ACC = 1, ||B|-|A|| = 2, |A ∪ B| = 5 -> 1 - 2/5 = 0.6
    assert dm.tracc(["a", "b", "c", "x", "y"], a) == pytest.approx(0.6)
    # undersolving {a,b}: ACC = 2/3, ||B|-|A|| = 1, |A ∪ B| = 3 -> 2/3 * 2/3 = 4/9 ≈ 0.44
    assert dm.tracc(["a", "b"], a) == pytest.approx(4 / 9)


def test_tracc_appendix_c_against_recall_and_ndcg():
    """Appendix C's table: Recall@3 / NDCG@3 miss over-selection, TRACC does not."""
    a = {"a", "b", "c"}
    over = ["a", "b", "c", "x", "y"]
    assert dm.recall_at_k(over, a, 3) == 1.0
    assert dm.ndcg_at_k(over, a, 3) == pytest.approx(1.0)
    assert dm.tracc(over, a) == pytest.approx(0.6)
    under = ["a", "b"]
    assert dm.recall_at_k(under, a, 3) == pytest.approx(2 / 3)
    assert dm.ndcg_at_k(under, a, 3) < 1.0
    assert round(dm.tracc(under, a), 2) == 0.44


def test_tracc_more_cases():
    # A = {a, b}, B = {a, x}: ACC = 1/2, same size -> penalty 0 -> 0.5
    assert dm.tracc(["a", "x"], {"a", "b"}) == pytest.approx(0.5)
    # A = {a}, B = {a, x, y, z}: ACC = 1, penalty 3/4 -> 0.25
    assert dm.tracc(["a", "x", "y", "z"], {"a"}) == pytest.approx(0.25)
    # empty recommendation -> ACC = 0 -> 0
    assert dm.tracc([], {"a"}) == 0.0
    # disjoint, same size: ACC = 0 -> 0
    assert dm.tracc(["x"], {"a"}) == 0.0
    # duplicates collapse: B = {a} -> 1.0
    assert dm.tracc(["a", "a"], {"a"}) == 1.0


# ----------------------------------------------------------------------------- step_metrics


def test_step_metrics_keys_and_values():
    row = dm.step_metrics(RANKED, {"b", "d"})
    assert list(row) == [
        "mrr",
        "top1",
        "f1",
        "precision@5",
        "recall@5",
        "ndcg@5",
        "completeness@5",
        "precision@10",
        "recall@10",
        "ndcg@10",
        "completeness@10",
    ]
    assert all(type(v) is float for v in row.values())
    assert row["mrr"] == pytest.approx(0.5)  # "b" at position 2
    assert row["top1"] == 0.0
    assert row["f1"] == pytest.approx(0.5)  # k = 2, top-2 = {a, b}: P = R = 1/2
    assert row["recall@5"] == 1.0
    assert row["precision@10"] == pytest.approx(0.2)
    assert row["ndcg@10"] == pytest.approx((H + Q) / (1 + H))
    assert row["completeness@10"] == 1.0


def test_step_metrics_custom_ks_and_validation():
    row = dm.step_metrics(RANKED, ["a"], ks=[1])
    assert set(row) == {"mrr", "top1", "f1", "precision@1", "recall@1", "ndcg@1", "completeness@1"}
    with pytest.raises(ValueError, match="ks"):
        dm.step_metrics(RANKED, ["a"], ks=())
    with pytest.raises(ValueError, match="repeat"):
        dm.step_metrics(RANKED, ["a"], ks=(5, 5))
    with pytest.raises(ValueError, match="ks entry"):
        dm.step_metrics(RANKED, ["a"], ks=(0,))


def test_step_metrics_end_of_plan_is_an_ordinary_name():
    ranked = ["search", "<end_of_plan>", "email"]
    row = dm.step_metrics(ranked, frozenset({"<end_of_plan>"}), ks=(1, 2))
    assert row["mrr"] == pytest.approx(0.5)
    assert row["completeness@2"] == 1.0


# ----------------------------------------------------------------------------- aggregation


def test_mean_metrics():
    rows = [{"mrr": 1.0, "top1": 1.0}, {"mrr": 0.5, "top1": 0.0}, {"top1": 0.0, "mrr": 0.0}]
    # mrr: (1 + 0.5 + 0) / 3 = 0.5; top1: 1/3 (not rounded)
    out = dm.mean_metrics(rows)
    assert out == {"mrr": 0.5, "top1": 1 / 3}
    assert list(out) == ["mrr", "top1"]
    assert dm.mean_metrics(iter(rows)) == out  # a one-shot iterator works


def test_mean_metrics_errors():
    with pytest.raises(ValueError, match="empty"):
        dm.mean_metrics([])
    with pytest.raises(ValueError, match=r"row 1 .*missing \['top1'\]"):
        dm.mean_metrics([{"mrr": 1.0, "top1": 1.0}, {"mrr": 1.0}])
    with pytest.raises(ValueError, match=r"extra \['f1'\]"):
        dm.mean_metrics([{"mrr": 1.0}, {"mrr": 1.0, "f1": 0.0}])


def test_group_mean():
    rows = [{"mrr": 1.0}, {"mrr": 0.5}, {"mrr": 0.0}, {"mrr": 0.25}]
    groups = [3, 2, 3, 2]
    # group 3: (1 + 0) / 2 = 0.5; group 2: (0.5 + 0.25) / 2 = 0.375; first-appearance order
    out = dm.group_mean(rows, groups)
    assert out == {3: {"mrr": 0.5}, 2: {"mrr": 0.375}}
    assert list(out) == [3, 2]


def test_group_mean_errors():
    with pytest.raises(ValueError, match="same length"):
        dm.group_mean([{"mrr": 1.0}], [1, 2])
    with pytest.raises(ValueError, match="empty"):
        dm.group_mean([], [])
    # keys must agree across groups, not only within one
    with pytest.raises(ValueError, match="different metric keys"):
        dm.group_mean([{"mrr": 1.0}, {"f1": 1.0}], ["a", "b"])


def test_group_mean_of_step_rows_by_step_index():
    steps = [
        (["a", "b"], {"a"}),  # step 0: rr 1
        (["b", "a"], {"a"}),  # step 1: rr 1/2
        (["a", "b"], {"b"}),  # step 0: rr 1/2
    ]
    rows = [dm.step_metrics(r, rel, ks=(1,)) for r, rel in steps]
    out = dm.group_mean(rows, [0, 1, 0])
    assert out[0]["mrr"] == pytest.approx(0.75)
    assert out[1]["mrr"] == pytest.approx(0.5)
    assert out[0]["top1"] == pytest.approx(0.5)


# ----------------------------------------------------------------------------- validation


RANKING_FNS = [dm.precision_at_k, dm.recall_at_k, dm.ndcg_at_k, dm.dcg_at_k, dm.pass_at_k]
RANKING_FNS += [dm.completeness_at_k, dm.f1_at_k]


@pytest.mark.parametrize("fn", RANKING_FNS)
def test_k_validation(fn):
    with pytest.raises(ValueError, match=r"\bk must be >= 1"):
        fn(RANKED, {"a"}, 0)
    with pytest.raises(ValueError, match=r"\bk must be >= 1"):
        fn(RANKED, {"a"}, -3)
    with pytest.raises(TypeError, match=r"\bk must be an integer"):
        fn(RANKED, {"a"}, 2.0)
    with pytest.raises(TypeError, match=r"\bk must be an integer"):
        fn(RANKED, {"a"}, True)
    assert fn(RANKED, {"a"}, np.int64(2)) == fn(RANKED, {"a"}, 2)


ALL_RANKED = [
    dm.reciprocal_rank,
    dm.top1_accuracy,
    dm.f1_at_k,
    lambda r, rel: dm.precision_at_k(r, rel, 3),
    lambda r, rel: dm.recall_at_k(r, rel, 3),
    lambda r, rel: dm.ndcg_at_k(r, rel, 3),
    lambda r, rel: dm.pass_at_k(r, rel, 3),
    lambda r, rel: dm.completeness_at_k(r, rel, 3),
    dm.step_metrics,
]
ALL_SET = [dm.set_precision, dm.set_recall, dm.set_f1, dm.tracc]


@pytest.mark.parametrize("fn", ALL_RANKED + ALL_SET)
def test_empty_relevant_raises(fn):
    with pytest.raises(ValueError, match="relevant is empty"):
        fn(["a"], set())


@pytest.mark.parametrize("fn", ALL_RANKED + ALL_SET)
def test_string_arguments_rejected(fn):
    with pytest.raises(TypeError, match="relevant"):
        fn(["a"], "abc")
    with pytest.raises(TypeError, match="single string"):
        fn("abc", {"a"})


@pytest.mark.parametrize("fn", ALL_RANKED)
def test_unordered_ranked_rejected(fn):
    with pytest.raises(TypeError, match="ordered sequence"):
        fn({"a", "b"}, {"a"})


def test_inputs_not_mutated():
    ranked = ["a", "b", "a", "c"]
    relevant = {"a", "c", "z"}
    rows = [{"mrr": 1.0, "f1": 0.5}, {"mrr": 0.0, "f1": 0.25}]
    groups = ["x", "y"]
    snap = copy.deepcopy((ranked, relevant, rows, groups))
    for fn in ALL_RANKED:
        fn(ranked, relevant)
    for fn in ALL_SET:
        fn(ranked, relevant)
    dm.mean_metrics(rows)
    dm.group_mean(rows, groups)
    assert (ranked, relevant, rows, groups) == snap


def test_return_types_are_python_float():
    values = [fn(RANKED, {"b"}) for fn in ALL_RANKED[:-1] + ALL_SET]
    assert all(type(v) is float for v in values)


# ----------------------------------------------------------------------------- properties

NAMES = st.sampled_from([f"t{i}" for i in range(12)])
RANKINGS = st.lists(NAMES, max_size=15)  # may contain repeats
RELEVANT = st.sets(NAMES, min_size=1, max_size=6)
KS = st.integers(min_value=1, max_value=20)
FAST = settings(max_examples=150, deadline=None, database=None)


@FAST
@given(ranked=RANKINGS, relevant=RELEVANT, k=KS)
def test_metrics_are_in_unit_interval(ranked, relevant, k):
    values = [
        dm.reciprocal_rank(ranked, relevant),
        dm.top1_accuracy(ranked, relevant),
        dm.precision_at_k(ranked, relevant, k),
        dm.recall_at_k(ranked, relevant, k),
        dm.f1_at_k(ranked, relevant, k),
        dm.f1_at_k(ranked, relevant),
        dm.ndcg_at_k(ranked, relevant, k),
        dm.pass_at_k(ranked, relevant, k),
        dm.completeness_at_k(ranked, relevant, k),
        dm.set_precision(ranked, relevant),
        dm.set_recall(ranked, relevant),
        dm.set_f1(ranked, relevant),
        dm.tracc(ranked, relevant),
    ]
    assert all(0.0 <= v <= 1.0 for v in values), values


@FAST
@given(ranked=RANKINGS, relevant=RELEVANT, k=KS)
def test_recall_monotone_and_pass_equals_completeness(ranked, relevant, k):
    assert dm.recall_at_k(ranked, relevant, k) <= dm.recall_at_k(ranked, relevant, k + 1)
    assert dm.pass_at_k(ranked, relevant, k) == dm.completeness_at_k(ranked, relevant, k)
    # Completeness@K = 1[R@K = 1] (ToolQP)
    assert dm.completeness_at_k(ranked, relevant, k) == float(
        dm.recall_at_k(ranked, relevant, k) == 1.0
    )


@FAST
@given(ranked=RANKINGS, relevant=RELEVANT)
def test_f1_default_is_r_precision(ranked, relevant):
    k = len(relevant)
    f1 = dm.f1_at_k(ranked, relevant)
    assert f1 == pytest.approx(dm.precision_at_k(ranked, relevant, k))
    assert f1 == pytest.approx(dm.recall_at_k(ranked, relevant, k))


@FAST
@given(ranked=st.lists(NAMES, unique=True, max_size=12), relevant=RELEVANT, k=KS)
def test_perfect_ranking_scores_one(ranked, relevant, k):
    # put every relevant tool first: nDCG@k = 1, MRR = 1, pass@k = 1 iff |relevant| <= k
    perfect = sorted(relevant) + [n for n in ranked if n not in relevant]
    assert dm.ndcg_at_k(perfect, relevant, k) == pytest.approx(1.0)
    assert dm.reciprocal_rank(perfect, relevant) == 1.0
    assert dm.pass_at_k(perfect, relevant, k) == float(len(relevant) <= k)
    assert dm.tracc(relevant, relevant) == 1.0
