"""Prompt-cache-stable binding (``cache="append"``) through real HTTP.

On the loopback OpenAI server (tests/openai_server.py), every request's tools array must start
with the previous request's within a turn, for the LangGraph factory, the `create_agent`
middleware and the LlamaIndex agent; the list grows in first-bound order and never beyond the
cap. Also the offline replay of plans (`dtdr_agents.runtime.replay`) and its figures.
"""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.tools import BaseTool
from langchain_openai import ChatOpenAI
from loopback import demo, no_proxies, server
from openai_server import OpenAIChatServer, history_of, tool_names

from dtdr_agents.foundation.selection import SelectionPolicy, select
from dtdr_agents.runtime import BindingPolicy, StepSelector, run_report
from dtdr_agents.runtime.replay import replay_plans
from langchain_dtdr import DTDRMiddleware
from langchain_dtdr.testing import DemoSetup, langchain_tools
from langgraph_dtdr import create_dtdr_agent

K = 3
COOKBOOK = Path(__file__).resolve().parents[1] / "cookbook"
pytestmark = pytest.mark.usefixtures("no_proxies")
FIXTURES = (demo, no_proxies, server)  # shared fixtures (tests/loopback.py)


@pytest.fixture(scope="module")
def tools(demo: DemoSetup) -> list[BaseTool]:
    return langchain_tools(demo.tools)


def chat(server: OpenAIChatServer) -> ChatOpenAI:
    return ChatOpenAI(model="test-model", base_url=server.base_url, api_key="test", max_retries=0)


def selection(demo: DemoSetup, query: str, history: list[str], k: int = K) -> list[str]:
    sel = select(demo.retriever.rank(query, tuple(history)), SelectionPolicy(k=k, threshold=0.0))
    return [n for n in demo.tools.names if n in sel.names]


def check_append(demo: DemoSetup, bodies: list[dict[str, Any]], cap: int) -> None:
    """Each step's selection is bound, without duplicates, within the cap."""
    arrays = [tool_names(b) for b in bodies]
    for body, array in zip(bodies, arrays, strict=True):
        query, history = history_of(body)
        assert set(selection(demo, query, history)) <= set(array)  # the step's tools are there
        assert len(array) == len(set(array)) <= max(cap, K)


@pytest.mark.parametrize("index", [0, 1])
def test_graph_tools_arrays_only_grow_within_a_turn(
    demo: DemoSetup, tools: list[BaseTool], server: OpenAIChatServer, index: int
) -> None:
    request = demo.test[index]
    graph = create_dtdr_agent(chat(server), tools, demo.retriever, k=K, cache="append").compile()
    state = graph.invoke({"messages": [("user", request.query)]})
    assert state["messages"][-1].content.startswith("Done:")
    arrays = [tool_names(b) for b in server.requests]
    assert len(arrays) == len(request.calls) + 1
    for prev, cur in itertools.pairwise(arrays):
        assert cur[: len(prev)] == prev  # provider prompt caches keep their prefix
    check_append(demo, server.requests, 3 * K)
    report = run_report(state["tool_selections"])
    assert report.prefix_reuse == 1.0
    assert report.per_call_tokens == tuple(
        r["tokens"]["bound_tools"] for r in state["tool_selections"]
    )
    assert all(r["cache"]["mode"] == "append" for r in state["tool_selections"])


def test_hard_binding_breaks_the_prefix_where_append_keeps_it(
    demo: DemoSetup, tools: list[BaseTool], server: OpenAIChatServer
) -> None:
    request = demo.test[0]  # three address look-ups, a Zoom meeting, then an invite
    hard = create_dtdr_agent(chat(server), tools, demo.retriever, k=K).compile()
    state = hard.invoke({"messages": [("user", request.query)]})
    report = run_report(state["tool_selections"])
    assert report.prefix_reuse is not None and report.prefix_reuse < 1.0


