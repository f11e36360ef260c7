"""The hybrid's per-step path: its speed-ups leave every ranking as it was (issue 38 item 3)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.retrievers import hybrid_features
from dtdr_agents.retrievers.hybrid import HybridRetriever
from dtdr_agents.retrievers.hybrid_features import _row_buffer

REFERENCE = Path(__file__).parent / "fixtures" / "hybrid_steps_reference.json"
"""Rankings made before the speed-ups; its `made_by` says how (regenerate it the same way
when a change to the features is meant)."""

TOLERANCE = 1e-6
"""Probabilities may differ by this much plus `RELATIVE` of their value on another machine."""

RELATIVE = 0.02
"""Another processor sums float32 products in another order, and the TF-IDF encoder's
randomized SVD amplifies that: on an Intel Xeon at the commit the file was made at, 5 of its
115 steps differed by more than 1e-6, by up to 1.1e-5 (0.5% of that tool's probability). On
the machine that made the file they were equal. A speed-up that changes a feature moves
probabilities by far more."""


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(REFERENCE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def model(reference) -> HybridRetriever:
    data = make_demo_dataset(n=120, seed=3)
    fitted = HybridRetriever(encoder="tfidf", seed=0, graph=reference["graph"])
    fitted.fit(data.demos[:90], data.tools)
    # the combiner's weights of the reference: the features decide the rankings here
    fitted.weights_ = np.asarray(reference["weights"], dtype=np.float64)
    return fitted


def _steps(reference: dict) -> list[tuple[str, tuple[str, ...]]]:
    return [(s["query"], tuple(s["history"])) for s in reference["steps"]]


def test_rankings_match_those_made_before_the_speed_ups(model, reference):
    steps = reference["steps"]
    assert len(steps) > 100
    for step in steps:
        ranking = model.rank(step["query"], step["history"])
        assert list(ranking.names) == reference["names"]
        want = np.asarray(step["probabilities"])
        got = ranking.probabilities
        allowed = TOLERANCE + RELATIVE * want
        assert np.all(np.abs(got - want) <= allowed), (step["query"], step["history"])
        # the same order wherever the reference's probabilities are not within the tolerance
        order = np.argsort(-want, kind="stable")
        apart = np.diff(want[order]) < -2 * allowed[order][:-1]
        assert np.all(np.diff(got[order])[apart] < 0), (step["query"], step["history"])


def _features(model: HybridRetriever, steps) -> list[tuple[np.ndarray, np.ndarray]]:
    return [model._step_features(q, h) for q, h in steps]


def test_kept_products_and_edges_give_the_numbers_computed_afresh(model, reference):
    steps = _steps(reference)
    model._linear_call_products = None
    model._successor_rows = {}
    fresh = _features(model, steps)  # every product computed (then kept)
    assert model._linear_call_products is not None and model._linear_call_products[1]
    again = _features(model, steps)  # read from what was kept
    for (labels_a, x_a), (labels_b, x_b) in zip(fresh, again, strict=True):
        assert np.array_equal(labels_a, labels_b)
        assert np.array_equal(x_a, x_b)


def test_kept_products_are_dropped_when_their_memory_is_spent(model, reference, monkeypatch):
    steps = _steps(reference)
    model._linear_call_products = None
    fresh = _features(model, steps)
    monkeypatch.setattr(hybrid_features, "LINEAR_CALLS_BYTES", 1)  # nothing can be kept long
    model._linear_call_products = None
    tight = _features(model, steps)
    assert len(model._linear_call_products[1]) <= 1
    for (_, x_a), (_, x_b) in zip(fresh, tight, strict=True):
        assert np.array_equal(x_a, x_b)


def test_successor_weights_are_the_dense_rows_of_the_tool_graph(model):
    graph = model._tool_graph()
    rows = np.arange(len(model.labels_))
    with_edges = 0
    for name in model.fit_tools_.names:
        dense = np.zeros(len(model.labels_))
        for target, weight in graph.successors(name).items():
            dense[model._label_index[target]] = weight
        with_edges += bool(dense.any())
        assert np.array_equal(model._successor_weights(name, rows), dense)
        shuffled = rows[::-1].copy()
        assert np.array_equal(model._successor_weights(name, shuffled), dense[shuffled])
    assert with_edges > 0


def test_the_row_buffer_is_left_clean_after_steps_and_after_an_error(model, reference):
    size = len(model.labels_)
    for query, history in _steps(reference)[:20]:
        model.rank(query, history)
    assert np.all(_row_buffer(size) == -1)

    def fail(*args, **kwargs):
        raise RuntimeError("mid-step")

    query, history = _steps(reference)[5]
    model._feature_matrix = fail  # an instance attribute: this model only
    try:
        with pytest.raises(RuntimeError, match="mid-step"):
            model._step_features(query, history)
    finally:
        del model._feature_matrix
    assert np.all(_row_buffer(size) == -1)
    _, x = model._step_features(query, history)  # and the next step is right
    assert np.array_equal(x, _features(model, [(query, history)])[0][1])


def test_threads_ranking_at_once_get_the_rankings_of_one_thread(model, reference):
    steps = _steps(reference)
    alone = [model.rank(q, h).probabilities for q, h in steps]
    results: dict[int, list[np.ndarray]] = {}
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            order = steps[k:] + steps[:k]  # each thread starts elsewhere
            got = [model.rank(q, h).probabilities for q, h in order]
            results[k] = got[len(steps) - k :] + got[: len(steps) - k]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k * 7,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for got in results.values():
        for a, b in zip(alone, got, strict=True):
            assert np.array_equal(a, b)


def test_a_reordered_catalogue_gets_each_tool_the_same_probability(model, reference):
    assert model._labels_are_tools  # the fit catalogue: copied, not mapped
    query, history = _steps(reference)[3]
    before = model.rank(query, history).as_dict()
    tools = model.tools_
    model.set_tools(list(tools)[::-1])
    try:
        assert not model._labels_are_tools
        after = model.rank(query, history).as_dict()
    finally:
        model.set_tools(tools)
    assert model._labels_are_tools
    assert after.keys() == before.keys()
    for name, p in before.items():
        assert after[name] == pytest.approx(p, abs=1e-12)
