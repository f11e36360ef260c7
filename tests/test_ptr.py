"""PTR (`ptr`, `ptr:<base>`): the three stages, the offline path, bad answers, ablations."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import numpy as np
import pytest

from dtdr_agents.foundation.errors import ChatModelError
from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.retrievers.base import Scores, ToolRetriever
from dtdr_agents.retrievers.baselines import QTSRetriever
from dtdr_agents.retrievers.ptr import PTRRecommender

TOOLS = [
    {"name": "WeatherTool", "description": "weather forecast temperature rain umbrella"},
    {"name": "HotelTool", "description": "book a hotel room for the night"},
    {"name": "FlightTool", "description": "book a flight ticket airline"},
    {"name": "NewsTool", "description": "latest news headlines"},
    {"name": "FinanceTool", "description": "stock price market finance"},
    {"name": "ReminderTool", "description": "set a reminder alarm"},
]
PATTERNS = [
    ("weather forecast and a hotel room in {}", ("WeatherTool", "HotelTool")),
    (
        "flight ticket to {} and a hotel room and the weather",
        ("FlightTool", "HotelTool", "WeatherTool"),
    ),
    ("stock price of {}", ("FinanceTool",)),
    (
        "news about {} and remind me to read the stock price",
        ("NewsTool", "ReminderTool", "FinanceTool"),
    ),
]
CITIES = ["paris", "rome", "tokyo", "lima", "oslo", "cairo", "delhi", "quito", "perth", "miami"]


def _demos() -> list[Demonstration]:
    return [
        Demonstration(text.format(city), calls, (), id=f"d{p}-{c}")
        for p, (text, calls) in enumerate(PATTERNS)
        for c, city in enumerate(CITIES)
    ]


def _fit(**params: Any) -> PTRRecommender:
    return PTRRecommender(base=QTSRetriever(encoder="tfidf"), **params).fit(_demos(), TOOLS)


class ScriptedChat:
    """A chat model answering from a list (an exception is raised instead of returned)."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = list(answers)
        self.calls = 0

    def invoke(self, messages: list[tuple[str, str]]) -> str:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return str(answer)


@pytest.fixture(scope="module")
def ptr() -> PTRRecommender:
    return _fit()


# ---------------------------------------------------------------------- offline path
def test_offline_recommendation_is_the_bundle_and_says_stage_2_was_skipped(ptr) -> None:
    rec = ptr.recommend("weather forecast and a hotel room in berlin")
    assert set(rec.names) == {"WeatherTool", "HotelTool"}
    assert set(rec.stages.values()) <= {"bundle", "rerank"}
    assert rec.by_stage("bundle")
    assert rec.explanation["stage2"] == "skipped: no chat model (offline path)"
    assert "bundle of demonstration d0-" in rec.explanation["stage1"]
    assert rec.policy.startswith("learned set size (2")
    assert all(0.0 <= p <= 1.0 for p in rec.probabilities)
    assert "stage 1" in rec.why[rec.by_stage("bundle")[0]]


def test_offline_set_size_follows_the_request(ptr) -> None:
    one = ptr.recommend("stock price of berlin")
    three = ptr.recommend("flight ticket to berlin and a hotel room and the weather")
    assert one.names == ("FinanceTool",)
    assert set(three.names) == {"FlightTool", "HotelTool", "WeatherTool"}


def test_fusion_is_fitted_on_held_out_demonstrations(ptr) -> None:
    assert ptr.fusion_.startswith("logistic regression on 3-fold")
    fixed = _fit(folds=0)
    assert fixed.fusion_ == "default weights"
    assert fixed.recommend("stock price of berlin").names


def test_history_tools_stay_in_the_set(ptr) -> None:
    rec = ptr.recommend("stock price of berlin", history=["ReminderTool"])
    assert rec.names[0] == "ReminderTool" and rec.stages["ReminderTool"] == "history"
    assert "FinanceTool" in rec.names


def test_no_similar_bundle_still_recommends_from_stage_3() -> None:
    model = _fit(min_similarity=0.999)
    rec = model.recommend("weather forecast please")
    assert rec.names and not rec.fallback
    assert set(rec.stages.values()) == {"rerank"}
    assert rec.explanation["stage1"].startswith("no similar bundle")


