"""Every retriever fits on zero demonstrations; `bench --n-demos N` fits on the first N."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dtdr_agents import END_OF_PLAN
from dtdr_agents.cli import main
from dtdr_agents.datasets import load_dataset
from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.evaluation.stop_rule import StopRule
from dtdr_agents.foundation.encoders import get_encoder
from dtdr_agents.retrievers import composite_ids, make_retriever, retriever_ids
from dtdr_agents.retrievers.base import load_retriever
from dtdr_agents.retrievers.registry import entry, unavailable_reason

TINY = Path(__file__).parent / "fixtures" / "datasets" / "taskbench" / "data_tiny"
QUERY = "Summarize report.pdf and email the summary to Anna"


class _Chat:
    def invoke(self, messages: object) -> object:
        class Reply:
            content = "A tool that summarizes a document and sends an email."

        return Reply()


@pytest.fixture(scope="module")
def data():
    return make_demo_dataset(n=30, seed=3)


@pytest.fixture(scope="module")
def tfidf(data):
    enc = get_encoder("tfidf")
    enc.fit([t.text() for t in data.tools] + [d.query for d in data.demos])
    return enc


def _build(rid, encoder):
    context = {"encoder": encoder, "chat_model": _Chat(), "seed": 7}
    for head in rid.split(":"):
        context.update(entry(head).cls.example_params())
    return make_retriever(rid, lenient=True, **context)


IDS = [*retriever_ids(), *(p.replace("<base>", "qts") for p in composite_ids())]


@pytest.mark.parametrize("rid", IDS)
def test_every_retriever_fits_on_no_demonstrations(rid, data, tfidf):
    model = _build(rid, tfidf)
    reason = unavailable_reason(model)
    if reason:
        pytest.skip(reason)
    assert model.fit([], data.tools) is model
    first = data.tools.names[0]
    for history in ((), (first,)):
        ranking = model.rank(QUERY, history)
        assert ranking.names[-1] == END_OF_PLAN
        assert len(ranking.names) == len(data.tools) + 1
        probs = np.asarray(ranking.probabilities)
        assert np.isfinite(probs).all() and (probs >= 0).all()
        assert probs.sum() == pytest.approx(1.0)
        top = ranking.top(1)[0]
        assert top.name in ranking.names and top.why == ranking.why(top.name) != ""


@pytest.mark.parametrize("rid", ["dtdr-c", "dr", "dtdr-l", "dtdr-l-s", "lr", "ptr:qts"])
def test_learned_retrievers_rank_by_similarity_and_say_so(rid, data, tfidf):
    model = _build(rid, tfidf).fit([], data.tools)
    assert model.zero_shot_
    ranking = model.rank(QUERY, ())
    assert ranking.explanation["zero_shot"] == "fitted on no demonstrations"
    assert "ranked_by" in ranking.explanation
    # the tool order is the query-only similarity order (qts), not a constant
    qts = make_retriever("qts", encoder=tfidf).fit([], data.tools).rank(QUERY, ())
    tools = [n for n in ranking.names if n != END_OF_PLAN]
    mine = sorted(tools, key=lambda n: -ranking.probability(n))
    theirs = sorted(tools, key=lambda n: -qts.probability(n))
    assert mine[:3] == theirs[:3]
    first = mine[0]
    if ":" not in rid:  # each tool's own feature: its cosine similarity to the request
        assert "cosine" in ranking.why(first)
    # end-of-plan follows the history: unlikely before any call, likely once a clause is done
    assert ranking.probability(END_OF_PLAN) < 0.5
    assert model.rank("Summarize the report", (first,)).probability(END_OF_PLAN) > 0.5


def test_zero_shot_model_saves_and_loads(tmp_path, data, tfidf):
    model = make_retriever("dtdr-c", encoder=tfidf).fit([], data.tools)
    model.save(tmp_path / "m")
    loaded = load_retriever(tmp_path / "m")
    assert loaded.zero_shot_
    a, b = model.rank(QUERY, ()), loaded.rank(QUERY, ())
    assert a.names == b.names
    np.testing.assert_allclose(a.probabilities, b.probabilities, rtol=1e-6)


def test_demonstrations_leave_the_learned_state(data, tfidf):
    model = make_retriever("dtdr-c", encoder=tfidf, seed=1).fit(data.demos[:20], data.tools)
    assert not model.zero_shot_
    assert "zero_shot" not in model.rank(QUERY, ()).explanation


def test_zero_shot_stop_rule_follows_the_clauses():
    rule = StopRule.zero_shot()
    query = "find the alpha item and then send the beta item"
    assert rule.probability(query, ()) < 0.5
    assert rule.probability(query, ("a",)) < 0.5
    assert rule.probability(query, ("a", "b")) > 0.5
    assert rule.probability(query, ("a", "b", "c")) > rule.probability(query, ("a", "b"))


def _bench(tmp_path: Path, n: int, retrievers: str, *extra: str) -> dict:
    out = tmp_path / f"r{n}{''.join(extra)}.json"
    code = main(
        [
            "bench",
            "--dataset",
            "taskbench",
            "--path",
            str(TINY),
            "--encoder",
            "tfidf",
            "--retrievers",
            retrievers,
            "--n-demos",
            str(n),
            "--no-cache",
            "-q",
            "--json",
            str(out),
            *extra,
        ]
    )
    assert code == 0
    report: dict = json.loads(out.read_text())
    return report


def test_bench_n_demos(tmp_path):
    zero = _bench(tmp_path, 0, "qts,dtdr-c")
    assert zero["n_demos"] == 0 and zero["n_train"] == 0
    assert set(zero["results"]) == {"qts", "dtdr-c"}
    for entry_ in zero["results"].values():
        assert 0.0 <= entry_["tool_mrr"] <= 1.0
        assert entry_["stop_rule"] == "shared"
    two = _bench(tmp_path, 2, "dtdr-c")
    assert two["n_demos"] == 2 and two["n_train"] == 2
    assert two["n_test"] == zero["n_test"]


def test_bench_records_the_hybrids_tool_graph(tmp_path):
    """TaskBench publishes a graph: bench gives it to the hybrid unless told to derive one."""
    published = len(load_dataset("taskbench", str(TINY)).tool_graph or ())
    given = _bench(tmp_path, 0, "hybrid")
    assert given["tool_graph"] == f"dataset ({published} published edges)"
    derived = _bench(tmp_path, 0, "hybrid", "--tool-graph", "derived")
    assert derived["tool_graph"].startswith("derived from the catalogue (--tool-graph derived)")
    assert derived["results"]["hybrid"]["n_steps"] == given["results"]["hybrid"]["n_steps"]


def test_bench_n_demos_rejects_a_negative_count(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--dataset", "taskbench", "--path", str(TINY), "--n-demos", "-1"])
    assert "--n-demos" in capsys.readouterr().err


def test_a_step_selector_without_a_retriever_fits_hybrid_on_the_tools(data, tfidf) -> None:
    from dtdr_agents.runtime import StepSelector

    selector = StepSelector(data.tools, None)
    assert selector.retriever.retriever_id == "hybrid"
    assert selector.retriever.cv_.get("n_demos", 0) == 0  # no demonstrations were given
    first = selector.select(QUERY)
    calls = [n for n in first.selection.names if n != END_OF_PLAN][:1]
    after = selector.select(QUERY, calls, previous=first)
    assert after.explanation["zero_shot"] and after.history == tuple(calls)
    assert after.selection.names != first.selection.names  # the call so far moved the ranking
