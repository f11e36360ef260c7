"""Pydantic AI: prepare_tools binds what StepSelector binds; ToolSearch reads the calls so far."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from offline_script import run_offline
from openai_server import OpenAIChatServer, plan_responder, tool_names
from pydantic_ai import Agent
from pydantic_ai.capabilities import PrepareTools, ToolSearch
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from dtdr_agents.runtime import StepSelector, resolve_policy
from dtdr_agents.runtime.tool_search import ToolSearchBackend, ToolSearchWarning
from langchain_dtdr.testing import DemoSetup, demo_setup
from pydantic_ai_dtdr import current_turn, prepare_tools, search_strategy
from pydantic_ai_dtdr.selection import NoRequestError
from pydantic_ai_dtdr.testing import PlanModel, pydantic_tools


@pytest.fixture(scope="module")
def demo() -> DemoSetup:
    return demo_setup("dtdr-c", encoder="tfidf")


def _expected(
    demo: DemoSetup, query: str, calls: tuple[str, ...], n: int, k: int
) -> list[list[str]]:
    ref = StepSelector(demo.tools, demo.retriever, policy=resolve_policy(k=k))
    return [list(ref.select(query, calls[:i]).bound) for i in range(n)]


@pytest.mark.parametrize("k", [3, 5])
def test_each_model_call_gets_the_step_selectors_tools(demo: DemoSetup, k: int) -> None:
    done = 0
    for d in demo.test[:6]:
        model = PlanModel(demo.plans(), demo.args_for)
        prepare = prepare_tools(demo.retriever, k=k)
        agent = Agent(model, tools=pydantic_tools(demo.tools), capabilities=[PrepareTools(prepare)])
        result = agent.run_sync(d.query)
        assert model.offered == _expected(demo, d.query, d.calls, len(model.offered), k)
        assert [s.bound for s in prepare.steps(result.run_id)] == [tuple(o) for o in model.offered]
        done += result.output.startswith("Done:")
    assert done >= 2


def test_current_turn() -> None:
    messages = [
        ModelRequest(parts=[UserPromptPart("old")]),
        ModelResponse(parts=[TextPart("answer")]),
        ModelRequest(parts=[UserPromptPart("new request")]),
        ModelResponse(parts=[ToolCallPart("a", {}, tool_call_id="1")]),
        ModelRequest(parts=[ToolReturnPart("a", "ok", tool_call_id="1")]),
        ModelResponse(parts=[ToolCallPart("search_tools", {}), ToolCallPart("b", {})]),
    ]
    turn = current_turn(messages, skip=["search_tools"])
    assert (turn.request, turn.calls) == ("new request", ("a", "b"))
    with pytest.raises(NoRequestError, match="user prompt"):
        current_turn(messages[:2])


def test_tools_outside_the_catalogue_pass_through(demo: DemoSetup) -> None:
    def outside() -> str:
        """A tool the retriever does not rank."""
        return "ok"

    model = PlanModel(demo.plans(), demo.args_for)
    agent = Agent(
        model,
        tools=[*pydantic_tools(demo.tools), outside],
        capabilities=[PrepareTools(prepare_tools(demo.retriever, k=2))],
    )
    agent.run_sync(demo.test[0].query)
    assert all(o[-1] == "outside" and len(o) <= 3 for o in model.offered)


def test_soft_modes_are_refused(demo: DemoSetup) -> None:
    with pytest.raises(ValueError, match="mode='hard'"):
        prepare_tools(demo.retriever, mode="soft")


def test_the_search_strategy_answers_with_the_runs_calls(demo: DemoSetup) -> None:
    d = next(d for d in demo.test if len(d.calls) >= 2)
    strategy = search_strategy(demo.retriever, k=3)
    backend = ToolSearchBackend(demo.retriever, policy=resolve_policy(k=3))
    messages = [
        ModelRequest(parts=[UserPromptPart(d.query)]),
        ModelResponse(parts=[ToolCallPart(d.calls[0], {}, tool_call_id="1")]),
    ]
    names = list(demo.tools.names)
    assert strategy.search(messages, ["email"], names) == backend.search("email", d.calls[:1])
    assert strategy.search(messages, [], names) == backend.search(d.query, d.calls[:1])
    with pytest.warns(ToolSearchWarning, match="ghost"):
        found = strategy.search(messages, [d.query], [*names, "ghost"])
    assert "ghost" not in found


def test_a_run_through_tool_search(demo: DemoSetup) -> None:
    done = 0
    for d in demo.test[:4]:
        model = PlanModel(demo.plans(), demo.args_for)
        agent = Agent(
            model,
            tools=pydantic_tools(demo.tools, defer_loading=True),
            capabilities=[ToolSearch(strategy=search_strategy(demo.retriever, k=3))],
        )
        done += agent.run_sync(d.query).output.startswith("Done:")
        assert model.offered[0] == ["search_tools"]  # every tool deferred at first
    assert done >= 2


@pytest.fixture
def server(demo: DemoSetup, monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIChatServer]:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with OpenAIChatServer(plan_responder(demo.plans(), demo.args_for)) as srv:
        yield srv


def test_against_an_openai_compatible_server_on_loopback(
    demo: DemoSetup, server: OpenAIChatServer
) -> None:
    provider = OpenAIProvider(base_url=server.base_url, api_key="test")
    model = OpenAIChatModel("plan-follower", provider=provider)
    agent = Agent(
        model,
        tools=pydantic_tools(demo.tools),
        capabilities=[PrepareTools(prepare_tools(demo.retriever, k=3))],
    )
    d = next(d for d in demo.test if len(d.calls) >= 2)
    agent.run_sync(d.query)
    sent = [tool_names(body) for body in server.requests]
    assert sent and sent == _expected(demo, d.query, d.calls, len(sent), 3)


def test_the_cookbook_example_runs_offline(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = run_offline("pydantic_ai_agent.py", monkeypatch, capsys)
    plan = "open_file -> summarize_pdf -> get_email_address -> compose_email"
    assert lines[0].startswith("step 0, after the request: bound ")
    assert "open_file" in lines[0]
    assert lines.count(f"answer: Done: {plan}.") == 2  # prepare_tools, then tool search
