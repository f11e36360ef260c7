"""Recommendations: the record, the default policy, the set-size model, PTR's stages, TRACC."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dtdr_agents.evaluation.metrics import tracc
from dtdr_agents.evaluation.protocol import evaluate, set_metrics
from dtdr_agents.foundation.selection import SelectionPolicy
from dtdr_agents.foundation.types import END_OF_PLAN, Demonstration, Ranking
from dtdr_agents.recommend import (
    Recommendation,
    SetSizeModel,
    format_calibration,
    policy_name,
    recommend_from_ranking,
)
from dtdr_agents.recommend.prompts import (
    EXTRACT_REQUIREMENTS,
    MATCH_TOOLS,
    MalformedAnswerError,
    matching_prompt,
    parse_matches,
    parse_requirements,
    requirements_prompt,
)
from dtdr_agents.recommend.stages import (
    bundle_acquisition,
    coverage_mapping,
    multi_view_rank,
    top_indices,
)


def _ranking(probs: dict[str, float], *, fallback: bool = False) -> Ranking:
    names = (*probs, END_OF_PLAN)
    p = np.array([*probs.values(), 0.0])
    return Ranking(
        names, p / p.sum(), fallback=fallback, fallback_reason="far" if fallback else None
    )


class ScriptedChat:
    """A chat model answering from a list, recording the prompts."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def invoke(self, messages: list[tuple[str, str]]) -> str:
        self.prompts.append(messages[-1][1])
        return self.answers.pop(0)


# --------------------------------------------------------------------------- the record
def test_recommendation_checks_its_fields() -> None:
    with pytest.raises(ValueError, match="empty recommendation"):
        Recommendation((), ())
    with pytest.raises(ValueError, match="same length"):
        Recommendation(("a",), (), stages={"a": "ranking"})
    with pytest.raises(ValueError, match="stage of every tool"):
        Recommendation(("a",), (0.5,))
    with pytest.raises(ValueError, match="repeat"):
        Recommendation(("a", "a"), (0.5, 0.5), stages={"a": "ranking"})
    rec = Recommendation(("a", "b"), (0.9, 0.4), stages={"a": "bundle", "b": "rerank"})
    assert rec.size == 2
    assert rec.by_stage("rerank") == ("b",)
    assert json.loads(json.dumps(rec.as_dict()))["stages"] == {"a": "bundle", "b": "rerank"}
    empty = Recommendation((), (), fallback=True, reason="far")
    assert empty.size == 0 and empty.reason == "far"


# ------------------------------------------------------------------ the default policy
def test_default_recommendation_uses_policy_or_size() -> None:
    ranking = _ranking({"a": 0.5, "b": 0.3, "c": 0.15, "d": 0.05})
    by_policy = recommend_from_ranking(ranking, policy=SelectionPolicy(k=2, threshold=None))
    assert by_policy.names == ("a", "b")
    assert by_policy.policy == "SelectionPolicy(k=2)"
    assert set(by_policy.stages.values()) == {"ranking"}
    by_size = recommend_from_ranking(ranking, size=3)
    assert by_size.names == ("a", "b", "c")
    assert by_size.policy == "learned set size (3)"
    assert by_size.probabilities[0] == pytest.approx(0.5)
    cover = SelectionPolicy(k=None, threshold=None, coverage=0.9)
    assert policy_name(cover) == "SelectionPolicy(coverage=0.9)"
    assert policy_name(SelectionPolicy()) == "SelectionPolicy(k=5, threshold=0.0)"


def test_default_recommendation_keeps_history() -> None:
    ranking = _ranking({"a": 0.5, "b": 0.3, "c": 0.15, "d": 0.05})
    rec = recommend_from_ranking(ranking, size=2, history=["d"])
    assert rec.names == ("d", "a", "b")  # an unexpected call widens the set
    assert recommend_from_ranking(ranking, size=2, history=["b"]).names == ("b", "a")
    assert rec.stages["d"] == "history"
    assert rec.why["d"] == "already called in this request"


def test_default_recommendation_out_of_distribution_is_empty_and_says_why() -> None:
    rec = recommend_from_ranking(_ranking({"a": 0.6, "b": 0.4}, fallback=True), size=2)
    assert rec.names == () and rec.fallback and rec.reason == "far"


def test_default_recommendation_is_never_empty_in_distribution() -> None:
    ranking = _ranking({"a": 0.6, "b": 0.4})
    rec = recommend_from_ranking(ranking, policy=SelectionPolicy(k=None, threshold=0.9))
    assert rec.names == ("a",)


