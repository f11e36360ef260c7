"""The hybrid's sub-goals from a ToolQP planner: one plan per request, clauses when it fails.

The live test runs `ChatPlanner` over `OpenAIChat` against a real HTTP server on loopback
speaking the OpenAI chat API (tests/openai_server.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np
import pytest
from openai_server import OpenAIChatServer

from dtdr_agents.foundation.chat import OpenAIChat
from dtdr_agents.foundation.clauses import stop_probability
from dtdr_agents.foundation.types import END_OF_PLAN, Tool
from dtdr_agents.planning import ChatPlanner, Plan, ReplayPlanner
from dtdr_agents.retrievers import load_retriever
from dtdr_agents.retrievers.hybrid import HybridRetriever

TOOLS = [
    Tool("image_caption", "Generate a text caption describing an image"),
    Tool("translate_text", "Translate text from one language into another language"),
    Tool("text_to_speech", "Read a text aloud as synthesized speech audio"),
    Tool("weather_lookup", "Current weather forecast for a city"),
]
QUERY = "My holiday photo beach.jpg needs words in French for my aunt"  # one clause
GOALS = ("caption the photo", "translate that text into French", "read it aloud")
PLAN_TEXT = (
    "<task_breakdown>caption, translate, speak</task_breakdown>\n"
    '<sub_goals>["caption the photo", "translate that text into French", "read it aloud"]'
    "</sub_goals>"
)


def _fit(encoder: Any, **params: Any) -> HybridRetriever:
    return HybridRetriever(encoder=encoder, **params).fit([], TOOLS)


def test_recorded_sub_goals_replace_the_clauses(encoder):
    plan = Plan(QUERY, GOALS, GOALS)
    model = _fit(encoder, goal_planner=ReplayPlanner({QUERY: plan}))
    plain = _fit(encoder)
    after = model.rank(QUERY, ("image_caption",))
    assert after.explanation["sub_goals"] == "planner"
    assert plain.rank(QUERY, ("image_caption",)).explanation["sub_goals"] == "clauses"
    # three sub-goals, one call: the stop rule waits (the clause count would stop now)
    assert after.probability(END_OF_PLAN) == pytest.approx(stop_probability(3, 1), rel=1e-3)
    assert plain.rank(QUERY, ("image_caption",)).probability(END_OF_PLAN) > 0.5
    # the two open sub-goals' tools lead (the model does not read their order)
    assert {t.name for t in after.top(2)} == {"translate_text", "text_to_speech"}
    last = model.rank(QUERY, ("image_caption", "translate_text"))
    assert last.top(1)[0].name == "text_to_speech"  # the one sub-goal left
    done = model.rank(QUERY, ("image_caption", "translate_text", "text_to_speech"))
    assert done.top(1)[0].name == END_OF_PLAN


class Counting:
    """A planner that counts its calls (sync and async) and plans `GOALS`."""

    def __init__(self) -> None:
        self.calls = 0

    def plan(self, request: str, search: Any) -> Plan:
        self.calls += 1
        assert search("say it out loud")[0][0] == "text_to_speech"  # feedback: real tools
        return Plan(request, GOALS, GOALS)

    async def aplan(self, request: str, search: Any) -> Plan:
        return self.plan(request, search)


def test_one_plan_per_request_never_one_per_step_nor_at_fit(encoder, demo_data, demo_split):
    planner = Counting()
    model = _fit(encoder, goal_planner=planner)
    for history in ((), ("image_caption",), ("image_caption", "translate_text")):
        model.rank(QUERY, history)
    assert planner.calls == 1
    asyncio.run(model.aprepare("Read the forecast for Oslo aloud"))
    model.rank("Read the forecast for Oslo aloud", ())
    assert planner.calls == 2  # planned ahead by aprepare, reused by rank
    fitted = HybridRetriever(encoder=encoder, goal_planner=planner)
    fitted.fit(demo_split[0][:12], demo_data.tools)
    assert planner.calls == 2  # the cross-fitting scores demonstrations by their clauses
    assert fitted.goal_planner is planner


def test_a_failing_planner_falls_back_to_the_clauses_with_a_warning(encoder, caplog):
    plain = _fit(encoder)
    failing = _fit(encoder, goal_planner=ReplayPlanner({}))  # no recorded plan
    with caplog.at_level(logging.WARNING, logger="dtdr_agents.retrievers.hybrid_features"):
        ranking = failing.rank(QUERY, ("image_caption",))
    assert "no recorded plan for this request" in caplog.text
    assert ranking.explanation["sub_goals"].startswith("clauses (the planner failed: Planning")
    np.testing.assert_allclose(
        ranking.probabilities, plain.rank(QUERY, ("image_caption",)).probabilities
    )
    empty = _fit(encoder, goal_planner=ReplayPlanner({QUERY: Plan(QUERY, (" ",), ("q",))}))
    assert "no sub-goal" in empty.rank(QUERY, ()).explanation["sub_goals"]


def _server_planner(body: dict[str, Any]) -> dict[str, Any]:
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if turn == 0:
        return {"content": PLAN_TEXT}
    return {"content": GOALS[turn - 1] if turn <= len(GOALS) else "<stop_retrieval>"}


def test_the_agents_own_chat_model_plans_over_http(encoder, tmp_path):
    with OpenAIChatServer(_server_planner) as server:
        chat = OpenAIChat("planner", base_url=server.base_url, max_retries=0, timeout=10)
        model = _fit(encoder, goal_planner=ChatPlanner(chat))
        first = model.rank(QUERY, ("image_caption",))
        sent = len(server.requests)
        model.rank(QUERY, ("image_caption", "translate_text"))
        assert len(server.requests) == sent  # the plan is kept for the request
        assert first.explanation["sub_goals"] == "planner"
        assert first.probability(END_OF_PLAN) == pytest.approx(stop_probability(3, 1), rel=1e-3)
        model.save(tmp_path / "m")  # the planner is not saved
        loaded = load_retriever(tmp_path / "m")
        assert loaded.rank(QUERY, ("image_caption",)).explanation["sub_goals"] == "clauses"
        loaded.set_params(goal_planner=ChatPlanner(chat))
        assert loaded.rank(QUERY, ("image_caption",)).explanation["sub_goals"] == "planner"
        server.inject(500, times=20)
        broken = _fit(encoder, goal_planner=ChatPlanner(chat))
        reason = broken.rank("Caption sunset.png", ()).explanation["sub_goals"]
        assert reason.startswith("clauses (the planner failed: ChatModelError")


def test_bench_takes_the_hybrids_sub_goals_from_the_model_once_per_request(tmp_path, capsys):
    """`bench --hybrid-goals planner` over the loopback server: one chat call per test request
    (sub-goals alone), whatever the seeds; the recorded plans resume a run and replay it."""
    import json

    from dtdr_agents.cli import main as cli_main

    def goals_only(body: dict[str, Any]) -> dict[str, Any]:
        assert not any(m["role"] == "assistant" for m in body["messages"])  # the first turn
        return {"content": PLAN_TEXT}

    recorded = tmp_path / "goals.jsonl"
    live_json, replay_json = tmp_path / "live.json", tmp_path / "replay.json"
    bench = ["bench", "--dataset", "demo", "--limit", "60", "--retrievers", "hybrid"]
    bench += ["--n-demos", "0", "--encoder", "tfidf", "--no-cache", "-q", "--hybrid-goals"]
    with OpenAIChatServer(goals_only) as server:
        live = [*bench, "planner", "--chat-base-url", server.base_url, "--chat-model", "p"]
        live += ["--record-plans", str(recorded)]
        assert cli_main([*live, "--seeds", "2", "--json", str(live_json)]) == 0
        asked = len(server.requests)
        assert cli_main(live) == 0  # the recorded plans are replayed: nothing asked again
        assert len(server.requests) == asked
    report = json.loads(live_json.read_text())
    goals = report["hybrid_goals"]
    assert goals["source"] == "live chat model" and goals["fell_back"] == 0
    assert goals["planned"] == goals["asked"] == asked == len(recorded.read_text().splitlines())
    assert "one call per request" in capsys.readouterr().out
    assert (
        cli_main(
            [
                *bench,
                "planner",
                "--plans",
                str(recorded),
                "--seeds",
                "2",
                "--json",
                str(replay_json),
            ]
        )
        == 0
    )
    replayed = json.loads(replay_json.read_text())
    assert replayed["hybrid_goals"]["planned"] == asked
    assert replayed["results"]["hybrid"]["tool_mrr"] == report["results"]["hybrid"]["tool_mrr"]
    assert cli_main([*bench, "planner"]) == 2  # no planner given
    assert "--hybrid-goals planner needs one planner" in capsys.readouterr().err
