"""Numeric parameters are checked: NaN, a negative weight or a probability outside [0, 1]
is an error naming the field, at `fit` and at `load` (issue "Reliability", items 2-3).

`__init__` only stores (scikit-learn style); `fit` and `load` run `_check_params`, which uses
the one helper `dtdr_agents.foundation.checks.check_number`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dtdr_agents import ModelLoadError, Tool, Toolset, load_retriever
from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.checks import check_number
from dtdr_agents.foundation.persistence import manifest_digest
from dtdr_agents.foundation.selection import SelectionPolicy
from dtdr_agents.planning import ClausePlanner
from dtdr_agents.retrievers import (
    DTDRC,
    DTDRL,
    BM25Retriever,
    GraphToolCallRetriever,
    LessIsMoreRetriever,
    QTSRetriever,
    RandomRetriever,
    StaticDR,
    StaticLR,
    ToolGraphRetriever,
    ToolRetriever,
)
from dtdr_agents.retrievers.hybrid import HybridRetriever
from dtdr_agents.retrievers.ptr import PTRRecommender
from dtdr_agents.retrievers.toolqp import ToolQPRetriever

DATA = make_demo_dataset(n=60, seed=7)
DEMOS = list(DATA.demos)
NAN, INF = math.nan, math.inf


def _qts() -> QTSRetriever:
    return QTSRetriever(encoder="tfidf")


FACTORIES: dict[str, Callable[..., ToolRetriever]] = {
    "dtdr-c": lambda **p: DTDRC(encoder="tfidf", **p),
    "dr": lambda **p: StaticDR(encoder="tfidf", **p),
    "dtdr-l": lambda **p: DTDRL(encoder="tfidf", **p),
    "lr": lambda **p: StaticLR(encoder="tfidf", **p),
    "qts": lambda **p: QTSRetriever(encoder="tfidf", **p),
    "tgr": lambda **p: ToolGraphRetriever(encoder="tfidf", **p),
    "lim": lambda **p: LessIsMoreRetriever(encoder="tfidf", **p),
    "bm25": lambda **p: BM25Retriever(**p),
    "random": lambda **p: RandomRetriever(**p),
    "peer-gtc": lambda **p: GraphToolCallRetriever(**p),
    "hybrid": lambda **p: HybridRetriever(encoder="tfidf", **p),
    "ptr": lambda **p: PTRRecommender(base=_qts(), **p),
    "toolqp": lambda **p: ToolQPRetriever(base=_qts(), planner=ClausePlanner(), **p),
}
"""Every registered class, built offline (no package or chat model is reached: the
parameter check comes first)."""

WEIGHTED = [rid for rid in FACTORIES if rid != "toolqp"]  # toolqp has no prior_weight

BAD = [
    # (retriever, field, bad value)
    *[(rid, "prior_weight", value) for rid in WEIGHTED for value in (NAN, -3, INF)],
    ("dtdr-c", "prior_weight", "0.1"),
    ("dtdr-c", "prior_weight", True),
    ("dtdr-c", "ood_quantile", NAN),
    ("dtdr-c", "ood_quantile", 0.0),
    ("dtdr-c", "ood_quantile", 1.5),
    ("dtdr-c", "order", NAN),
    ("dtdr-c", "order", -1),
    ("dtdr-c", "order", 2.0),
    ("dtdr-c", "demos_per_cluster", 0),
    ("dtdr-c", "n_clusters", 0),
    ("dtdr-c", "n_clusters", 2.5),
    ("dtdr-l", "min_confidence", 2.0),
    ("dtdr-l", "min_confidence", -0.1),
    ("dtdr-l", "min_confidence", NAN),
    ("dtdr-l", "ood_quantile", NAN),
    ("dtdr-l", "lr", NAN),
    ("dtdr-l", "lr", -1e-3),
    ("dtdr-l", "lr", 0.0),
    ("dtdr-l", "lr_decay", NAN),
    ("dtdr-l", "lr_decay", 0.0),
    ("dtdr-l", "lr_decay", 1.5),
    ("dtdr-l", "weight_decay", -1e-5),
    ("dtdr-l", "weight_decay", NAN),
    ("dtdr-l", "epochs", 0),
    ("dtdr-l", "epochs", 2.5),
    ("dtdr-l", "batch_size", 0),
    ("dtdr-l", "history_length", -1),
    ("dtdr-l", "history_length", 10**9),
    ("lr", "min_confidence", 1.01),
    ("qts", "temperature", NAN),
    ("qts", "temperature", -1.0),
    ("qts", "temperature", 0.0),
    ("tgr", "temperature", INF),
    ("lim", "temperature", NAN),
    ("bm25", "k1", NAN),
    ("bm25", "k1", -1.0),
    ("bm25", "b", NAN),
    ("bm25", "b", 1.5),
    ("bm25", "b", -0.5),
    ("bm25", "temperature", NAN),
    ("random", "seed", 1.5),
    ("peer-gtc", "rest_mass", NAN),
    ("peer-gtc", "rest_mass", 1.0),
    ("peer-gtc", "rest_mass", -0.1),
    ("peer-gtc", "top_k", 0),
    ("peer-gtc", "min_count", 0),
    ("peer-gtc", "max_graph_depth", -1),
    ("hybrid", "l2", NAN),
    ("hybrid", "l2", -2.0),
    ("hybrid", "n_folds", 1),
    ("hybrid", "candidates", 0),
    ("hybrid", "exact_limit", -1),
    ("ptr", "min_similarity", NAN),
    ("ptr", "min_similarity", 1.5),
    ("ptr", "bundle_k", 0),
    ("ptr", "folds", -1),
    ("toolqp", "timeout", NAN),
    ("toolqp", "timeout", 0.0),
    ("toolqp", "timeout", -5.0),
    ("toolqp", "rrf_k", 0),
]


@pytest.mark.parametrize(("rid", "field", "value"), BAD, ids=lambda v: repr(v))
def test_fit_refuses_a_bad_number_naming_the_field(rid: str, field: str, value: Any) -> None:
    retriever = FACTORIES[rid](**{field: value})  # __init__ only stores
    assert retriever.get_params()[field] is value
    with pytest.raises(ValueError, match=rf"^{field} must be .*got {value!r:.6}"):
        retriever.fit(DEMOS, DATA.tools)
    assert not getattr(retriever, "_fitted", False)


@pytest.mark.parametrize(
    ("rid", "params"),
    [
        ("dtdr-c", {"prior_weight": 0.0, "ood_quantile": 1.0, "order": 0}),
        ("dtdr-c", {"ood_quantile": None, "n_clusters": np.int64(2)}),
        ("dtdr-l", {"min_confidence": 0.0, "lr_decay": 1.0, "weight_decay": 0.0, "epochs": 1}),
        ("dtdr-l", {"min_confidence": 1.0, "history_length": 0, "epochs": 1}),
        ("qts", {"temperature": None, "prior_weight": np.float32(0.5)}),
        ("random", {"seed": 3}),
    ],
)
def test_edge_values_are_accepted(rid: str, params: dict[str, Any]) -> None:
    retriever = FACTORIES[rid](**params).fit(DEMOS, DATA.tools)
    assert retriever.rank(DEMOS[0].query).probabilities.sum() == pytest.approx(1.0)


def test_a_composite_checks_its_parameters_before_fitting_its_base() -> None:
    base = _qts()
    with pytest.raises(ValueError, match=r"^min_similarity must be"):
        PTRRecommender(base=base, min_similarity=NAN).fit(DEMOS, DATA.tools)
    assert not hasattr(base, "tool_embeddings_")  # the base was not fitted


def test_check_number_messages() -> None:
    with pytest.raises(ValueError, match=r"^x must be a number in \[0, 1\] or None, got 2\.0$"):
        check_number(2.0, "x", low=0, high=1, optional=True)
    with pytest.raises(ValueError, match=r"^x must be a number in \(0, 1\), got 1$"):
        check_number(1, "x", low=0, high=1, low_open=True, high_open=True)
    with pytest.raises(ValueError, match=r"^x must be an integer >= 1, got 1\.0$"):
        check_number(1.0, "x", low=1, integer=True)
    with pytest.raises(ValueError, match=r"^x must be a finite number, got nan$"):
        check_number(NAN, "x")
    with pytest.raises(ValueError, match=r"^x must be a number <= 0, got True$"):
        check_number(True, "x", high=0)
    check_number(None, "x", low=0, optional=True)
    check_number(np.float64(0.5), "x", low=0, high=1)


# ---------------------------------------------------------------------------------- load
def _reseal_params(path: Path, **params: Any) -> None:
    """Edit the saved parameters and recompute the manifest's own hash."""
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["params"].update(params)
    manifest["integrity"]["manifest_sha256"] = manifest_digest(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("rid", "field", "value"),
    [
        ("dtdr-c", "prior_weight", -3),
        ("dtdr-l", "min_confidence", 2.0),
        ("qts", "temperature", -1.0),
        ("bm25", "b", 7.0),
    ],
)
def test_load_refuses_a_resealed_bad_parameter(
    tmp_path: Path, rid: str, field: str, value: Any
) -> None:
    if rid == "bm25" and BM25Retriever.unavailable_reason() is not None:
        pytest.skip("bm25s is not installed")
    params = {"epochs": 1} if rid == "dtdr-l" else {}
    path = FACTORIES[rid](**params).fit(DEMOS, DATA.tools).save(tmp_path / rid)
    load_retriever(path)  # the untouched copy loads
    _reseal_params(path, **{field: value})
    with pytest.raises(
        ModelLoadError, match=rf"manifest\.json: field 'params' is invalid: {field}"
    ):
        load_retriever(path)


