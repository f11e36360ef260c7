"""Pure scoring and the cached endpoint of the live-agent benchmark (issue 37), by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dtdr_agents.evaluation.agent_bench import (
    AGENT,
    BenchEndpoint,
    ModelCall,
    RunLog,
    StepLimitError,
    body_hash,
    call_precision,
    call_recall,
    failure_reason,
    loops,
    matched_calls,
    order_allowed,
    plan_success,
    score_log,
    simulated_result,
    summarize,
)
from dtdr_agents.evaluation.e2e import StepCache, StepNotCachedError
from dtdr_agents.foundation.types import CallArguments, Demonstration, Toolset
from dtdr_agents.runtime.tokens import CharApproxCounter


def test_matched_calls_counts_each_gold_call_once() -> None:
    assert matched_calls(["a", "a", "b"], ["a", "b", "c"]) == 2
    assert matched_calls(["a", "a"], ["a", "a", "b"]) == 2
    assert matched_calls([], ["a"]) == 0


def test_precision_and_recall_by_hand() -> None:
    assert call_precision(["a", "x", "b", "a"], ["a", "b", "c"]) == pytest.approx(2 / 4)
    assert call_recall(["a", "x", "b", "a"], ["a", "b", "c"]) == pytest.approx(2 / 3)
    assert call_precision([], ["a"]) is None
    assert call_recall(["a"], []) is None


def test_order_allowed_follows_the_edges() -> None:
    gold = ["a", "b", "c"]
    # c needs a; b independent
    assert order_allowed(["b", "a", "c"], gold, [(0, 2)])
    assert order_allowed(["a", "c", "b"], gold, [(0, 2)])
    assert not order_allowed(["c", "a", "b"], gold, [(0, 2)])
    # None: only the recorded order; (): any order
    assert not order_allowed(["b", "a", "c"], gold, None)
    assert order_allowed(["a", "b", "c"], gold, None)
    assert order_allowed(["c", "b", "a"], gold, ())
    # each gold call once, unless the plan repeats it
    assert not order_allowed(["a", "a", "b", "c"], gold, ())
    assert order_allowed(["a", "b", "a"], ["a", "b", "a"], [(1, 2)])
    # a repeated tool: the second 'a' (index 2) needs b; matching the first 'a' to index 0 works
    assert not order_allowed(["a", "a", "b"], ["a", "b", "a"], [(1, 2)])


def test_plan_success_needs_a_stop_and_no_outside_call() -> None:
    assert plan_success(["a", "b"], ["a", "b"], None, stopped=True)
    assert not plan_success(["a", "b"], ["a", "b"], None, stopped=False)
    assert not plan_success(["a", "b"], ["a", "b"], None, stopped=True, outside=1)
    assert not plan_success(["a"], ["a", "b"], None, stopped=True)


def test_failure_reason_order_and_loops() -> None:
    assert failure_reason(success=True) is None
    assert failure_reason(success=False) == "wrong_plan"
    assert failure_reason(success=False, stopped=False) == "no_stop"
    assert failure_reason(success=False, outside=1, unparseable=1) == "unknown_tool"
    assert failure_reason(success=False, step_limit=True, looped=True) == "loop"
    assert failure_reason(success=False, error=True, step_limit=True) == "agent_error"
    assert loops([("a", "{}")] * 3)
    assert not loops([("a", "{}"), ("a", '{"x": 1}'), ("a", "{}")])


def _call(calls: list[tuple[str, str]] | None, bound: tuple[str, ...] = ("a", "b")) -> ModelCall:
    message: dict[str, object] = {"role": "assistant", "content": None if calls else "done"}
    if calls:
        message["tool_calls"] = [
            {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ]
    return ModelCall(AGENT, bound, {"choices": [{"message": message}]}, 10.0, 100, True, False)


CATALOGUE = Toolset([{"name": "a"}, {"name": "b"}, {"name": "c"}])
GOLD = Demonstration("do a then b", ("a", "b"), edges=((0, 1),))


def test_score_log_success_and_figures() -> None:
    log = RunLog("x", 0, 5)
    log.calls += [_call([("a", "{}")]), _call([("b", "{}")]), _call(None)]
    res = score_log(log, GOLD, CATALOGUE, frozenset())
    assert res.success and res.stopped and res.failure is None
    assert (res.matched, res.model_calls, res.prompt_tokens, res.model_ms) == (2, 3, 300, 30.0)


def test_score_log_counts_outside_unbound_meta_and_unparseable() -> None:
    log = RunLog("x", 0, 5)
    log.calls += [
        _call([("search_tools", '{"query": "a"}')]),
        _call([("zzz", "{}")]),
        _call([("c", "{}")], bound=("a",)),
        _call([("a", "not json")]),
    ]
    res = score_log(log, GOLD, CATALOGUE, frozenset({"search_tools"}))
    assert (res.meta_calls, res.outside, res.unbound, res.unparseable) == (1, 1, 1, 1)
    assert res.outside_names == ["zzz"]
    assert res.called == ["c", "a"]
    assert not res.stopped and not res.success
    assert res.failure == "unknown_tool"


def test_score_log_counts_a_reask_after_an_answer_without_a_call() -> None:
    log = RunLog("x", 0, 5)
    log.calls += [_call([("a", "{}")]), _call(None), _call([("b", "{}")]), _call(None)]
    res = score_log(log, GOLD, CATALOGUE, frozenset())
    assert res.reasks == 1  # the last answer without a call is the stop, not a re-ask
    assert res.success and res.stopped
    runs = [res, score_log(_one_stop(), GOLD, CATALOGUE, frozenset())]
    runs[1].plan = 1
    out = summarize(runs, ["x"], 2, n_boot=50)["contestants"]["x"]
    assert out["reasks"]["value"] == pytest.approx(0.5)
    assert out["successes_after_reask"] == 1


def _one_stop() -> RunLog:
    log = RunLog("x", 1, 5)
    log.calls += [_call(None)]
    return log


def test_score_log_step_limit() -> None:
    log = RunLog("x", 0, 1, limit_hit=True)
    log.calls += [_call([("a", "{}")])]
    res = score_log(log, GOLD, CATALOGUE, frozenset())
    assert res.failure == "step_limit" and not res.stopped


def test_simulated_result_uses_the_recorded_label() -> None:
    demo = Demonstration(
        "q",
        ("a", "b", "a"),
        arguments=(
            CallArguments.of({}, "API_call_0"),
            CallArguments.of({}),
            CallArguments.of({}, "API_call_2"),
        ),
    )
    assert simulated_result(demo, "a", 1) == "Done. Result label: API_call_0"
    assert simulated_result(demo, "a", 2) == "Done. Result label: API_call_2"
    assert simulated_result(demo, "b", 1) == "Done. b returned its result."
    assert simulated_result(demo, "a", 3) == "Done. a returned its result."
    assert simulated_result(GOLD, "zzz", 1) == "Done. zzz returned its result."


def test_summarize_intervals_and_paired_verdict() -> None:
    from dtdr_agents.evaluation.agent_bench import RunResult

    runs = []
    for plan in range(20):
        runs.append(
            RunResult("dtdr", plan, "scored", 2, success=True, matched=2, called=["a", "b"])
        )
        runs.append(
            RunResult("other", plan, "scored", 2, success=plan < 5, matched=1, called=["a"])
        )
    runs.append(RunResult("wide", 0, "does_not_fit", 2, prompt_tokens=9999))
    out = summarize(runs, ["dtdr", "other", "wide"], 20, n_boot=300)
    assert out["contestants"]["dtdr"]["success"]["value"] == 1.0
    assert out["contestants"]["other"]["success"]["value"] == pytest.approx(0.25)
    assert out["contestants"]["other"]["recall"]["value"] == pytest.approx(0.5)
    assert out["contestants"]["wide"]["does_not_fit_prompt_tokens"] == 9999
    comp = {c["b"]: c for c in out["comparisons"]}
    diff = comp["other"]["success_diff"]
    assert diff["value"] == pytest.approx(0.75)
    assert diff["ci"][0] > 0 and diff["verdict"] == "beats"
    assert "skipped" in comp["wide"]
    assert math.isfinite(comp["other"]["recall_diff"]["value"])
    # without dtdr, the first contestant that ran is the reference (not one that did not fit)
    others = [r for r in runs if r.contestant != "dtdr"]
    out = summarize(others, ["wide", "other"], 20, n_boot=50)
    assert [(c["a"], c["b"]) for c in out["comparisons"]] == [("other", "wide")]


class _Chat:
    """Answers every request with one text completion, or raises `fail` (counting calls)."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.fail = fail
        self.asked = 0

    def create(self, messages: object, **kwargs: object) -> dict[str, object]:
        self.asked += 1
        if self.fail is not None:
            raise self.fail
        message = {"role": "assistant", "content": "done"}
        return {"choices": [{"message": message}], "usage": {"prompt_tokens": 7}}


