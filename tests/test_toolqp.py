"""ToolQP over a base retriever: fusion, per-step sub-goals, fallbacks, explanations, caching."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from openai_server import OpenAIChatServer

from dtdr_agents.cli import main as cli_main
from dtdr_agents.foundation.chat import OpenAIChat
from dtdr_agents.foundation.errors import ModelLoadError
from dtdr_agents.foundation.types import END_OF_PLAN, Demonstration
from dtdr_agents.planning import (
    SUB_GOALS_ONLY,
    ChatPlanner,
    Plan,
    ReplayPlanner,
    SearchFn,
    read_plans,
)
from dtdr_agents.retrievers import composite_ids, load_retriever, make_retriever
from dtdr_agents.retrievers.baselines import QTSRetriever
from dtdr_agents.retrievers.toolqp import ToolQPRetriever

TOOLS = [
    {"name": "hotel_search", "description": "search hotels by city amenities meal plan reviews"},
    {"name": "flight_cancel", "description": "flight cancellation probability for a flight number"},
    {"name": "weather", "description": "weather forecast for a city and a date"},
    {"name": "currency", "description": "convert an amount between two currencies"},
    {"name": "translate", "description": "translate a text into another language"},
    {"name": "restaurants", "description": "find restaurants near a place with cuisine filters"},
    {"name": "car_rental", "description": "rent a car at an airport for given dates"},
    {"name": "get_token", "description": "get a user token from username and password"},
]
REQUEST = "Plan our Cancun beach vacation: where to stay, and will AA567 be cancelled?"
PLAN = Plan(
    REQUEST,
    ("Suggest hotels by amenities and reviews", "Flight cancellation probability"),
    ("search hotels by city amenities reviews", "flight cancellation probability flight number"),
)
DEMOS = [
    Demonstration("weather in Paris tomorrow", ("weather",)),
    Demonstration("convert 10 euros to dollars", ("currency",)),
    Demonstration("translate hello into Spanish", ("translate",)),
]
PLAN_TEXT = (
    "<task_breakdown>stay and flight</task_breakdown>\n"
    '<sub_goals>["Suggest hotels by amenities and reviews", "Flight cancellation probability"]'
    "</sub_goals>"
)


def make(planner: Any, **params: Any) -> ToolQPRetriever:
    base = QTSRetriever(encoder="tfidf")
    return ToolQPRetriever(base=base, planner=planner, **params).fit(DEMOS, TOOLS)


class CountingPlanner:
    """A planner returning fixed plans, counting its sync and async calls."""

    def __init__(self, plan: Plan | None = PLAN, error: Exception | None = None) -> None:
        self.result = plan
        self.error = error
        self.calls = 0
        self.acalls = 0

    def plan(self, request: str, search: SearchFn) -> Plan:
        self.calls += 1
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result

    async def aplan(self, request: str, search: SearchFn) -> Plan:
        self.acalls += 1
        return self.plan(request, search)


class SlowPlanner(CountingPlanner):
    def plan(self, request: str, search: SearchFn) -> Plan:
        time.sleep(1.0)
        return super().plan(request, search)

    async def aplan(self, request: str, search: SearchFn) -> Plan:
        await asyncio.sleep(1.0)
        return super().plan(request, search)


def test_fusion_finds_every_sub_goals_tool_and_explains_it() -> None:
    base_only = QTSRetriever(encoder="tfidf").fit(DEMOS, TOOLS).rank(REQUEST)
    model = make(ReplayPlanner({REQUEST: PLAN}))
    ranking = model.rank(REQUEST)
    top2 = {t.name for t in ranking.top(2, include_end=False)}
    assert top2 == {"hotel_search", "flight_cancel"}
    assert top2 != {
        t.name for t in base_only.top(2, include_end=False)
    }  # the request alone misses one
    assert abs(ranking.probabilities.sum() - 1.0) < 1e-9
    # each sub-goal's first tool gets the same share (the lists' mean top-1 probability)
    assert ranking.probability("hotel_search") == pytest.approx(
        ranking.probability("flight_cancel"), rel=1e-6
    )
    assert ranking.probability("flight_cancel") > 10 * base_only.probability("flight_cancel")
    assert ranking.names[-1] == END_OF_PLAN
    assert ranking.explanation["sub_goals"] == list(PLAN.sub_goals)
    assert ranking.explanation["planner"] == "recorded plan"
    why = ranking.why("flight_cancel")
    assert "sub-goal 2 'Flight cancellation probability'" in why
    assert "via query 'flight cancellation probability flight number' ranked it 1" in why
    found = model.explain_tool(REQUEST, "hotel_search")
    assert found == {
        "tool": "hotel_search",
        "rank": 1,
        "source": "query",
        "sub_goal": "Suggest hotels by amenities and reviews",
        "query": "search hotels by city amenities reviews",
    }


def test_served_sub_goals_leave_the_fusion_at_later_steps() -> None:
    model = make(ReplayPlanner({REQUEST: PLAN}))
    first = model.rank(REQUEST)
    later = model.rank(REQUEST, ["hotel_search"])
    assert first.explanation["done_sub_goals"] == []
    assert later.explanation["done_sub_goals"] == ["Suggest hotels by amenities and reviews"]
    assert later.top(1, include_end=False)[0].name == "flight_cancel"
    assert later.explanation["lists_fused"] == 2  # the flight query and the request
    done = model.rank(REQUEST, ["hotel_search", "flight_cancel"])
    assert done.explanation["lists_fused"] == 3  # every sub-goal served: all lists again


def test_plans_are_cached_per_request_and_catalogue() -> None:
    planner = CountingPlanner()
    model = make(planner)
    for history in ([], ["hotel_search"], ["hotel_search", "flight_cancel"]):
        model.rank(REQUEST, history)
    assert planner.calls == 1
    model.set_tools([*TOOLS, {"name": "visa", "description": "visa requirements by country"}])
    ranking = model.rank(REQUEST)
    assert planner.calls == 2 and "visa" in ranking.names
    assert "visa" in model.fitted_base().tools_.names


def test_rrf_option() -> None:
    model = make(ReplayPlanner({REQUEST: PLAN}), fusion="rrf")
    ranking = model.rank(REQUEST)
    assert ranking.explanation["fusion"] == "rrf"
    assert "rrf fusion" in ranking.why(ranking.top(1, include_end=False)[0].name)


@pytest.mark.parametrize(
    ("planner", "reason"),
    [
        (ReplayPlanner({}), "no recorded plan for this request"),
        (CountingPlanner(Plan(REQUEST, (), ())), "names no sub-goal"),
        (CountingPlanner(Plan(REQUEST, ("a goal",), ())), "no functional query"),
        (  # a plan of sub-goals alone (a one-turn planner) is the hybrid's, not ToolQP's
            ReplayPlanner({REQUEST: Plan(REQUEST, ("a goal",), (), stopped=SUB_GOALS_ONLY)}),
            "no functional query",
        ),
        (CountingPlanner(error=RuntimeError("boom")), "RuntimeError: boom"),
        (None, "no planner was given"),
    ],
)
def test_planner_failures_fall_back_to_the_base_ranking(planner: Any, reason: str) -> None:
    model = make(planner)
    ranking = model.rank(REQUEST, ["weather"])
    expected = model.fitted_base().rank(REQUEST, ["weather"])
    assert reason in ranking.explanation["planner_fallback"]
    assert (
        "used the base retriever's single-shot ranking" in ranking.explanation["planner_fallback"]
    )
    assert ranking.ranked_names() == expected.ranked_names()
    assert np.allclose(ranking.probabilities, expected.probabilities)
    assert model.explain_tool(REQUEST, "weather")["source"] == "fallback"


class Scripted:
    def __init__(self, answers: list[str]) -> None:
        self.answers = answers
        self.n = 0

    def invoke(self, messages: list[tuple[str, str]]) -> str:
        self.n += 1
        return self.answers[min(self.n - 1, len(self.answers) - 1)]


@pytest.mark.parametrize(
    ("answers", "reason"),
    [
        (["%%%% garbage ###"], "no <sub_goals> block"),
        (["<task_breakdown>stay</task_breakdown> hotels, flights"], "no <sub_goals> block"),
        (["<sub_goals>[]</sub_goals>"], "names no sub-goal"),
        ([PLAN_TEXT, "<stop_retrieval>"], "no functional query"),
        ([PLAN_TEXT, ""], "empty query"),
    ],
)
def test_malformed_chat_output_falls_back(answers: list[str], reason: str) -> None:
    ranking = make(ChatPlanner(Scripted(answers))).rank(REQUEST)
    assert reason in ranking.explanation["planner_fallback"]


def test_more_turns_than_the_cap_keeps_the_queries_within_it() -> None:
    chat = Scripted([PLAN_TEXT, "search hotels by city amenities reviews"])
    ranking = make(ChatPlanner(chat, max_turns=3)).rank(REQUEST)
    assert chat.n == 3
    assert ranking.explanation["stopped"] == "turn_cap"
    assert len(ranking.explanation["queries"]) == 2
    assert "planner_fallback" not in ranking.explanation


def test_planner_timeout_falls_back() -> None:
    model = make(SlowPlanner(), timeout=0.2)
    t0 = time.perf_counter()
    ranking = model.rank(REQUEST)
    assert time.perf_counter() - t0 < 0.9
    assert (
        "TimeoutError: planning took longer than 0.2 s" in ranking.explanation["planner_fallback"]
    )
    amodel = make(SlowPlanner(), timeout=0.2)
    aranking = asyncio.run(amodel.arank(REQUEST))
    assert "TimeoutError" in aranking.explanation["planner_fallback"]


def test_arank_uses_the_async_planner_path() -> None:
    planner = CountingPlanner()
    model = make(planner)
    ranking = asyncio.run(model.arank(REQUEST))
    assert planner.acalls == 1
    assert {t.name for t in ranking.top(2, include_end=False)} == {"hotel_search", "flight_cancel"}
    model.rank(REQUEST)
    assert planner.calls == 1  # aplan's call; the sync rank reused the cached plan


def _server_planner(body: dict[str, Any]) -> dict[str, Any]:
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    queries = list(PLAN.queries)
    if turn == 0:
        return {"content": PLAN_TEXT}
    return {"content": queries[turn - 1] if turn <= len(queries) else "<stop_retrieval>"}


def test_live_planner_over_http_and_its_failures() -> None:
    with OpenAIChatServer(_server_planner) as server:
        chat = OpenAIChat("planner", base_url=server.base_url, max_retries=0, timeout=10)
        ranking = make(ChatPlanner(chat)).rank(REQUEST)
        assert {t.name for t in ranking.top(2, include_end=False)} == {
            "hotel_search",
            "flight_cancel",
        }
        assert ranking.explanation["planner"] == "chat model"
        feedback = server.requests[2]["messages"][-1]["content"]
        assert feedback.startswith("System retrieved tools for previous query:")
        assert "1. hotel_search: search hotels by city amenities" in feedback

        server.inject(500, times=5)
        failed = make(ChatPlanner(chat)).rank(REQUEST)
        assert "ChatModelError" in failed.explanation["planner_fallback"]
        assert "500" in failed.explanation["planner_fallback"]

    def slow(body: dict[str, Any]) -> dict[str, Any]:
        return {"content": PLAN_TEXT, "delay": 2.0}

    with OpenAIChatServer(slow) as server:
        chat = OpenAIChat("planner", base_url=server.base_url, max_retries=0, timeout=0.3)
        timed_out = make(ChatPlanner(chat)).rank(REQUEST)
        assert "ChatModelError" in timed_out.explanation["planner_fallback"]


def test_parameter_checks() -> None:
    default = make_retriever("toolqp", encoder="tfidf", planner=CountingPlanner())
    assert default.fit(DEMOS[:1], TOOLS[:3]).fitted_base().retriever_id == "qts"
    with pytest.raises(ValueError, match="fusion must be one of"):
        make(CountingPlanner(), fusion="mean")
    with pytest.raises(ValueError, match="done_k"):
        make(CountingPlanner(), done_k=0)
    assert ToolQPRetriever.unavailable_reason(planner=None) is not None
    assert "--plans FILE" in str(ToolQPRetriever.unavailable_reason())
    assert ToolQPRetriever.unavailable_reason(planner=CountingPlanner()) is None


# --------------------------------------------------------------------------- registry, saving
def test_composite_ids_and_persistence_round_trip(tmp_path: Path) -> None:
    planner = ReplayPlanner({REQUEST: PLAN})
    model = make_retriever("toolqp:qts", encoder="tfidf", planner=planner, fusion="rrf")
    assert isinstance(model, ToolQPRetriever) and isinstance(model.base, QTSRetriever)
    assert "toolqp:<base>" in composite_ids()
    model.fit(DEMOS, TOOLS)
    before = model.rank(REQUEST, ["hotel_search"])
    folder = model.save(tmp_path / "model")
    assert (folder / "base").is_dir()
    manifest = json.loads((folder / "manifest.json").read_text())
    assert "planner" not in manifest["params"] and manifest["params"]["fusion"] == "rrf"
    loaded = load_retriever(folder, params={"planner": planner})
    assert isinstance(loaded, ToolQPRetriever) and loaded.planner is planner
    assert isinstance(loaded.fitted_base(), QTSRetriever)
    after = loaded.rank(REQUEST, ["hotel_search"])
    assert after.ranked_names() == before.ranked_names()
    assert np.allclose(after.probabilities, before.probabilities)
    no_planner = load_retriever(folder)
    assert "no planner" in no_planner.rank(REQUEST).explanation["planner_fallback"]
    no_planner.set_params(planner=planner)  # drops the cached fallback
    assert no_planner.rank(REQUEST, ["hotel_search"]).ranked_names() == before.ranked_names()


def test_missing_or_mismatched_base_folder_fails_to_load(tmp_path: Path) -> None:
    model = make(ReplayPlanner({REQUEST: PLAN}))
    folder = model.save(tmp_path / "model")
    shutil.rmtree(folder / "base")
    with pytest.raises(ModelLoadError, match="base"):
        load_retriever(folder)
    other = make(ReplayPlanner({REQUEST: PLAN}))
    folder2 = other.save(tmp_path / "model2")
    bm25 = make_retriever("bm25").fit(DEMOS[:2], TOOLS[:4])  # another catalogue
    shutil.rmtree(folder2 / "base")
    bm25.save(folder2 / "base")
    with pytest.raises(ModelLoadError, match=r"base/manifest\.json: not the nested model"):
        load_retriever(folder2)
    with pytest.raises(
        ModelLoadError, match=r"base/ \(bm25\) was fitted on another tool catalogue"
    ):
        other._set_parts({"base": bm25})


def test_example_params_run_offline() -> None:
    params = ToolQPRetriever.example_params()
    model = make_retriever("toolqp:qts", encoder="tfidf", **params).fit(DEMOS, TOOLS)
    ranking = model.rank("Search hotels in Cancun. Then check the flight cancellation risk")
    assert ranking.explanation["planner"] == "clauses (no LLM)"
    assert len(ranking.explanation["queries"]) == 2


# ------------------------------------------------------------------------------------ CLI
@pytest.fixture
def toolret_task(tmp_path: Path) -> Path:
    """A small ToolRet task folder: 8 tools, 24 two-tool queries with instructions."""
    tools = [
        {"id": f"t{i}", "documentation": {"name": t["name"], "description": t["description"]}}
        for i, t in enumerate(TOOLS)
    ]
    queries = []
    for n in range(24):
        a, b = n % 8, (n * 3 + 1) % 8
        if a == b:
            b = (b + 1) % 8
        queries.append(
            {
                "id": f"q{n}",
                "query": f"Request {n}: I need help with my trip number {n}",
                "instruction": "retrieve tools: "
                + "; ".join(TOOLS[i]["description"] for i in (a, b)),
                "labels": [{"id": f"t{a}", "relevance": 1}, {"id": f"t{b}", "relevance": 1}],
            }
        )
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "tools.json").write_text(json.dumps(tools, indent=1))
    (folder / "queries.json").write_text(json.dumps(queries, indent=1))
    return folder


def _bench(task: Path, *extra: str) -> list[str]:
    return [
        "bench",
        "--dataset",
        "toolret",
        "--path",
        str(task),
        "--retrievers",
        "qts,toolqp:qts",
        "--encoder",
        "tfidf",
        "--no-cache",
        "-q",
        *extra,
    ]


def test_bench_with_instruction_plans(
    toolret_task: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json = tmp_path / "r.json"
    assert cli_main(_bench(toolret_task, "--plans-from-instruction", "--json", str(out_json))) == 0
    out = capsys.readouterr().out
    assert "dataset-provided LLM text" in out and "not figures of ToolQP with a live planner" in out
    report = json.loads(out_json.read_text())
    assert report["planner"]["source"] == "dataset-provided LLM text"
    for rid in ("qts", "toolqp:qts"):
        assert {"tool_ndcg@10", "tool_completeness@10"} <= set(report["results"][rid])
    results = report["results"]
    assert results["toolqp:qts"]["tool_ndcg@10"] > results["qts"]["tool_ndcg@10"]


def test_bench_without_a_planner_skips_toolqp(
    toolret_task: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(_bench(toolret_task)) == 0
    out = capsys.readouterr().out
    assert "skipped toolqp:qts: toolqp needs a planner" in out


def test_bench_plans_file_errors_and_skip_bad(
    toolret_task: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plans = tmp_path / "plans.jsonl"
    good = {"query": "Request 1: I need help with my trip number 1", "sub_goals": ["a"]}
    plans.write_text(json.dumps({**good, "queries": ["flight cancellation"]}) + "\n{oops\n")
    assert cli_main(_bench(toolret_task, "--plans", str(plans))) == 2
    err = capsys.readouterr().err
    assert f"error: {plans}:2: invalid JSON" in err
    assert cli_main(_bench(toolret_task, "--plans", str(plans), "--skip-bad")) == 0
    captured = capsys.readouterr()
    assert f"plans: {plans}:2: skipped: invalid JSON" in captured.err
    assert "toolqp replays 1 recorded plans" in captured.out
    both = _bench(toolret_task, "--plans", str(plans), "--plans-from-instruction")
    assert cli_main(both) == 2
    assert "give one planner source" in capsys.readouterr().err


def test_toolqp_speed_command(
    toolret_task: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json = tmp_path / "speed.json"
    args = ["toolqp-speed", "--path", str(toolret_task), "--encoder", "tfidf", "--no-cache"]
    assert cli_main([*args, "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "5 recorded queries per request" in out and "p50" in out and "p99" in out
    summary = json.loads(out_json.read_text())
    assert summary["queries_per_request"] == 5 and summary["overhead_ms"]["p50"] > 0


def test_bench_with_a_live_planner_records_plans_that_replay(
    toolret_task: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def respond(body: dict[str, Any]) -> dict[str, Any]:
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if turn == 0:
            return {"content": '<sub_goals>["hotels", "flights"]</sub_goals>'}
        queries = ["search hotels by city amenities", "flight cancellation probability"]
        return {"content": queries[turn - 1] if turn <= 2 else "<stop_retrieval>"}

    recorded = tmp_path / "recorded.jsonl"
    live_json, replay_json = tmp_path / "live.json", tmp_path / "replay.json"
    with OpenAIChatServer(respond) as server:
        live = _bench(toolret_task, "--chat-base-url", server.base_url, "--chat-model", "p")
        live += ["--limit", "12"]
        assert cli_main([*live, "--record-plans", str(recorded), "--json", str(live_json)]) == 0
        n_requests = len(server.requests)
    assert "plans with the live chat model" in capsys.readouterr().out
    plans, _ = read_plans(recorded)
    assert n_requests == 4 * len(plans) and len(plans) >= 3  # 4 turns per request
    replay = _bench(toolret_task, "--plans", str(recorded), "--json", str(replay_json))
    assert cli_main([*replay, "--limit", "12"]) == 0
    live_result = json.loads(live_json.read_text())["results"]["toolqp:qts"]
    replayed = json.loads(replay_json.read_text())["results"]["toolqp:qts"]
    assert live_result["tool_ndcg@10"] == pytest.approx(replayed["tool_ndcg@10"])
    assert json.loads(live_json.read_text())["planner"]["source"] == "live chat model"


@pytest.mark.benchmark
def test_planning_overhead_on_toolink(shared_datasets: Path) -> None:
    """Issue 7: five recorded queries per request on toolink (1,804 tools), LLM excluded.

    The 2 ms p50 target is a benchmark figure (`dtdr-agents toolqp-speed` prints it), not a
    timed assertion: on a shared 2-core machine it swings with load. This checks the measurement
    itself: every request timed, five queries each, figures finite and ordered."""
    from dtdr_agents.datasets import load_train_test
    from dtdr_agents.evaluation.toolqp_speed import format_overhead, measure_overhead
    from dtdr_agents.foundation.encoders import default_cache_dir, get_encoder

    encoder = get_encoder("default", cache_dir=default_cache_dir())  # the bench's disk cache
    train, test = load_train_test("toolret", shared_datasets / "toolret" / "toolink")
    instructions = {d.query: test.instruction(d) for d in test.demos}  # type: ignore[attr-defined]
    result = measure_overhead(
        train.demos,
        test.demos,
        train.tools,
        base=QTSRetriever(encoder=encoder),
        instructions={q: i for q, i in instructions.items() if i},
    )
    print(format_overhead(result, "toolink"))
    summary = result.summary()
    assert summary["tools"] == 1804 and summary["queries_per_request"] == 5
    cpu = summary["cpu_overhead_ms"]
    assert 0.0 < cpu["p50"] <= cpu["p99"] < 1000.0


def test_the_integration_runtime_plans_through_the_async_path() -> None:
    from dtdr_agents.foundation.selection import SelectionPolicy
    from dtdr_agents.runtime import StepSelector

    planner = CountingPlanner()
    model = make(planner)
    wrapped = make_retriever("toolqp", base=model)  # nested: the inner toolqp plans too
    wrapped.fit(DEMOS, TOOLS)
    selector = StepSelector(TOOLS, wrapped, policy=SelectionPolicy(k=2, threshold=None))
    step = asyncio.run(selector.aselect(REQUEST))
    assert planner.acalls == 1
    assert set(step.bound) == {"hotel_search", "flight_cancel"}