# ---------------------------------------------------------------------- set-size model
def _clustered(n_per: int = 30, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(3, 16))
    emb = np.concatenate([c + 0.1 * rng.normal(size=(n_per, 16)) for c in centres])
    sizes = np.repeat([1, 3, 6], n_per)
    return emb, sizes


def test_set_size_model_learns_sizes_from_neighbours() -> None:
    emb, sizes = _clustered()
    model = SetSizeModel().fit(emb, sizes)
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    for row, size in ((0, 1), (35, 3), (80, 6)):
        assert model.predict_from_sims(model.embeddings_ @ unit[row]) == size
    cal = model.calibration_
    assert cal["exact"] > 0.95 and cal["mae"] < 0.1
    assert [r["target"] for r in cal["targets"]] == [0.5, 0.8, 0.9, 0.95]
    assert all(r["achieved"] >= r["target"] for r in cal["targets"])
    assert "target 0.90 -> achieved" in format_calibration(cal)


def test_set_size_model_coverage_and_state_round_trip() -> None:
    emb, sizes = _clustered()
    model = SetSizeModel().fit(emb, sizes)
    sims = model.embeddings_ @ model.embeddings_[40]
    assert model.size_for_coverage(sims, 0.5) == 3
    assert model.size_for_coverage(sims, 1.0) == 6  # the prior covers every size
    state, arrays = model.state()
    back = SetSizeModel.from_state(json.loads(json.dumps(state)), arrays)
    np.testing.assert_allclose(
        back.predict_proba_from_sims(sims), model.predict_proba_from_sims(sims)
    )
    with pytest.raises(ValueError, match=">= 1"):
        SetSizeModel().fit(emb, np.zeros(len(emb), dtype=int))
    with pytest.raises(ValueError, match="coverage"):
        model.size_for_coverage(sims, 0.0)


# ------------------------------------------------------------------------ PTR's stages
def test_bundle_acquisition_top_k_and_min_similarity() -> None:
    sims = np.array([0.2, 0.9, 0.5])
    bundles = [("a",), ("b", "c"), ("c", "d")]
    one = bundle_acquisition(sims, bundles)
    assert one.tools == ("b", "c") and one.sources == (1,) and one.similarity == pytest.approx(0.9)
    two = bundle_acquisition(sims, bundles, k=2)
    assert two.tools == ("b", "c", "d") and two.sources == (1, 2)
    none = bundle_acquisition(sims, bundles, min_similarity=0.95)
    assert none.tools == () and none.similarity == pytest.approx(0.9)
    with pytest.raises(ValueError, match="k must be"):
        bundle_acquisition(sims, bundles, k=0)


def test_multi_view_rank_orders_by_frequency_then_first_appearance() -> None:
    dsa = ["a", "b", "c"]
    hqc = ["c", "b", "x"]
    cte = ["b", "y"]
    assert multi_view_rank(dsa, hqc, cte) == ["b", "c", "a", "x", "y"]
    assert multi_view_rank(["a", "a"], ["b"]) == ["a", "b"]  # a view counts a tool once
    assert list(top_indices(np.array([0.1, 0.5, 0.5, 0.2]), 2)) == [1, 2]


def test_prompts_are_the_papers_with_a_json_instruction() -> None:
    assert "extract key requirements from user queries" in EXTRACT_REQUIREMENTS
    assert "ignore the proper nouns" in MATCH_TOOLS
    prompt = requirements_prompt("Book a flight")
    assert '"Book a flight"' in prompt and "JSON array" in prompt
    listing = matching_prompt("fly", {"FlightTool": "Book flights"})
    assert "- **FlightTool**: Book flights" in listing and '"fly"' in listing


@pytest.mark.parametrize(
    ("answer", "message"),
    [("- a\n- b", "not JSON"), ('{"a": 1}', "array of strings"), ("[]", "empty")],
)
def test_parse_requirements_rejects_bad_answers(answer: str, message: str) -> None:
    with pytest.raises(MalformedAnswerError, match=message):
        parse_requirements(answer)


def test_parse_answers() -> None:
    assert parse_requirements('```json\n["x", "y", "x"]\n```') == ["x", "y"]
    assert parse_matches('["A", "C"]', offered=["A", "B"], catalogue=["A", "B", "C"]) == ["A"]
    with pytest.raises(MalformedAnswerError, match="outside the catalogue"):
        parse_matches('["Z"]', offered=["A"], catalogue=["A", "B"])


