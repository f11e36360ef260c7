"""End-to-end function-calling evaluation through real HTTP: the loopback OpenAI server
(tests/openai_server.py) driven by the real `openai` client, with a scripted policy.

The tiny TaskBench fixture splits into 5 training plans and 2 test plans (6 steps):
  P0 "Caption and translate, then speak both.": Image Captioning, Translation, Text-to-Speech
     (the first step accepts Image Captioning or Translation), then end-of-plan;
  P1 "Describe photo.jpg.": Translation, then end-of-plan.
The scripted policy calls the recorded next tool (end_plan at the end) with these exceptions:
  - P1's first step is answered with text (no tool call);
  - in soft mode, P0's third step calls "Imaginary_Tool" (outside the catalogue);
  - in hard mode, a step whose next tool is not bound calls the first bound tool instead.
Hand-worked counts: no_icl FSA 5/6, SR 1/2 (P0 right, P1 wrong), end-of-plan 2/2;
soft FSA 4/6, SR 0/2, one unknown tool.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_server import OpenAIChatServer, clear_proxies, history_of, tool_names

from dtdr_agents.datasets import load_train_test
from dtdr_agents.datasets.base import Dataset
from dtdr_agents.evaluation.e2e import (
    E2EPlan,
    StepCache,
    api_names,
    cells,
    dry_run_report,
    format_e2e_markdown,
    plot_e2e,
    prepare_e2e,
    run_e2e,
)
from dtdr_agents.evaluation.e2e.protocol import END_TOOL
from dtdr_agents.foundation.chat import OpenAIChat
from dtdr_agents.foundation.encoders import get_encoder
from dtdr_agents.foundation.retry import RetryPolicy
from dtdr_agents.foundation.selection import SelectionPolicy, select
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.runtime.prompting import get_token_counter

FIXTURE = Path(__file__).parent / "fixtures" / "datasets" / "taskbench" / "data_tiny"
FAST = RetryPolicy(max_retries=3, base_delay=0.0, jitter=0.0, timeout=10.0)
NO_RETRY = RetryPolicy(max_retries=0, base_delay=0.0, timeout=10.0)
P0 = "Caption and translate, then speak both."
P1 = "Describe photo.jpg."


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_proxies(monkeypatch)


@pytest.fixture(scope="module")
def split() -> tuple[Dataset, Dataset]:
    return load_train_test("taskbench", FIXTURE, seed=0)


@pytest.fixture(scope="module")
def plan(split: tuple[Dataset, Dataset]) -> E2EPlan:
    train, test = split
    return prepare_e2e(
        train,
        test,
        ["none", "dtdr-c"],
        ["no_icl", "hard", "soft"],
        encoder=get_encoder("tfidf"),
        k=1,
        counter=get_token_counter("approx"),
    )


def mode_of(body: dict[str, Any], n_tools: int) -> str:
    system = body["messages"][0]["content"]
    if "# Soft Mask guidelines" in system:
        return "soft_weighted" if "probability" in system else "soft"
    if "# Tool guidance" in system:
        return "hard_weighted"
    if "# Demonstrations" in system:
        return "raw_demos"
    return "no_icl" if len(tool_names(body)) == n_tools + 1 else "hard"


class Policy:
    """The scripted, deterministic model (see the module docstring)."""

    def __init__(self, test: Dataset) -> None:
        names = api_names(test.tools.names)
        self.n_tools = len(test.tools)
        self.plans = {d.query: [names[c] for c in d.calls] for d in test.demos}
        self.lock = threading.Lock()
        self.modes: list[str] = []

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        query, history = history_of(body)
        mode = mode_of(body, self.n_tools)
        with self.lock:
            self.modes.append(mode)
        plan = self.plans[query]
        offered = tool_names(body)
        if len(history) >= len(plan):
            return {"tool_calls": [{"name": END_TOOL, "arguments": {}}]}
        if query == P1 and not history:
            return {"content": "I would translate the description."}
        name = plan[len(history)]
        if mode == "soft" and query == P0 and len(history) == 2:
            name = "Imaginary_Tool"
        elif mode == "hard" and name not in offered:
            name = offered[0]
        return {"tool_calls": [{"name": name, "arguments": {"text": "x"}}]}


def chat_for(server: OpenAIChatServer, retry: RetryPolicy = FAST) -> OpenAIChat:
    return OpenAIChat("scripted", base_url=server.base_url, retry=retry)


def no_icl_plan() -> E2EPlan:
    """The one-cell run (the no_icl baseline) of the TaskBench fixture, offline."""
    return prepare_e2e(
        *load_train_test("taskbench", FIXTURE, seed=0),
        ["none"],
        ["no_icl"],
        encoder=get_encoder("tfidf"),
        counter=get_token_counter("approx"),
    )


@pytest.fixture
def policy(split: tuple[Dataset, Dataset]) -> Policy:
    return Policy(split[1])


@pytest.fixture
def server(policy: Policy) -> Iterator[OpenAIChatServer]:
    with OpenAIChatServer(policy) as srv:
        yield srv


def cell(report: dict[str, Any], rid: str, mode: str) -> dict[str, Any]:
    (found,) = [r for r in report["results"] if r["retriever"] == rid and r["mode"] == mode]
    return found


@functools.cache
def _fitted_dtdr_c() -> ToolRetriever:
    from dtdr_agents.evaluation.bench import build_retriever

    train, _ = load_train_test("taskbench", FIXTURE, seed=0)
    retriever, _ = build_retriever("dtdr-c", encoder=get_encoder("tfidf"), seed=0, dataset=train)
    assert retriever is not None
    return retriever.fit(train.demos, train.tools)


def expected_selection(plan: E2EPlan, query: str, history: list[str]) -> list[str]:
    """The retriever's top-1 for a step, computed independently of the harness."""
    names = api_names(plan.builder.tools.names)
    back = {v: k for k, v in names.items()}
    ranking = _fitted_dtdr_c().rank(query, [back[h] for h in history])
    return [names[n] for n in select(ranking, SelectionPolicy(k=1, threshold=None)).names]


