"""ToolQP planning: the Fig. 14 prompt, turn parsers, plans files, rank fusion, chat planners.

The chat planner is tested with a scripted chat model and through the real `openai` client
against the loopback server in tests/openai_server.py, which plays the planner.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from openai_server import OpenAIChatServer

from dtdr_agents.foundation.chat import OpenAIChat
from dtdr_agents.foundation.errors import DatasetFormatError
from dtdr_agents.planning import (
    FIG14_SYSTEM_PROMPT,
    SOURCE_CHAT,
    SOURCE_INSTRUCTION,
    ChatPlanner,
    Plan,
    PlanningError,
    PlanRecorder,
    ReplayPlanner,
    fuse,
    instruction_plans,
    parse_first_turn,
    parse_query_turn,
    peak_rank_fusion,
    read_plans,
    rrf_fusion,
    write_plans,
)
from dtdr_agents.planning.prompts import NEXT_QUERY_TURN

PLAN_TEXT = (
    "<task_breakdown> Find hotels, then check the flight. </task_breakdown>\n"
    '<sub_goals> ["Suggest beachfront hotels with reviews", "Flight cancellation probability"]'
    " </sub_goals>"
)


def fake_search(query: str) -> list[tuple[str, str]]:
    """Five made-up results naming the query, so feedback can be traced."""
    return [(f"tool_{i}_{query.split()[0]}", f"does {query} part {i}") for i in range(7)]


class ScriptedChat:
    """A chat model answering from a script, recording every conversation it was sent."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = list(answers)
        self.calls: list[list[tuple[str, str]]] = []

    def invoke(self, messages: list[tuple[str, str]]) -> str:
        self.calls.append(list(messages))
        return self.answers[min(len(self.calls) - 1, len(self.answers) - 1)]


# ------------------------------------------------------------------------------- parsers
def test_first_turn_parses_tags_json_and_bullets() -> None:
    first = parse_first_turn(PLAN_TEXT)
    assert first.breakdown == "Find hotels, then check the flight."
    assert first.sub_goals == (
        "Suggest beachfront hotels with reviews",
        "Flight cancellation probability",
    )
    bullets = parse_first_turn("<sub_goals>\n- book a hotel\n2. rent a car\n</sub_goals>")
    assert bullets.sub_goals == ("book a hotel", "rent a car") and bullets.breakdown == ""


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty"),
        ("Sure! Here is my plan: hotels and flights.", "no <sub_goals> block"),
        ("<task_breakdown>only a breakdown</task_breakdown>", "no <sub_goals> block"),
        ("<sub_goals>[]</sub_goals>", "names no sub-goal"),
    ],
)
def test_first_turn_failures(text: str, match: str) -> None:
    with pytest.raises(PlanningError, match=match):
        parse_first_turn(text)


def test_query_turn() -> None:
    assert parse_query_turn("  hotel search  city: string ") == "hotel search city: string"
    assert parse_query_turn("<query>flight status</query>") == "flight status"
    assert parse_query_turn("<stop_retrieval>") is None
    assert parse_query_turn("< stop_retrieval >") is None
    with pytest.raises(PlanningError, match="empty"):
        parse_query_turn("   ")
    with pytest.raises(PlanningError, match="sub_goals"):
        parse_query_turn("<sub_goals>[]</sub_goals>")


# ---------------------------------------------------------------------------------- fusion
def test_peak_rank_and_rrf_on_a_hand_worked_case() -> None:
    # list A ranks tools 0,1,2,3 as 1,2,3,4; list B ranks them 3,1,4,2
    ranks = np.array([[1, 2, 3, 4], [3, 1, 4, 2]])
    # peak ranks 1,1,3,2: tools 0 and 1 tie at 1 (list A reached it first), then 3, then 2
    assert peak_rank_fusion(ranks).tolist() == [0, 1, 3, 2]
    # RRF with k=1: 1/2+1/4=.75, 1/3+1/2=.833, 1/4+1/5=.45, 1/5+1/3=.533
    assert rrf_fusion(ranks, k=1).tolist() == [1, 0, 3, 2]
    assert fuse(ranks, "rrf", rrf_k=1).tolist() == [1, 0, 3, 2]
    with pytest.raises(ValueError, match="fusion must be one of"):
        fuse(ranks, "mean")  # type: ignore[arg-type]