class _FarRetriever(ToolRetriever):
    """A base that calls every request out of distribution (no retriever id: unregistered)."""

    uses_encoder: ClassVar[bool] = True

    def __init__(self, *, encoder: Any = "tfidf", prior_weight: float = 0.1) -> None:
        self.encoder = encoder
        self.prior_weight = prior_weight

    def _fit(self, demos: list[Demonstration], tools: Toolset) -> None:
        return None

    def _score(self, query: str, history: tuple[str, ...]) -> Scores:
        return Scores(np.full(len(self.labels_), 1.0 / len(self.labels_)), ood_reason="far away")


def test_out_of_distribution_is_empty_and_says_why() -> None:
    model = PTRRecommender(base=_FarRetriever(), min_similarity=0.999, folds=0)
    model.fit(_demos(), TOOLS)
    rec = model.recommend("something else entirely")
    assert rec.names == () and rec.fallback
    assert rec.reason is not None and "far away" in rec.reason


def test_rank_is_a_distribution(ptr) -> None:
    ranking = ptr.rank("stock price of berlin")
    assert ranking.probabilities.sum() == pytest.approx(1.0)
    assert ranking.ranked_names()[0] == "FinanceTool"


# ---------------------------------------------------------------------- with a chat model
def test_stage_2_and_3_with_a_scripted_chat_model() -> None:
    chat = ScriptedChat(['["weather in berlin", "a flight"]', '["WeatherTool"]', "[]"])
    model = _fit(chat_model=chat)
    rec = model.recommend("weather forecast and a hotel room in berlin, and a flight")
    assert rec.stages["WeatherTool"] == "coverage"
    assert "HotelTool" not in rec.names  # matched nothing: dropped by coverage mapping
    added = rec.by_stage("rerank")
    assert len(added) == 1 and added[0] != "WeatherTool"
    assert "partial solving" in rec.explanation["stage2"]
    assert rec.policy == "chat-model coverage mapping decides the size"
    assert chat.calls == 3


@pytest.mark.parametrize(
    ("answers", "why"),
    [
        (["- weather\n- hotel"], "not JSON"),
        (['["weather"]', '["NoSuchTool"]'], "outside the catalogue"),
        (["[]"], "empty list"),
        ([ChatModelError("boom")], "boom"),
    ],
)
def test_unusable_answers_fall_back_to_the_offline_path(answers: list[Any], why: str) -> None:
    model = _fit(chat_model=ScriptedChat(answers))
    rec = model.recommend("weather forecast and a hotel room in berlin")
    assert set(rec.names) == {"WeatherTool", "HotelTool"}
    assert "offline path used" in rec.explanation["stage2"]
    assert why in rec.explanation["stage2"]
    assert rec.policy.startswith("learned set size")


# -------------------------------------------------------------------------- ablations
def test_ablation_flags() -> None:
    no_bundle = _fit(use_bundles=False)
    rec = no_bundle.recommend("weather forecast and a hotel room in berlin")
    assert rec.names and "bundle" not in rec.stages.values()
    assert no_bundle.recommend("x y").explanation["stage1"] == "off"
    no_rerank = _fit(use_rerank=False)
    rec = no_rerank.recommend("weather forecast and a hotel room in berlin")
    assert set(rec.stages.values()) == {"bundle"}
    chat = ScriptedChat([])
    no_coverage = _fit(chat_model=chat, use_coverage=False)
    rec = no_coverage.recommend("weather forecast and a hotel room in berlin")
    assert rec.explanation["stage2"] == "off" and chat.calls == 0


def test_bad_parameters() -> None:
    with pytest.raises(ValueError, match="bundle_k"):
        _fit(bundle_k=0)
    with pytest.raises(ValueError, match="folds"):
        _fit(folds=-1)


def test_explanations_are_json(ptr) -> None:
    rec = ptr.recommend("news about berlin and remind me to read the stock price")
    assert json.loads(json.dumps(rec.as_dict()))["names"] == list(rec.names)
    assert len(rec.names) == 3