def test_the_cap_bounds_the_growth(
    demo: DemoSetup, tools: list[BaseTool], server: OpenAIChatServer
) -> None:
    request = demo.test[0]
    binding = BindingPolicy(cache="append", cache_cap=1)  # restart whenever a tool is added
    graph = create_dtdr_agent(chat(server), tools, demo.retriever, k=K, binding=binding)
    state = graph.compile().invoke({"messages": [("user", request.query)]})
    arrays = [tool_names(b) for b in server.requests]
    records = state["tool_selections"]
    kept = [r["cache"]["prefix_kept"] for r in records]
    assert kept[0] is None and False in kept  # the cap forced at least one restart
    for array, record, prev in zip(arrays, records, [None, *arrays], strict=False):
        assert len(array) <= K
        if record["cache"]["prefix_kept"] is False:  # restarted from this step's selection
            assert array == record["selected"] or set(array) == set(record["selected"])
            assert prev is not None and array[: len(prev)] != prev


def test_middleware_appends(
    demo: DemoSetup, tools: list[BaseTool], server: OpenAIChatServer
) -> None:
    request = demo.test[1]
    middleware = DTDRMiddleware(demo.retriever, k=K, cache="append")
    state = create_agent(chat(server), tools, middleware=[middleware]).invoke(
        {"messages": [("user", request.query)]}
    )
    assert state["messages"][-1].content.startswith("Done:")
    arrays = [tool_names(b) for b in server.requests]
    for prev, cur in itertools.pairwise(arrays):
        assert cur[: len(prev)] == prev
    assert run_report(state["tool_selections"]).prefix_reuse == 1.0


async def test_llama_index_agent_appends(demo: DemoSetup, server: OpenAIChatServer) -> None:
    pytest.importorskip("llama_index.llms.openai_like")
    from llama_index.llms.openai_like import OpenAILike

    from llama_index_dtdr import DTDRFunctionAgent
    from llama_index_dtdr.testing import llama_tools

    request = demo.test[0]
    llm = OpenAILike(
        model="test-model",
        api_base=server.base_url,
        api_key="test",
        is_chat_model=True,
        is_function_calling_model=True,
        max_retries=0,
    )
    agent = DTDRFunctionAgent.from_tools(
        llama_tools(demo.tools), demo.retriever, k=K, cache="append", llm=llm
    )
    result = await agent.run(user_msg=request.query)
    assert [c.tool_name for c in result.tool_calls] == list(request.calls)
    arrays = [tool_names(b) for b in server.requests]
    assert len(arrays) == len(request.calls) + 1
    for prev, cur in itertools.pairwise(arrays):
        assert cur[: len(prev)] == prev


def test_replay_compares_hard_and_append(demo: DemoSetup) -> None:
    """The offline replay (scripted plan-following model) behind the docs table."""
    policy = SelectionPolicy(k=K, threshold=0.0)
    hard = replay_plans(StepSelector(demo.tools, demo.retriever, policy=policy), demo.test[:10])
    append = replay_plans(
        StepSelector(
            demo.tools, demo.retriever, policy=policy, binding=BindingPolicy(cache="append")
        ),
        demo.test[:10],
    )
    assert hard.runs == append.runs == 10
    assert hard.model_calls == append.model_calls == sum(len(d.calls) + 1 for d in demo.test[:10])
    assert append.prefix_reuse == 1.0 and append.prefix_breaks == 0
    assert hard.prefix_reuse is not None and hard.prefix_reuse < 1.0
    assert append.bound_tokens_per_call > hard.bound_tokens_per_call  # the price of the prefix
    assert append.recall is not None and hard.recall is not None
    assert append.recall >= hard.recall  # earlier tools stay bound


@pytest.mark.slow
@pytest.mark.datasets
def test_cookbook_table_on_taskbench(
    shared_datasets: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = shared_datasets / "taskbench_hf_subset"
    if not path.is_dir():
        pytest.skip(f"{path} not found")
    spec = importlib.util.spec_from_file_location(
        "cookbook_cache_append", COOKBOOK / "cache_append.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.main(["--path", str(path), "--encoder", "tfidf", "--limit", "30", "--caps", "10"])
    assert [r["binding"] for r in rows] == ["hard", "append cap=10"]
    hard, append = rows
    assert append["prefix_reuse"] > hard["prefix_reuse"]
    assert append["bound_tokens_per_call"] > hard["bound_tokens_per_call"]
    assert "scripted plan-following model (no LLM)" in capsys.readouterr().out
