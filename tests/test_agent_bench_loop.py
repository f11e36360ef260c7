"""The live-agent benchmark end to end against a loopback OpenAI server (issue 37).

A scripted model plays each test plan of the tiny TaskBench fixture: it calls the plan's next
tool when the request binds it, searches for it (``search_tools`` / ``retrieve_tools``) when
only a search tool is bound, answers a selection request with the plan's tools, and stops
when the plan is done. No figure here comes from a real model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_server import OpenAIChatServer, clear_proxies, tool_names

from dtdr_agents.cli import main
from dtdr_agents.datasets import load_train_test
from dtdr_agents.evaluation.agent_bench import (
    REPLAYED_FIGURES,
    SYSTEM_PROMPT,
    BenchEndpoint,
    api_split,
    run_agent_bench,
)
from dtdr_agents.evaluation.e2e import StepCache
from dtdr_agents.foundation.chat import OpenAIChat
from dtdr_agents.foundation.encoders import get_encoder
from dtdr_agents.foundation.retry import RetryPolicy
from dtdr_agents.runtime.tokens import CharApproxCounter

pytest.importorskip("langchain_openai")
from langchain_dtdr.agent_bench import CONTESTANTS, make_contestants

DATA = Path(__file__).parent / "fixtures" / "datasets" / "taskbench" / "data_tiny"
META = ("search_tools", "retrieve_tools")
FITTED: dict[tuple[str, bool], Any] = {}
"""Retrievers fitted on the fixture's split, shared by the library-level tests."""


def _split() -> tuple[Any, Any]:
    train, test = load_train_test("taskbench", str(DATA), seed=0)
    train, test, _ = api_split(train, test)
    return train, test