# ------------------------------------------------- stage 2 through the real OpenAI client
def test_stage_2_through_the_loopback_openai_server() -> None:
    pytest.importorskip("openai")
    from openai_server import OpenAIChatServer

    from dtdr_agents.foundation.chat import OpenAIChat

    def responder(body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["messages"][-1]["content"]
        if "extract key requirements" in prompt:
            return {"content": '```json\n["the weather in berlin", "a flight to berlin"]\n```'}
        if '"the weather in berlin"' in prompt:
            return {"content": '["WeatherTool"]'}
        return {"content": "[]"}

    with OpenAIChatServer(responder) as server:
        chat = OpenAIChat("test-model", base_url=server.base_url, max_retries=0)
        model = _fit(chat_model=chat)
        rec = model.recommend("weather forecast and a hotel room in berlin, and a flight")
        prompts = [r["messages"][-1]["content"] for r in server.requests]
    assert len(prompts) == 3
    assert "Key Requirements:" in prompts[0]
    assert "- **WeatherTool**:" in prompts[1] and "- **HotelTool**:" in prompts[1]
    assert rec.stages["WeatherTool"] == "coverage"
    assert rec.by_stage("rerank") == ("FlightTool",)
    assert "HotelTool" not in rec.names


# ---------------------------------------------------------------- recommendation bench
def test_recommend_bench_scores_ablations_and_calibration() -> None:
    from dtdr_agents.evaluation.recommend_bench import (
        format_scores,
        ptr_protocol_split,
        run_recommend_bench,
    )

    demos = _demos()
    train, test = ptr_protocol_split(demos, n_test=8)
    assert test == demos[:8] and train == demos[8:]
    with pytest.raises(ValueError, match="n_test"):
        ptr_protocol_split(demos, n_test=len(demos))
    scores = run_recommend_bench(
        train, test, Toolset(TOOLS), ["ptr:qts", "qts"], ablations=True, encoder="tfidf"
    )
    names = [s.retriever for s in scores]
    assert names == [
        "ptr:qts",
        "ptr:qts w/o stage 1",
        "ptr:qts w/o stage 2",
        "ptr:qts w/o stage 3",
        "qts",
    ]
    ptr_score = scores[0]
    assert ptr_score.tracc > scores[-1].tracc  # a learned size beats the fixed top-5
    assert 0.0 <= ptr_score.tracc <= 1.0 and ptr_score.n == 8
    assert [c["target"] for c in ptr_score.calibration] == [0.5, 0.8, 0.9, 0.95]
    assert scores[-1].calibration == [] and scores[-1].policy == "SelectionPolicy(k=5)"
    assert set(ptr_score.latency_ms) == {"p50", "p99", "mean"}
    table = format_scores(scores)
    assert "| ptr:qts w/o stage 3 |" in table and "set-size calibration of ptr:qts" in table


def test_recommend_bench_command_is_registered() -> None:
    from dtdr_agents.cli import build_parser

    args = build_parser().parse_args(
        ["recommend-bench", "--dataset", "rectools", "--path", "x", "--protocol", "ptr"]
    )
    assert args.protocol == "ptr" and args.retrievers == "ptr"


def test_save_load_round_trip_of_ptr_qts(ptr, tmp_path) -> None:
    path = ptr.save(tmp_path / "ptr")
    assert (path / "base" / "manifest.json").is_file()  # the base, nested
    manifest = json.loads((path / "manifest.json").read_text())
    assert "chat_model" not in manifest["params"] and manifest["runtime_params"] == ["chat_model"]
    chat = ScriptedChat([])
    loaded = PTRRecommender.load(path, params={"chat_model": chat})
    assert loaded.chat_model is chat and type(loaded.fitted_base()) is QTSRetriever
    for query in ("weather forecast and a hotel room in berlin", "stock price of oslo"):
        a, b = ptr.recommend(query), loaded.recommend(query, ())
        assert a.names == b.names and a.stages == b.stages
        assert "offline path used" in b.explanation["stage2"]  # the empty script fails
        np.testing.assert_allclose(a.probabilities, b.probabilities, atol=1e-6)


def test_set_size_is_the_learned_size(ptr) -> None:
    assert ptr.set_size("stock price of berlin") == 1
    assert ptr.set_size("flight ticket to berlin and a hotel room and the weather") == 3
    dist = ptr.size_distribution("stock price of berlin")
    assert dist.sum() == pytest.approx(1.0) and dist.argmax() == 1