BODY = {"messages": [{"role": "user", "content": "hi"}], "tools": []}


def test_endpoint_caches_by_body_and_enforces_the_step_limit(tmp_path: Path) -> None:
    chat = _Chat()
    endpoint = BenchEndpoint(
        "m", StepCache(tmp_path / "c.jsonl"), chat, counter=CharApproxCounter()
    )  # type: ignore[arg-type]
    endpoint.begin("x", 0, 2)
    endpoint.complete(BODY)
    endpoint.complete(dict(reversed(list(BODY.items()))))  # the same body, keys reordered
    with pytest.raises(StepLimitError):
        endpoint.complete(BODY)
    log = endpoint.end()
    assert chat.asked == 1 and log.limit_hit
    assert [c.cached for c in log.calls] == [False, True]
    assert [c.prompt_tokens for c in log.calls] == [7, 7]
    assert body_hash({"a": 1, "b": 2}) == body_hash({"b": 2, "a": 1})
    endpoint.begin("x", 1, 2)
    with pytest.raises(ValueError, match="streaming"):
        endpoint.complete({**BODY, "stream": True})
    endpoint.end()
    # a replay answers from the cache, and names what is missing
    replay = BenchEndpoint("m", StepCache(tmp_path / "c.jsonl"), None, counter=CharApproxCounter())
    replay.begin("x", 0, 5)
    assert replay.complete(BODY)["choices"]
    with pytest.raises(StepNotCachedError, match="x on plan 0"):
        replay.complete({**BODY, "tools": [{"type": "function", "function": {"name": "t"}}]})
    assert replay.end().missing is not None