def test_coverage_mapping_four_steps() -> None:
    chat = ScriptedChat(['["weather in Paris", "a hotel"]', '["WeatherTool"]', "[]"])
    bundle = {"WeatherTool": "Weather", "NewsTool": "News"}
    cov = coverage_mapping(
        chat, "Weather and a hotel in Paris", bundle, ["WeatherTool", "NewsTool", "HotelTool"]
    )
    assert cov.requirements == ("weather in Paris", "a hotel")
    assert cov.matches == {"weather in Paris": ("WeatherTool",), "a hotel": ()}
    assert cov.keep == ("WeatherTool",)
    assert cov.unsolved == ("a hotel",)
    assert cov.verdict == "partial solving"
    assert len(chat.prompts) == 3 and '"a hotel"' in chat.prompts[2]
    over = coverage_mapping(
        ScriptedChat(['["weather"]', '["WeatherTool"]']), "q", bundle, list(bundle)
    )
    assert over.verdict == "oversolving" and over.unsolved == ()
    exact = coverage_mapping(
        ScriptedChat(['["weather"]', '["WeatherTool", "NewsTool"]']), "q", bundle, list(bundle)
    )
    assert exact.verdict == "exact solving"


# ------------------------------------------------------------ TRACC in the evaluation
def test_set_metrics_are_tracc_and_size_error() -> None:
    rel = frozenset({"a", "b", "c"})
    assert set_metrics(["a", "b", "c", "x", "y"], rel) == {
        "tracc": pytest.approx(0.6),
        "size_error": 2.0,
    }
    assert set_metrics(["a", "b"], rel)["tracc"] == pytest.approx(tracc(["a", "b"], rel))


def test_evaluate_scores_the_recommended_set_on_set_valued_data() -> None:
    from dtdr_agents.retrievers.baselines import QTSRetriever

    tools = [
        {"name": "weather", "description": "weather forecast temperature rain"},
        {"name": "hotel", "description": "book a hotel room"},
        {"name": "flight", "description": "book a flight ticket"},
    ]
    demos = [
        Demonstration("weather forecast and a hotel room", ("weather", "hotel"), ()),
        Demonstration("flight ticket", ("flight",), ()),
    ]
    model = QTSRetriever(encoder="tfidf").fit(demos, tools)
    result = evaluate(model, demos, set_valued=True)
    assert result.error is None
    assert {"tracc", "size_error"} <= set(result.metrics)
    assert result.recommend_policy is not None
    summary = result.summary()
    assert summary["recommend_policy"] == result.recommend_policy
    assert set(summary["recommend_ms"]) == {"p50", "p99", "mean"}
    sequential = evaluate(model, demos)
    assert "tracc" not in sequential.metrics and sequential.recommend_policy is None


def test_bench_report_shows_tracc_only_for_set_valued_results() -> None:
    from dtdr_agents.evaluation.protocol import EvalResult, ScoredStep
    from dtdr_agents.evaluation.report import build_report, format_markdown, format_table

    paper = {"mrr": 0.9, "tracc": 0.7, "size_error": 0.5}
    with_set = EvalResult(
        "ptr",
        metrics=paper,
        tool_metrics={"tool_mrr": 0.9, "tool_top1": 1.0},
        rows=[ScoredStep(0, 0, 2, paper, {"tool_mrr": 0.9, "tool_top1": 1.0})],
        recommend_policy="learned set size",
        recommend_ms={"p50": 0.3, "p99": 0.5, "mean": 0.3},
    )
    report = build_report(
        dataset="rectools",
        n_train=1,
        n_test=1,
        encoder="e",
        runs={"ptr": [with_set]},
        seeds=[0],
        same_requests=True,
    )
    entry = report["results"]["ptr"]
    assert entry["tracc"] == 0.7 and entry["size_error"] == 0.5
    assert entry["recommend_policy"] == "learned set size"
    assert "stop_f1" not in entry  # a set has no end of plan
    table = format_markdown(report)
    assert "| tracc | size_error |" in table and "ptr: learned set size" in table
    assert "stop_f1" not in table
    assert "tracc" in format_table(report)
    plain_rows = [ScoredStep(0, 0, 1, {"mrr": 0.5}, {"tool_mrr": 0.5, "tool_top1": 0.0})]
    plain = EvalResult("qts", metrics={"mrr": 0.5}, tool_metrics={"tool_mrr": 0.5}, rows=plain_rows)
    report = build_report(
        dataset="d",
        n_train=1,
        n_test=1,
        encoder="e",
        runs={"qts": [plain]},
        seeds=[0],
        same_requests=True,
    )
    assert "tracc" not in format_table(report)