def test_peak_rank_is_not_biased_to_the_sub_goal_with_more_queries() -> None:
    # three queries for sub-goal A all rank tool 0 first and tool 1 second; one query for B
    # ranks tool 2 first. RRF piles up A's tools; peak rank gives B's tool a top-2 place.
    a = [1, 2, 4, 3, 5]
    ranks = np.array([a, a, a, [5, 4, 1, 3, 2]])
    assert peak_rank_fusion(ranks).tolist()[:3] == [0, 2, 1]
    assert rrf_fusion(ranks).tolist()[:2] == [0, 1]


def test_single_list_fusion_keeps_its_order() -> None:
    ranks = np.array([[3, 1, 2]])
    assert peak_rank_fusion(ranks).tolist() == [1, 2, 0] == rrf_fusion(ranks).tolist()


# ------------------------------------------------------------------------------ plans file
def test_plans_file_round_trip_and_recorder(tmp_path: Path) -> None:
    plan = Plan("Book a hotel", ("hotel",), ("hotel search city", "hotel reviews"), "breakdown")
    path = write_plans(tmp_path / "plans.jsonl", [plan])
    recorder = PlanRecorder(path)
    recorder.record(Plan("Other request", ("a",), ("a query",)))
    plans, problems = read_plans(path)
    assert problems == []
    assert plans["Book a hotel"].queries == ("hotel search city", "hotel reviews")
    assert plans["Book a hotel"].breakdown == "breakdown"
    assert json.loads(path.read_text().splitlines()[1])["query"] == "Other request"


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("{not json", "invalid JSON"),
        ('{"sub_goals": ["a"], "queries": ["q"]}', "field 'query'"),
        ('{"query": "r", "sub_goals": "a", "queries": ["q"]}', "field 'sub_goals'"),
        ('{"query": "r", "sub_goals": ["a"], "queries": []}', "field 'queries'"),
        ('{"query": "r", "sub_goals": [], "queries": ["q"]}', "field 'sub_goals'"),
    ],
)
def test_bad_plans_line_names_file_and_line(tmp_path: Path, line: str, match: str) -> None:
    path = tmp_path / "plans.jsonl"
    good = json.dumps({"query": "ok", "sub_goals": ["a"], "queries": ["q"]})
    path.write_text(f"{good}\n\n{line}\n")
    with pytest.raises(DatasetFormatError, match=rf"plans\.jsonl:3: .*{match}") as err:
        read_plans(path)
    assert err.value.line == 3
    planner = ReplayPlanner(path, skip_bad=True)
    assert len(planner) == 1 and "plans.jsonl:3: skipped" in planner.problems[0]


def test_duplicate_and_missing_plans(tmp_path: Path) -> None:
    path = tmp_path / "plans.jsonl"
    rec = {"query": "r", "sub_goals": ["a"], "queries": ["q1"]}
    path.write_text(json.dumps(rec) + "\n" + json.dumps({**rec, "queries": ["q2"]}) + "\n")
    planner = ReplayPlanner(path)
    assert planner.plan(" r ", fake_search).queries == ("q1",)
    assert "already at line 1" in planner.problems[0]
    with pytest.raises(PlanningError, match="no recorded plan"):
        planner.plan("unknown", fake_search)
    with pytest.raises(DatasetFormatError, match="plans file not found"):
        read_plans(tmp_path / "missing.jsonl")


def test_instruction_plans_are_marked_as_dataset_text() -> None:
    plans = instruction_plans([("request one", "Given a task, retrieve tools that ..."), ("x", "")])
    assert list(plans) == ["request one"]
    plan = plans["request one"]
    assert plan.source == SOURCE_INSTRUCTION == "dataset-provided LLM text"
    assert plan.sub_goals == plan.queries == ("Given a task, retrieve tools that ...",)