def test_a_replay_answers_a_changed_request_by_its_place_in_the_run(tmp_path: Path) -> None:
    chat = _Chat()
    live = BenchEndpoint("m", StepCache(tmp_path / "c.jsonl"), chat, counter=CharApproxCounter())  # type: ignore[arg-type]
    second = {**BODY, "messages": [*BODY["messages"], {"role": "user", "content": "go on"}]}
    for plan in (0, 1):
        live.begin("x", plan, 5)
        live.complete({**BODY, "plan": plan})
        live.complete({**second, "plan": plan})
        live.end()
    replay = BenchEndpoint("m", StepCache(tmp_path / "c.jsonl"), None, counter=CharApproxCounter())
    replay.begin("x", 1, 5)
    replay.complete({**BODY, "plan": 1})  # recorded as it is
    tie = {**second, "plan": 1, "tools": [{"type": "function", "function": {"name": "t"}}]}
    assert replay.complete(tie)["choices"]  # a near tie bound another tool: the 2nd answer
    with pytest.raises(StepNotCachedError, match="x on plan 1, agent call 3"):
        replay.complete({**second, "plan": 9})  # no third call was ever recorded
    log = replay.end()
    assert (log.changed, replay.changed) == (1, 1) and chat.asked == 4
    replay.begin("y", 0, 5)  # another contestant's run has no recorded calls
    with pytest.raises(StepNotCachedError):
        replay.complete(BODY)


