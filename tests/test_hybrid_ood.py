"""`hybrid`'s calibrated out-of-distribution signal (issue 41, item 5).

The default retriever used to flag no request at all (0 of 285 steps of gibberish, other
scripts and emoji). Fast tests check the signal and its persistence; the benchmark test
measures the shares on the demo data and TaskBench-HF (`dtdr_agents.evaluation.ood_bench`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dtdr_agents.datasets.base import Dataset
from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.evaluation.ood_bench import format_shares, run, unrelated_requests
from dtdr_agents.foundation.manifest import manifest_digest
from dtdr_agents.retrievers import load_retriever, make_retriever
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.retrievers.hybrid_ood import OODCalibration

TASKBENCH = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "taskbench_hf_subset"


@pytest.fixture(scope="module")
def data():  # type: ignore[no-untyped-def]
    return make_demo_dataset(n=160, seed=3)


@pytest.fixture(scope="module")
def fitted(data) -> ToolRetriever:  # type: ignore[no-untyped-def]
    """Few demonstrations (a hybrid fit trains DTDR-L per fold): enough for every check."""
    model = make_retriever("hybrid", encoder="tfidf", n_folds=2, select_l2=False)
    model.fit(data.demos[:20], data.tools)
    assert model.ood_.nearest is not None  # type: ignore[attr-defined]  # >= 10 requests
    return model


@pytest.fixture(scope="module")
def zero(data) -> ToolRetriever:  # type: ignore[no-untyped-def]
    return make_retriever("hybrid", encoder="tfidf").fit([], data.tools)


@pytest.mark.parametrize("which", ["fitted", "zero"])
def test_unrelated_requests_are_flagged_in_distribution_ones_are_not(
    request: pytest.FixtureRequest, data: Dataset, which: str
) -> None:
    model: ToolRetriever = request.getfixturevalue(which)
    unrelated = [text for _, text in unrelated_requests(30, seed=1)]
    flagged = [model.rank(text).fallback for text in unrelated]
    assert sum(flagged) >= 27, [t for t, f in zip(unrelated, flagged, strict=True) if not f]
    held_out = data.demos[120:]
    steps = [(d.query, s.history) for d in held_out for s in d.steps()]
    in_flagged = sum(model.rank(q, h).fallback for q, h in steps)
    assert in_flagged <= 0.05 * len(steps)
    ranking = model.rank(unrelated[0])
    assert ranking.fallback_reason and "unrelated to the catalogue" in ranking.fallback_reason


def test_the_calibration_is_saved_and_loaded(fitted: ToolRetriever, tmp_path: Path) -> None:
    folder = fitted.save(tmp_path / "m")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert '"ood"' in json.dumps(manifest)  # JSON, next to the other state (never pickle)
    loaded = load_retriever(folder)
    assert loaded.ood_ == fitted.ood_  # type: ignore[attr-defined]
    assert isinstance(loaded.ood_, OODCalibration)  # type: ignore[attr-defined]
    text = unrelated_requests(1)[0][1]
    assert loaded.rank(text).fallback and loaded.rank(text).fallback_reason == (
        fitted.rank(text).fallback_reason
    )


def _drop_ood(node: object) -> bool:
    """Remove the hybrid state's ``ood`` key wherever it is in the manifest."""
    if isinstance(node, dict):
        if "ood" in node and "feature_revision" in node:
            del node["ood"]
            return True
        return any(_drop_ood(v) for v in node.values())
    if isinstance(node, list):
        return any(_drop_ood(v) for v in node)
    return False


def test_a_model_saved_before_the_calibration_loads_warns_and_never_flags(
    fitted: ToolRetriever, tmp_path: Path
) -> None:
    folder = fitted.save(tmp_path / "old")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert _drop_ood(manifest)
    manifest["integrity"]["manifest_sha256"] = manifest_digest(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.warns(UserWarning, match="without an out-of-distribution calibration"):
        old = load_retriever(folder)
    assert not old.rank(unrelated_requests(1)[0][1]).fallback


def test_a_corrupt_calibration_is_refused(fitted: ToolRetriever) -> None:
    from dtdr_agents.foundation.errors import ModelLoadError

    state = fitted.ood_.to_state()  # type: ignore[attr-defined]
    for bad in (
        {**state, "quantile": 2.0},
        {**state, "semantic": float("nan")},
        {"quantile": 0.01},
    ):
        with pytest.raises(ModelLoadError, match="ood calibration"):
            OODCalibration.from_state(bad)


@pytest.mark.benchmark
@pytest.mark.datasets
@pytest.mark.timeout(3600)  # four hybrid fits and 3,500 ranked steps: 37 min on a busy 2-core box
@pytest.mark.skipif(not TASKBENCH.is_dir(), reason="needs ../shared/datasets/taskbench_hf_subset")
def test_shares_flagged_on_demo_and_taskbench() -> None:
    """At most 2% of in-distribution steps flagged, at least 90% of unrelated requests.

    The measurement of ``python -m dtdr_agents.evaluation.ood_bench --taskbench DIR
    --demo-n 800 --params '{"select_l2": false}'`` (the signal does not read the combiner's
    pull; one combiner fit keeps this to a few minutes on 2 cores).
    """
    from dtdr_agents.datasets import load_train_test

    sets = []
    for name, path in (("demo", None), ("taskbench", TASKBENCH)):
        extra: dict[str, Any] = {"n": 800} if path is None else {}
        train, test = load_train_test(name, path, **extra)
        sets.append((name, train.demos, test.demos, train.tools))
    rows = run(sets, params={"select_l2": False})
    print(format_shares(rows))
    assert len(rows) == 4 and all(r.in_steps > 0 for r in rows)
    for row in rows:
        assert row.in_share <= 0.02, row
        assert row.unrelated_share >= 0.90, row