def test_targets_by_word_overlap() -> None:
    plan = Plan(
        "r",
        ("Suggest hotels with reviews", "Flight cancellation probability"),
        ("flight cancellation flight_number", "hotel reviews beachfront hotels", "zzz"),
    )
    assert plan.targets() == (1, 0, 1)  # "zzz" shares no word: its position, capped


# ---------------------------------------------------------------------------- chat planner
def test_chat_planner_runs_the_fig14_loop() -> None:
    chat = ScriptedChat(
        [PLAN_TEXT, "hotel search city amenities", "<query>flight risk</query>", "<stop_retrieval>"]
    )
    plan = ChatPlanner(chat).plan("Plan my Cancun trip.", fake_search)
    assert plan.sub_goals[1] == "Flight cancellation probability"
    assert plan.queries == ("hotel search city amenities", "flight risk")
    assert plan.stopped == "stop_retrieval" and plan.source == SOURCE_CHAT
    first, last = chat.calls[0], chat.calls[-1]
    assert first[0][0] == "system" and first[0][1].startswith(FIG14_SYSTEM_PROMPT)
    assert first[1] == ("human", "User Query: Plan my Cancun trip. Breakdown of user's intents:")
    assert last[2] == ("ai", PLAN_TEXT) and last[3] == ("human", NEXT_QUERY_TURN)
    feedback = last[5][1]
    assert feedback.startswith("System retrieved tools for previous query:")
    assert "1. tool_0_hotel: does hotel search city amenities part 0" in feedback
    assert "5. tool_4_hotel" in feedback and "tool_5_hotel" not in feedback  # the top 5 only


def test_chat_planner_turn_cap_and_unusable_answers(tmp_path: Path) -> None:
    chat = ScriptedChat([PLAN_TEXT, "another query"])
    plan = ChatPlanner(chat, max_turns=4, recorder=tmp_path / "rec.jsonl").plan("r", fake_search)
    assert len(chat.calls) == 4 and len(plan.queries) == 3 and plan.stopped == "turn_cap"
    assert read_plans(tmp_path / "rec.jsonl")[0]["r"].queries == plan.queries
    with pytest.raises(PlanningError, match="no <sub_goals>"):
        ChatPlanner(ScriptedChat(["I cannot help with that."])).plan("r", fake_search)
    with pytest.raises(PlanningError, match="empty query"):
        ChatPlanner(ScriptedChat([PLAN_TEXT, ""])).plan("r", fake_search)
    with pytest.raises(PlanningError, match="no functional query"):
        ChatPlanner(ScriptedChat([PLAN_TEXT, "<stop_retrieval>"])).plan("r", fake_search)
    kept = ChatPlanner(ScriptedChat([PLAN_TEXT, "q one", "<sub_goals>x</sub_goals>"])).plan(
        "r", fake_search
    )
    assert kept.queries == ("q one",) and kept.stopped.startswith("unusable answer")
    with pytest.raises(ValueError, match="max_turns"):
        ChatPlanner(chat, max_turns=0)


def test_a_one_turn_planner_writes_sub_goals_alone_and_they_replay(tmp_path: Path) -> None:
    """`max_turns=1`: one chat call through the loopback server, a plan of sub-goals with no
    query, recorded and replayed as such; a record that says so needs no queries, others do."""
    with OpenAIChatServer(_planner_server_responder(["never asked"])) as server:
        chat = OpenAIChat("planner", base_url=server.base_url, max_retries=0, timeout=10)
        rec = tmp_path / "goals.jsonl"
        plan = ChatPlanner(chat, max_turns=1, recorder=rec).plan("Plan my trip", fake_search)
        assert len(server.requests) == 1
    assert plan.sub_goals_only and plan.queries == () and len(plan.sub_goals) == 2
    with pytest.raises(PlanningError, match="no functional query"):
        plan.check()  # what ToolQP asks of a plan
    record = json.loads(rec.read_text())
    assert record["sub_goals_only"] is True and record["queries"] == []
    replayed = ReplayPlanner(rec).plan("Plan my trip", fake_search)
    assert replayed.sub_goals == plan.sub_goals and replayed.sub_goals_only
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "r", "sub_goals": ["a"], "sub_goals_only": "yes"}\n')
    with pytest.raises(DatasetFormatError, match=r"bad\.jsonl:1: .*sub_goals_only"):
        read_plans(bad)