def test_endpoint_fault_is_marked_and_never_cached(tmp_path: Path) -> None:
    from dtdr_agents.foundation.errors import ChatModelError
    from dtdr_agents.foundation.retry import EndpointFaultError

    fault = ChatModelError("failed")
    fault.__cause__ = EndpointFaultError("HTTP 200 with no choices")
    cache = StepCache(tmp_path / "c.jsonl")
    endpoint = BenchEndpoint("m", cache, _Chat(fault), counter=CharApproxCounter())  # type: ignore[arg-type]
    endpoint.begin("x", 0, 5)
    with pytest.raises(ChatModelError):
        endpoint.complete(BODY)
    assert endpoint.end().fault == "endpoint"
    assert len(cache) == 0 and not (tmp_path / "c.jsonl").exists()


def test_an_agent_bench_block_is_generated_from_its_json(tmp_path: Path) -> None:
    from dtdr_agents.evaluation.agent_bench import RunResult, results_json
    from dtdr_agents.evaluation.docsync import ResultsError, render
    from dtdr_agents.evaluation.report import provenance

    runs = [
        RunResult(name, plan, "scored", 1, success=ok, matched=int(ok), called=["a"])
        for plan in range(12)
        for name, ok in (("dtdr", True), ("bm25", plan % 3 == 0))
    ]
    meta = {"dataset": "d", "model": "m", "replay": True, "n_tools": 4}
    report = results_json(runs, ["dtdr", "bm25"], 12, meta={**meta, "provenance": provenance([0])})
    (tmp_path / "ab.json").write_text(json.dumps(report))
    body = render("agent-bench ab.json", tmp_path, where="README.md:1")
    assert "| dtdr | 100.0" in body and "| bm25 | 33.3" in body
    assert "| dtdr vs bm25 |" in body and "beats" in body and "model m (replayed)" in body
    del report["contestants"]["bm25"]
    (tmp_path / "bad.json").write_text(json.dumps(report))
    with pytest.raises(ResultsError, match=r"bad\.json.*bm25"):
        render("agent-bench bad.json", tmp_path, where="README.md:1")
    report["kind"] = "e2e"
    (tmp_path / "bad.json").write_text(json.dumps(report))
    with pytest.raises(ResultsError, match=r"bad\.json.*kind"):
        render("agent-bench bad.json", tmp_path, where="README.md:1")


def test_plans_are_the_first_n_or_a_seeded_sample(capsys: pytest.CaptureFixture[str]) -> None:
    from dtdr_agents.cli import main
    from dtdr_agents.cli._common import plan_subset
    from dtdr_agents.datasets.synthetic import make_demo_dataset

    test = make_demo_dataset(40, seed=0)
    queries = [d.query for d in test.demos]
    first = plan_subset(test, first=5, sample=None, seed=0, first_flag="--plans")
    assert [d.query for d in first.demos] == queries[:5]
    drawn = [plan_subset(test, first=None, sample=5, seed=s, first_flag="--plans") for s in (0, 1)]
    picked = [[queries.index(d.query) for d in t.demos] for t in drawn]
    assert all(p == sorted(p) and len(p) == 5 for p in picked)  # kept in the split's order
    assert picked[0] != picked[1] and picked[0] != list(range(5))
    again = plan_subset(test, first=None, sample=5, seed=0, first_flag="--plans")
    assert [d.query for d in again.demos] == [d.query for d in drawn[0].demos]
    assert len(plan_subset(test, first=99, sample=None, seed=0, first_flag="--plans").demos) == 40
    assert "--plans 99: the test split has only 40 plans" in capsys.readouterr().err
    argv = ["agent-bench", "--dataset", "demo", "--json", "x.json", "--replay"]
    with pytest.raises(SystemExit):
        main([*argv, "--plans", "2", "--test-sample", "2"])
    assert "not allowed with argument" in capsys.readouterr().err
