"""OpenAI Agents SDK: per-step is_enabled and the MCP tool_filter bind what StepSelector binds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, AgentHooks, RunConfig
from agents.mcp import ToolFilterContext
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from mcp.types import Tool as MCPTool
from offline_script import run_offline
from openai import AsyncOpenAI
from openai_server import OpenAIChatServer, plan_responder, tool_names

from dtdr_agents.runtime import StepSelector, resolve_policy
from langchain_dtdr.testing import DemoSetup, demo_setup
from openai_agents_dtdr import DTDRRunContext, DTDRToolSelection, current_turn
from openai_agents_dtdr.testing import PlanModel, agents_tools

NO_TRACING = RunConfig(tracing_disabled=True)


@pytest.fixture(scope="module")
def demo() -> DemoSetup:
    return demo_setup("dtdr-c", encoder="tfidf")


def _expected(
    demo: DemoSetup, query: str, calls: tuple[str, ...], n: int, k: int
) -> list[list[str]]:
    ref = StepSelector(demo.tools, demo.retriever, policy=resolve_policy(k=k))
    return [list(ref.select(query, calls[:i]).bound) for i in range(n)]


@pytest.mark.parametrize("k", [3, 5])
async def test_each_model_call_gets_the_step_selectors_tools(demo: DemoSetup, k: int) -> None:
    done = 0
    for d in demo.test[:6]:
        model = PlanModel(demo.plans(), demo.args_for)
        selection = DTDRToolSelection(demo.retriever, k=k)
        agent = selection.agent(Agent(name="a", model=model, tools=agents_tools(demo.tools)))
        result = await selection.run(agent, d.query, run_config=NO_TRACING)
        assert model.offered == _expected(demo, d.query, d.calls, len(model.offered), k)
        done += str(result.final_output).startswith("Done:")
    assert done >= 2  # some plans run to the end: the run's calls reached the selection


def test_current_turn_reads_a_continued_conversation() -> None:
    items = [
        {"role": "user", "content": "old request"},
        {"type": "function_call", "name": "a", "call_id": "1", "arguments": "{}"},
        {"role": "user", "content": [{"type": "input_text", "text": "new request"}]},
        {"type": "function_call", "name": "b", "call_id": "2", "arguments": "{}"},
    ]
    assert current_turn(items) == ("new request", ("b",))
    with pytest.raises(ValueError, match="no user message"):
        current_turn([{"type": "function_call", "name": "b"}])


async def test_a_run_without_the_request_is_a_clear_error(demo: DemoSetup) -> None:
    from agents import Runner

    selection = DTDRToolSelection(demo.retriever, k=3)
    model = PlanModel(demo.plans())
    agent = selection.agent(Agent(name="a", model=model, tools=agents_tools(demo.tools)))
    with pytest.raises(TypeError, match=r"context=selection\.context"):
        await Runner.run(agent, demo.test[0].query, run_config=NO_TRACING)


def test_bad_setups_are_refused(demo: DemoSetup) -> None:
    with pytest.raises(ValueError, match="mode='hard'"):
        DTDRToolSelection(demo.retriever, mode="soft")
    selection = DTDRToolSelection(demo.retriever)
    tools = agents_tools(demo.tools)

    class Mine(AgentHooks[object]):
        pass

    with pytest.raises(ValueError, match="subclass DTDRAgentHooks"):
        selection.agent(Agent(name="a", tools=tools, hooks=Mine()))
    tools[0].is_enabled = False
    with pytest.raises(ValueError, match="already has is_enabled"):
        selection.agent(Agent(name="a", tools=tools))


def test_tools_outside_the_catalogue_stay_enabled(demo: DemoSetup) -> None:
    extra = agents_tools(demo.tools.subset(demo.tools.names[:1]))[0]
    extra.name = "outside"
    selection = DTDRToolSelection(demo.retriever, k=2)
    agent = selection.agent(Agent(name="a", tools=[*agents_tools(demo.tools), extra]))
    assert agent.tools[-1] is extra
    assert all(t.is_enabled is not True for t in agent.tools[:-1])


def test_the_mcp_tool_filter_is_the_same_selection(demo: DemoSetup) -> None:
    d = demo.test[1]
    selection = DTDRToolSelection(demo.retriever, k=3)
    run = selection.context(d.query)
    run.calls.extend(d.calls[:1])
    agent = Agent(name="a")
    ctx = ToolFilterContext(run_context=run, agent=agent, server_name="s")
    schema = {"type": "object", "properties": {}}
    offered = [
        t.name
        for t in (MCPTool(name=n, inputSchema=schema) for n in [*demo.tools.names, "other"])
        if selection.tool_filter(ctx, t)
    ]
    assert offered[:-1] == list(_expected(demo, d.query, d.calls, 2, 3)[1])
    assert offered[-1] == "other"
    assert isinstance(run, DTDRRunContext) and len(run.steps) == 1


@pytest.fixture
def server(demo: DemoSetup, monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIChatServer]:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with OpenAIChatServer(plan_responder(demo.plans(), demo.args_for)) as srv:
        yield srv


async def test_against_an_openai_compatible_server_on_loopback(
    demo: DemoSetup, server: OpenAIChatServer
) -> None:
    client = AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    model = OpenAIChatCompletionsModel(model="plan-follower", openai_client=client)
    selection = DTDRToolSelection(demo.retriever, k=3)
    agent = selection.agent(Agent(name="a", model=model, tools=agents_tools(demo.tools)))
    d = next(d for d in demo.test if len(d.calls) >= 2)
    await selection.run(agent, d.query, run_config=NO_TRACING)
    sent = [tool_names(body) for body in server.requests]
    assert sent and sent == _expected(demo, d.query, d.calls, len(sent), 3)


def test_the_cookbook_example_runs_offline(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = run_offline("openai_agents_agent.py", monkeypatch, capsys)
    plan = "open_file -> summarize_pdf -> get_email_address -> compose_email"
    assert lines[0].startswith("step 0, after the request: offered ")
    assert "open_file" in lines[0]
    assert lines[-1] == f"answer: Done: {plan}."


async def test_an_mcp_server_filtered_by_the_selection(demo: DemoSetup, tmp_path: Any) -> None:
    """A real MCP server (stdio): each model call gets the MCP tools StepSelector binds."""
    import json
    import sys
    from pathlib import Path

    from agents.mcp import MCPServerStdio

    (tmp_path / "tools.json").write_text(json.dumps(demo.tools.to_list()))
    script = Path(__file__).with_name("mcp_upstream_server.py")
    selection = DTDRToolSelection(demo.retriever, k=3)
    params = {
        "command": sys.executable,
        "args": [str(script), "--tools", str(tmp_path / "tools.json")],
    }
    d = next(d for d in demo.test if len(d.calls) >= 2)
    async with MCPServerStdio(params, tool_filter=selection.tool_filter, name="up") as server:
        model = PlanModel(demo.plans(), demo.args_for)
        agent = selection.agent(Agent(name="a", model=model, mcp_servers=[server]))
        await selection.run(agent, d.query, run_config=NO_TRACING)
    assert len(model.offered) >= 2
    assert model.offered == _expected(demo, d.query, d.calls, len(model.offered), 3)


async def test_a_streamed_run_on_loopback(demo: DemoSetup, server: OpenAIChatServer) -> None:
    from agents import Runner

    client = AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    model = OpenAIChatCompletionsModel(model="plan-follower", openai_client=client)
    selection = DTDRToolSelection(demo.retriever, k=3)
    agent = selection.agent(Agent(name="a", model=model, tools=agents_tools(demo.tools)))
    d = next(d for d in demo.test if len(d.calls) >= 2)
    run = selection.context(d.query)
    result = Runner.run_streamed(agent, d.query, context=run, run_config=NO_TRACING)
    async for _ in result.stream_events():
        pass
    sent = [tool_names(body) for body in server.requests]
    assert len(sent) >= 2 and all(body.get("stream") for body in server.requests)
    assert sent == _expected(demo, d.query, d.calls, len(sent), 3)
    assert [s.bound for s in run.steps] == [tuple(s) for s in sent]