def _planner_server_responder(queries: list[str]) -> Any:
    def respond(body: dict[str, Any]) -> dict[str, Any]:
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if turn == 0:
            return {"content": PLAN_TEXT}
        return {"content": queries[turn - 1] if turn - 1 < len(queries) else "<stop_retrieval>"}

    return respond


def test_planner_through_the_loopback_server() -> None:
    queries = ["hotel search city amenities", "flight cancellation flight_number"]
    with OpenAIChatServer(_planner_server_responder(queries)) as server:
        chat = OpenAIChat("planner", base_url=server.base_url, max_retries=0, timeout=10)
        plan = ChatPlanner(chat).plan("Plan my Cancun trip", fake_search)
        bodies = server.requests
    assert plan.queries == tuple(queries) and plan.stopped == "stop_retrieval"
    assert len(bodies) == 4
    for body in bodies:
        system = body["messages"][0]
        assert system["role"] == "system" and FIG14_SYSTEM_PROMPT in system["content"]
    last = bodies[-1]["messages"]
    # after each query the next user message is the retrieval feedback for that query
    for i, message in enumerate(last):
        if message["role"] == "assistant" and message["content"] in queries:
            follow = last[i + 1]
            assert follow["role"] == "user"
            assert follow["content"].startswith("System retrieved tools for previous query:")
            assert f"tool_0_{message['content'].split()[0]}" in follow["content"]


def test_turn_cap_holds_on_the_server_side_and_async_path() -> None:
    def respond(body: dict[str, Any]) -> dict[str, Any]:
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        return {"content": PLAN_TEXT if turn == 0 else f"query number {turn}"}

    with OpenAIChatServer(respond) as server:
        chat = OpenAIChat("planner", base_url=server.base_url, max_retries=0, timeout=10)
        plan = asyncio.run(ChatPlanner(chat, max_turns=5).aplan("r", fake_search))
        assert len(server.requests) == 5  # never more chat calls than the cap
    assert plan.stopped == "turn_cap" and len(plan.queries) == 4


def test_langchain_chat_model_plans_sync_and_async() -> None:
    fake_chat = pytest.importorskip("langchain_core.language_models.fake_chat_models")
    answers = [PLAN_TEXT, "hotel search", "<stop_retrieval>"]
    plan = ChatPlanner(fake_chat.FakeListChatModel(responses=answers)).plan("r", fake_search)
    assert plan.queries == ("hotel search",) and plan.stopped == "stop_retrieval"
    model = fake_chat.FakeListChatModel(responses=answers)
    aplan = asyncio.run(ChatPlanner(model).aplan("r", fake_search))
    assert aplan == plan


def test_a_kept_planner_asks_once_and_counts_a_request_that_failed_once() -> None:
    from dtdr_agents.planning.planners import KeptPlanner
    from dtdr_agents.planning.sources import PlannerChoice, goal_report

    answers = iter([RuntimeError("down"), Plan("r", ("a",), ("q",)), Plan("s", ("b",), ("q",))])

    class Flaky:
        def plan(self, request: str, search: Any) -> Plan:
            answer = next(answers)
            if isinstance(answer, Exception):
                raise answer
            return answer

        async def aplan(self, request: str, search: Any) -> Plan:
            return self.plan(request, search)

    kept = KeptPlanner(Flaky())
    with pytest.raises(RuntimeError, match="down"):
        kept.plan("r", fake_search)
    assert kept.plan("r", fake_search).sub_goals == ("a",)
    assert kept.plan(" r ", fake_search).sub_goals == ("a",)  # kept: not asked again
    assert kept.plan("s", fake_search).sub_goals == ("b",)
    report = goal_report(PlannerChoice(kept, "live chat model", "n"))
    # "r" used no plan in the run that failed: it counts as fallen back, though planned later
    assert (report["planned"], report["fell_back"], report["asked"]) == (2, 1, 3)
    assert report["first_failure"] == "RuntimeError: down"