def test_requests_per_mode_bound_tools_and_hand_counts(
    plan: E2EPlan, server: OpenAIChatServer, policy: Policy, tmp_path: Path
) -> None:
    report = run_e2e(plan, chat_for(server), concurrency=3, cache=StepCache(tmp_path / "c.jsonl"))
    bodies = server.requests
    assert len(bodies) == 18 == report["calls"]
    assert {m: policy.modes.count(m) for m in set(policy.modes)} == {
        "no_icl": 6,
        "hard": 6,
        "soft": 6,
    }
    catalogue = list(plan.builder.api_catalogue.names)
    n_hard = 0
    for body in bodies:
        query, history = history_of(body)
        mode = mode_of(body, len(catalogue))
        system = body["messages"][0]["content"]
        if mode == "no_icl":
            assert tool_names(body) == [*catalogue, END_TOOL]
            assert "guidelines" not in system
        elif mode == "soft":
            assert tool_names(body) == [*catalogue, END_TOOL]
            preferred = expected_selection(plan, query, history)
            assert f"The list is below:\n{preferred!r}" in system
        else:
            n_hard += 1
            assert tool_names(body) == [*expected_selection(plan, query, history), END_TOOL]
    assert n_hard == 6

    none = cell(report, "none", "no_icl")
    assert (none["fsa"], none["sr"], none["end_accuracy"]) == (5 / 6, 1 / 2, 1.0)
    assert none["kinds"] == {"end": 2, "text": 1, "tool": 3}
    assert none["n_answered"] == 6 and none["n_errors"] == 0
    assert none["unbound_rate"] == 0.0

    soft = cell(report, "dtdr-c", "soft")
    assert (soft["fsa"], soft["sr"]) == (4 / 6, 0.0)
    assert soft["unknown_tools"] == {"Imaginary_Tool": 1}
    assert soft["kinds"]["unknown"] == 1

    hard = cell(report, "dtdr-c", "hard")
    right = 0
    plans_ok = {P0: True, P1: True}
    for demo in plan.builder.test:
        names = [api_names(plan.builder.tools.names)[c] for c in demo.calls]
        for step in demo.steps():
            history = [api_names(plan.builder.tools.names)[h] for h in step.history]
            acceptable = {
                api_names(plan.builder.tools.names).get(a, END_TOOL) for a in step.acceptable
            }
            if len(history) >= len(names):
                ok = True  # end_plan is always bound
            elif demo.query == P1 and not history:
                ok = False  # text
            else:
                offered = expected_selection(plan, demo.query, history)
                call = names[len(history)] if names[len(history)] in offered else offered[0]
                ok = call in acceptable
            right += ok
            plans_ok[demo.query] &= ok
    assert hard["fsa"] == right / 6
    assert hard["sr"] == sum(plans_ok.values()) / 2
    assert hard["unbound_rate"] == 0.0
    assert hard["prompt_tokens"] < none["prompt_tokens"]  # fewer tools bound
    assert soft["prompt_tokens"] > none["prompt_tokens"]  # guidance text added

    text = format_e2e_markdown(report)
    assert "| none | no_icl | 83.3 | 50.0 | - | - | 100.0 |" in text  # no recorded arguments
    assert "Imaginary_Tool (1)" in text
    png = plot_e2e(report, tmp_path / "fig5.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resume_after_an_interrupted_run(plan: E2EPlan, policy: Policy, tmp_path: Path) -> None:
    one_cell = no_icl_plan()
    answered = 0

    def dies_after_four(body: dict[str, Any]) -> dict[str, Any]:
        nonlocal answered
        answered += 1
        if answered > 4:
            raise RuntimeError("server went away")  # a 500 for every later request
        return policy(body)

    path = tmp_path / "cache.jsonl"
    with OpenAIChatServer(dies_after_four) as srv:
        first = run_e2e(one_cell, chat_for(srv, NO_RETRY), cache=StepCache(path), concurrency=1)
    row = first["results"][0]
    assert row["n_answered"] == 4 and row["n_errors"] == 2
    assert row["errors"] == {"http_500": 2}
    assert len(path.read_text().splitlines()) == 4  # errors are not cached
    with path.open("a") as fh:
        fh.write('{"key": "cut-off mid-wri')  # an interruption in the middle of a line

    cache = StepCache(path)
    assert len(cache) == 4 and cache.skipped_lines == 1
    dry = dry_run_report(one_cell, model="scripted", cache=cache)
    assert dry["results"][0]["calls"] == 2 and dry["results"][0]["cached"] == 4
    with OpenAIChatServer(policy) as srv:
        second = run_e2e(one_cell, chat_for(srv), cache=cache, concurrency=2)
        assert len(srv.requests) == 2  # only the two missing steps
    assert second["calls"] == 2 and second["cached"] == 4
    done = second["results"][0]
    assert (done["fsa"], done["sr"], done["n_errors"]) == (5 / 6, 1 / 2, 0)
    lines = path.read_text().splitlines()
    assert len(lines) == 7  # 4 + the cut line + 2 new ones, each on its own line
    assert all(json.loads(line)["key"] for line in lines[:4] + lines[5:])
    with OpenAIChatServer(policy) as srv:
        third = run_e2e(one_cell, chat_for(srv), cache=StepCache(path))
        assert srv.requests == []  # everything cached
    assert third["calls"] == 0 and third["cached"] == 6
    assert third["results"][0]["fsa"] == 5 / 6


@pytest.mark.parametrize("status", [500, 429])
def test_retry_on_injected_errors(status: int, policy: Policy) -> None:
    one_cell = no_icl_plan()
    with OpenAIChatServer(policy) as srv:
        srv.inject(status, times=3)
        report = run_e2e(one_cell, chat_for(srv), concurrency=2)
        assert len(srv.failed) == 3
        assert len(srv.requests) == 6
    row = report["results"][0]
    assert row["n_errors"] == 0 and row["fsa"] == 5 / 6


def test_bad_endpoints_are_recorded_never_raised(policy: Policy, tmp_path: Path) -> None:
    one_cell = no_icl_plan()
    unreachable = OpenAIChat("m", base_url="http://127.0.0.1:9/v1", retry=NO_RETRY)
    report = run_e2e(one_cell, unreachable, cache=StepCache(tmp_path / "c.jsonl"))
    row = report["results"][0]
    assert row["n_errors"] == 6 and row["errors"] == {"unreachable": 6}
    assert row["fsa"] is None and row["sr"] is None
    assert "unreachable" in format_e2e_markdown(report)
    assert not (tmp_path / "c.jsonl").exists()

    def mixed(body: dict[str, Any]) -> dict[str, Any]:
        query, history = history_of(body)
        if query == P1 and not history:
            return {"raw": "{not json"}  # malformed JSON body
        if query == P1:
            return {"raw": json.dumps({"id": "x", "choices": []})}  # no choices
        return policy(body)

    with OpenAIChatServer(mixed) as srv:
        report = run_e2e(one_cell, chat_for(srv, NO_RETRY), cache=StepCache(tmp_path / "m.jsonl"))
    row = report["results"][0]
    # an HTTP 200 that is not a completion is the endpoint's fault, not a malformed answer
    assert row["errors"] == {"endpoint": 2} and row["n_endpoint_errors"] == 2
    assert "malformed" not in row["kinds"]
    assert row["n_answered"] == 4
    assert row["fsa"] == 4 / 4  # P0's 4 steps right; P1's steps are not scored
    cached = (tmp_path / "m.jsonl").read_text().splitlines()
    assert len(cached) == 4  # the faults are never cached


@pytest.mark.parametrize(
    "raw",
    [
        json.dumps({"error": {"message": "model overloaded", "type": "server_error"}}),
        json.dumps({"id": "x", "object": "chat.completion", "choices": []}),
        '{"id": "x", "choices": [{"index": 0, "message": {"role": "assistant", "content": "h',
    ],
    ids=["error-body", "no-choices", "cut-short"],
)
def test_endpoint_faults_are_retried_then_recorded_apart(
    raw: str, policy: Policy, tmp_path: Path
) -> None:
    one_cell = no_icl_plan()
    faults = {"left": 2}

    def flaky(body: dict[str, Any]) -> dict[str, Any]:
        if faults["left"] > 0:
            faults["left"] -= 1
            return {"raw": raw}
        return policy(body)

    retry = RetryPolicy(max_retries=3, base_delay=0.0, timeout=10.0)
    with OpenAIChatServer(flaky) as srv:
        report = run_e2e(one_cell, chat_for(srv, retry), concurrency=1)
    row = report["results"][0]
    assert row["n_errors"] == 0 and row["fsa"] == 5 / 6  # the retries got the real answers
    with OpenAIChatServer(lambda body: {"raw": raw}) as srv:
        report = run_e2e(one_cell, chat_for(srv, retry), cache=StepCache(tmp_path / "c.jsonl"))
        assert len(srv.requests) == 6 * 4  # every step tried 1 + 3 times
    row = report["results"][0]
    assert row["n_endpoint_errors"] == 6 and row["n_answered"] == 0
    assert not (tmp_path / "c.jsonl").exists()  # nothing cached


def test_dry_run_counts_calls_and_tokens_offline(plan: E2EPlan) -> None:
    report = dry_run_report(plan)
    assert report["kind"] == "e2e" and report["dry_run"] is True
    assert [(r["retriever"], r["mode"], r["calls"]) for r in report["results"]] == [
        ("none", "no_icl", 6),
        ("dtdr-c", "hard", 6),
        ("dtdr-c", "soft", 6),
    ]
    assert report["calls"] == 18
    by = {r["mode"]: r for r in report["results"]}
    assert by["hard"]["tools_bound"] == 2.0 and by["no_icl"]["tools_bound"] == 4.0
    assert by["hard"]["prompt_tokens"] < by["no_icl"]["prompt_tokens"] < by["soft"]["prompt_tokens"]
    assert report["prompt_tokens_total"] == sum(r.prompt_tokens for r in plan.requests)
    # Figure 5's split: with every tool bound the schemas are constant; hard masks vary them
    for req in plan.requests:
        assert 0 < req.variable_tokens < req.prompt_tokens
        if req.mode == "hard":
            assert req.variable_tokens > req.tool_tokens
    assert by["no_icl"]["variable_tokens"] < by["hard"]["variable_tokens"]
    assert "total: 18 calls" in format_e2e_markdown(report)


def test_cells() -> None:
    assert cells(["none", "dtdr-c"], ["no_icl", "hard"]) == [
        ("none", "no_icl"),
        ("dtdr-c", "hard"),
    ]
    assert cells(["dtdr-c"], ["hard"]) == [("dtdr-c", "hard")]
    assert cells(["dtdr-c"], ["no_icl"]) == [("none", "no_icl")]
    with pytest.raises(ValueError, match="unknown mode"):
        cells(["dtdr-c"], ["medium"])
    assert cells(["none"], ["hard"]) == [("none", "no_icl")]  # "none" is the baseline
    with pytest.raises(ValueError, match="no \\(retriever, mode\\) pair"):
        cells([], ["hard"])


def test_api_names_are_safe_and_unique() -> None:
    names = api_names(["Image Captioning", "Image_Captioning", "end_plan", "a" * 80, "ok-1"])
    assert names["Image Captioning"] == "Image_Captioning"
    assert names["Image_Captioning"] == "Image_Captioning_2"
    assert names["end_plan"] == "end_plan_2"
    assert len(names["a" * 80]) == 64
    assert names["ok-1"] == "ok-1"
    assert len(set(names.values())) == 5


async def test_arun_e2e_inside_a_running_loop(policy: Policy) -> None:
    from dtdr_agents.evaluation.e2e import arun_e2e

    one_cell = no_icl_plan()
    with OpenAIChatServer(policy) as srv:
        report = await arun_e2e(one_cell, chat_for(srv), concurrency=6)
    assert report["results"][0]["fsa"] == 5 / 6
    with pytest.raises(ValueError, match="concurrency"):
        await arun_e2e(one_cell, chat_for(srv), concurrency=0)


def test_weighted_and_raw_demo_payloads(split: tuple[Dataset, Dataset]) -> None:
    train, test = split
    built = prepare_e2e(
        train,
        test,
        ["dtdr-c"],
        ["raw_demos", "hard_weighted", "soft_weighted"],
        encoder=get_encoder("tfidf"),
        k=2,
        counter=get_token_counter("approx"),
    )
    catalogue = list(built.builder.api_catalogue.names)
    by_mode: dict[str, list[Any]] = {}
    for req in built.requests:
        by_mode.setdefault(req.mode, []).append(req)
    assert {m: len(r) for m, r in by_mode.items()} == {
        "raw_demos": 6,
        "hard_weighted": 6,
        "soft_weighted": 6,
    }
    for req in by_mode["hard_weighted"]:
        names = [t["function"]["name"] for t in req.tools]
        assert names == [n for n in catalogue if n in req.preferred] + [END_TOOL]
        system = req.messages[0]["content"]
        assert "# Tool guidance" in system
        for name in req.preferred:
            assert f"'function': '{name}', 'probability': " in system
    for req in by_mode["soft_weighted"]:
        assert [t["function"]["name"] for t in req.tools] == [*catalogue, END_TOOL]
        assert "# Soft Mask guidelines" in req.messages[0]["content"]
        assert "'probability': " in req.messages[0]["content"]
    for req in by_mode["raw_demos"]:
        assert [t["function"]["name"] for t in req.tools] == [*catalogue, END_TOOL]
        system = req.messages[0]["content"]
        demos = system.split("# Demonstrations\n", 1)[1].split("\n\nQuery: ")
        assert 1 <= len(demos) <= 5
        assert all(any(p in d for p in req.preferred) for d in demos)
    # one example demonstration for the run: the same in every plan, mode and step, so the
    # prompt's constant part is one cacheable prefix
    examples = {
        r.messages[0]["content"].split("# Example\n", 1)[1].split("\n\n")[0] for r in built.requests
    }
    assert len(examples) == 1 and len({r.step.plan for r in built.requests}) == 2


def test_lim_asks_the_same_endpoint_and_is_skipped_when_it_fails(
    split: tuple[Dataset, Dataset], policy: Policy
) -> None:
    train, test = split

    def responder(body: dict[str, Any]) -> dict[str, Any]:
        if not body.get("tools"):  # Less-is-More asks for the ideal tools, in text
            return {"content": '{"tools": [{"name": "t", "description": "translate text"}]}'}
        return policy(body)

    with OpenAIChatServer(responder) as srv:
        chat = chat_for(srv)
        built = prepare_e2e(
            train,
            test,
            ["lim"],
            ["hard"],
            encoder=get_encoder("tfidf"),
            k=1,
            counter=get_token_counter("approx"),
            chat_model=chat,
        )
        asked = [b for b in srv.requests if not b.get("tools")]
        assert len(asked) == 2  # one ideal-tools question per test request (memoised)
        assert built.cells == [("lim", "hard")] and len(built.requests) == 6
        report = run_e2e(built, chat)
    assert report["results"][0]["n_answered"] == 6

    down = OpenAIChat("m", base_url="http://127.0.0.1:9/v1", retry=NO_RETRY)
    skipped = prepare_e2e(
        train,
        test,
        ["none", "lim"],
        ["no_icl", "hard"],
        encoder=get_encoder("tfidf"),
        counter=get_token_counter("approx"),
        chat_model=down,
    )
    assert "ranking failed" in skipped.skipped["lim"]
    assert skipped.cells == [("none", "no_icl")]
    assert {r.retriever for r in skipped.requests} == {"none"}
    without = prepare_e2e(
        train,
        test,
        ["lim"],
        ["hard"],
        encoder=get_encoder("tfidf"),
        counter=get_token_counter("approx"),
    )
    assert "chat model" in without.skipped["lim"] and without.requests == []