def _query(body: dict[str, Any]) -> str:
    user = next(m for m in body["messages"] if m["role"] == "user")
    content = user["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def plan_player(
    plans: dict[str, list[str]],
    bad: Callable[[str, list[str]], dict[str, Any] | None] | None = None,
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A scripted model following each request's plan (see the module docstring)."""

    def responder(body: dict[str, Any]) -> dict[str, Any]:
        plan = plans[_query(body)]
        if body.get("response_format"):  # LLMToolSelectorMiddleware's selection call
            return {"content": json.dumps({"tools": list(dict.fromkeys(plan))})}
        history = [
            c["function"]["name"]
            for m in body["messages"]
            if m["role"] == "assistant"
            for c in m.get("tool_calls") or []
            if c["function"]["name"] not in META
        ]
        if bad is not None and (reply := bad(_query(body), history)) is not None:
            return reply
        if len(history) >= len(plan):
            return {"content": "Done."}
        offered = tool_names(body)
        wanted = plan[len(history)]
        if wanted in offered:
            return {"tool_calls": [{"name": wanted, "arguments": {}}]}
        for meta in META:
            if meta in offered:
                query = {"query": wanted.replace("_", " ")}
                return {"tool_calls": [{"name": meta, "arguments": query}]}
        return {"content": f"No offered tool does {wanted}."}

    return responder


@pytest.fixture
def split() -> tuple[Any, Any]:
    return _split()


@pytest.fixture
def server(split: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIChatServer]:
    clear_proxies(monkeypatch)
    plans = {d.query: list(d.calls) for d in split[1].demos}
    with OpenAIChatServer(plan_player(plans)) as srv:
        yield srv


def _argv(out: Path, contestants: str, *extra: str) -> list[str]:
    """The CLI's arguments for the tiny fixture and the scripted model."""
    return [
        "agent-bench", "--dataset", "taskbench", "--path", str(DATA), "--contestants",
        contestants, "--json", str(out), "--encoder", "tfidf", "--no-cache", "--tokens",
        "approx", "--model-name", "scripted", "-q", *extra,
    ]  # fmt: skip


def _figures(report: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, c in report["contestants"].items():
        out[name] = {k: v for k, v in c.items() if k != "wall_ms"}
    comps = report["comparisons"]
    return {"contestants": out, "comparisons": comps, "n_plans": report["n_plans"]}


def test_every_contestant_runs_and_replay_rebuilds_the_figures(
    server: OpenAIChatServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ab.json"
    argv = _argv(out, ",".join(CONTESTANTS), "--k", "2")
    assert main([*argv, "--base-url", server.base_url]) == 0
    live = json.loads(out.read_text())
    assert live["kind"] == "agent-bench" and live["model"] == "scripted"
    assert set(live["contestants"]) == set(CONTESTANTS)
    n = live["n_plans"]
    assert n == 2
    for name, c in live["contestants"].items():
        assert c["scored"] == n, name
        assert c["model_calls"]["value"] >= 1
    # all tools bound: the scripted model follows every plan, then stops
    assert live["contestants"]["all-tools"]["success"]["value"] == 1.0
    # bigtool and search spend model calls on searching
    all_calls = live["contestants"]["all-tools"]["model_calls"]["value"]
    assert live["contestants"]["bigtool"]["model_calls"]["value"] > all_calls
    assert live["contestants"]["search"]["model_calls"]["value"] > all_calls
    # the selector pays one selection call per model call
    assert live["contestants"]["llm-selector"]["model_calls"]["value"] > all_calls
    # the system prompt reached every agent request
    agent = [b for b in server.requests if not b.get("response_format")]
    assert all(b["messages"][0]["content"] == SYSTEM_PROMPT for b in agent)
    asked = len(server.requests)
    capsys.readouterr()
    assert main(["report", str(out)]) == 0  # the report command prints its tables
    table = capsys.readouterr().out
    assert "| dtdr vs bigtool |" in table and "model scripted" in table
    # replay with the server stopped: nothing sent, the same figures
    server.__exit__(None, None, None)
    replay_out = tmp_path / "replay.json"
    argv[argv.index(str(out))] = str(replay_out)
    cache = f"{out}.steps.jsonl"
    assert main([*argv, "--replay", "--step-cache", cache]) == 0
    replay = json.loads(replay_out.read_text())
    assert replay["replay"] is True
    assert _figures(replay) == _figures(live)
    assert len(server.requests) == asked
    assert "wall_ms" not in REPLAYED_FIGURES
    # a replay with a missing answer names it and exits 2
    Path(cache).write_text("")
    assert main([*argv, "--replay", "--step-cache", cache]) == 2


def _bench(
    base_url: str | None, cache: Path, names: tuple[str, ...], **retry: Any
) -> tuple[list[Any], BenchEndpoint]:
    train, test = _split()
    chat = None
    if base_url is not None:
        policy = RetryPolicy(base_delay=0.0, max_delay=0.0, timeout=10.0, **retry)
        chat = OpenAIChat("scripted", base_url=base_url, retry=policy)
    endpoint = BenchEndpoint("scripted", StepCache(cache), chat, counter=CharApproxCounter())
    contestants = make_contestants(
        names,
        endpoint,
        train=train,
        zero_train=dataclasses.replace(train, demos=[]),
        tools=train.tools,
        encoder=get_encoder("tfidf"),
        k=2,
        system_prompt=SYSTEM_PROMPT,
        fitted=FITTED,
    )
    return run_agent_bench(test, contestants, endpoint), endpoint


def test_endpoint_faults_are_retried_and_never_cached(
    server: OpenAIChatServer, tmp_path: Path
) -> None:
    cache = tmp_path / "c.jsonl"
    server.inject(200, times=1, message="overloaded")  # HTTP 200 with an error body
    runs, _ = _bench(server.base_url, cache, ("all-tools",), max_retries=2)
    assert all(r.status == "scored" for r in runs)
    assert len(server.failed) == 1
    rows = StepCache(cache)
    assert len(rows) == len(server.requests)  # only answers are cached
    assert all("error" not in row["response"] for row in rows.rows())


def test_a_fault_that_outlasts_the_retries_fails_the_run_and_exits_non_zero(
    split: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clear_proxies(monkeypatch)
    plans = {d.query: list(d.calls) for d in split[1].demos}
    player = plan_player(plans)
    calls = {"n": 0}

    def faulty(body: dict[str, Any]) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] <= 3:  # every attempt of the first request: an empty completion
            return {"raw": json.dumps({"id": "x", "object": "chat.completion", "choices": []})}
        return player(body)

    cache = tmp_path / "c.jsonl"
    with OpenAIChatServer(faulty) as srv:
        runs, _ = _bench(srv.base_url, cache, ("all-tools",), max_retries=2)
        assert runs[0].status == "endpoint_error" and "endpoint" in (runs[0].error or "")
        assert all(r.status == "scored" for r in runs[1:])
        n_cached = len(StepCache(cache))
        assert n_cached == len(srv.requests) - 3  # the faulted request is not cached
        out = tmp_path / "ab.json"
        argv = _argv(out, "all-tools", "--base-url", srv.base_url, "--max-retries", "0")
        calls["n"] = 0
        assert main(argv) == 1
        report = json.loads(out.read_text())
        assert report["contestants"]["all-tools"]["endpoint_errors"] >= 1
        rows = [*StepCache(cache).rows(), *StepCache(f"{out}.steps.jsonl").rows()]
        assert all(row["response"].get("choices") for row in rows)  # no fault was cached


@contextlib.contextmanager
def dropping_server() -> Iterator[tuple[str, list[int]]]:
    """A loopback socket that reads each request and closes without answering."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.settimeout(0.05)
    accepted = [0]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn:
                conn.recv(1 << 16)
                accepted[0] += 1

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", accepted
    finally:
        stop.set()
        thread.join(timeout=5)
        sock.close()


def test_a_dropped_connection_is_retried_and_the_run_is_an_endpoint_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clear_proxies(monkeypatch)
    cache = tmp_path / "c.jsonl"
    with dropping_server() as (url, accepted):
        runs, _ = _bench(url, cache, ("dtdr",), max_retries=1)
    assert runs and all(r.status == "endpoint_error" for r in runs)
    assert accepted[0] == 2 * len(runs)  # each run's first request: one try and one retry
    assert len(StepCache(cache)) == 0


def test_bad_answers_are_failures_with_reasons(
    split: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clear_proxies(monkeypatch)
    test = split[1]
    plans = {d.query: list(d.calls) for d in test.demos}
    queries = [d.query for d in test.demos]

    def bad(query: str, history: list[str]) -> dict[str, Any] | None:
        if query == queries[0]:  # a tool that does not exist, then a stop
            if history:
                return {"content": "Done."}
            return {"tool_calls": [{"name": "Teleport", "arguments": {}}]}
        # the same call again and again
        return {"tool_calls": [{"name": plans[query][0], "arguments": {"x": 1}}]}

    with OpenAIChatServer(plan_player(plans, bad)) as srv:
        runs, _ = _bench(srv.base_url, tmp_path / "c.jsonl", ("all-tools", "dtdr"), max_retries=0)
    by = {(r.contestant, r.plan): r for r in runs}
    first = by["all-tools", 0]
    assert first.status == "scored" and first.failure == "unknown_tool"
    assert first.outside_names == ["Teleport"] and not first.success
    looping = by["all-tools", 1]
    assert looping.failure == "loop" and not looping.success
    assert looping.agent_calls == len(test.demos[1].calls) + 3  # stopped at the step limit


def test_unparseable_arguments_are_a_failure(
    split: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clear_proxies(monkeypatch)
    plans = {d.query: list(d.calls) for d in split[1].demos}

    def bad(query: str, history: list[str]) -> dict[str, Any] | None:
        return {"tool_calls": [{"name": plans[query][0], "arguments": "{not json"}]}

    with OpenAIChatServer(plan_player(plans, bad)) as srv:
        runs, _ = _bench(srv.base_url, tmp_path / "c.jsonl", ("all-tools",), max_retries=0)
    assert {r.failure for r in runs} == {"unparseable"}
    assert all(r.status == "scored" and r.unparseable == 1 for r in runs)


def test_all_tools_that_do_not_fit_are_recorded_with_their_size(
    server: OpenAIChatServer, tmp_path: Path
) -> None:
    out = tmp_path / "ab.json"
    argv = _argv(out, "all-tools,dtdr", "--base-url", server.base_url, "--max-prompt-tokens", "20")
    assert main(argv) == 0
    report = json.loads(out.read_text())
    wide = report["contestants"]["all-tools"]
    assert wide["scored"] == 0 and wide["does_not_fit"] == report["n_plans"]
    assert wide["does_not_fit_prompt_tokens"] > 20
    assert "skipped" in report["comparisons"][0]