def test_the_reseal_helper_is_faithful(tmp_path: Path) -> None:
    path = FACTORIES["dtdr-c"]().fit(DEMOS, DATA.tools).save(tmp_path / "m")
    before = hashlib.sha256((path / "manifest.json").read_bytes()).hexdigest()
    _reseal_params(path, prior_weight=0.25)
    assert hashlib.sha256((path / "manifest.json").read_bytes()).hexdigest() != before
    assert load_retriever(path).get_params()["prior_weight"] == 0.25


# ------------------------------------------------------------------------- rank is finite
def test_rank_never_hands_nan_to_the_agent() -> None:
    """A NaN set after fit (set_params does not check, as in scikit-learn) is caught by rank."""
    model = FACTORIES["dtdr-c"]().fit(DEMOS, DATA.tools)
    extra = Toolset([*DATA.tools, Tool("book_flight", "Book a flight")])
    model.set_tools(extra)
    assert np.isfinite(model.rank("book a flight").probabilities).all()
    model.set_params(prior_weight=NAN)
    with pytest.raises(RuntimeError, match=r"DTDRC\.rank: .*not finite"):
        model.rank("book a flight")


def test_rank_refuses_nan_from_a_score(monkeypatch: pytest.MonkeyPatch) -> None:
    model = FACTORIES["qts"]().fit(DEMOS, DATA.tools)
    real = model._score

    def poisoned(query: str, history: tuple[str, ...]) -> Any:
        scores = real(query, history)
        scores.probabilities = np.full_like(scores.probabilities, NAN)
        return scores

    monkeypatch.setattr(model, "_score", poisoned)
    with pytest.raises(RuntimeError, match=r"QTSRetriever\.rank: .*NaN"):
        model.rank(DEMOS[0].query)


def test_save_refuses_a_nan_parameter(tmp_path: Path) -> None:
    model = FACTORIES["dtdr-c"]().fit(DEMOS, DATA.tools)
    model.set_params(prior_weight=NAN)
    with pytest.raises(ValueError, match=r"cannot save DTDRC: .*NaN"):
        model.save(tmp_path / "m")
    assert not (tmp_path / "m").exists()


# ----------------------------------------------------------------------- SelectionPolicy
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("threshold", NAN),
        ("threshold", -0.1),
        ("threshold", 1.0),
        ("threshold", INF),
        ("coverage", 0.0),
        ("coverage", NAN),
        ("coverage", -INF),
        ("coverage", 1.01),
        ("k", 2.0),
        ("k", NAN),
        ("min_k", -1),
        ("fallback_k", NAN),
        ("max_tools", 0),
    ],
)
def test_selection_policy_names_the_bad_field(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=rf"^SelectionPolicy\.{field} must be .*got"):
        SelectionPolicy(**{field: value})


def test_selection_policy_accepts_its_edges() -> None:
    policy = SelectionPolicy(k=np.int64(3), threshold=0.0, coverage=1.0, min_k=0, max_tools=1)
    assert policy.k == 3 and policy.coverage == 1.0
