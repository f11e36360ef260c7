"""Out of distribution, no stack exposes more than `SelectionPolicy.fallback_k` tools (issue 22)."""

from __future__ import annotations

import pytest

from dtdr_agents import DTDRC, Tool
from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.selection import SelectionPolicy
from dtdr_agents.foundation.types import Toolset
from dtdr_agents.runtime import BindingPolicy, StepSelector

OOD = "What is the molar mass of sulfuric acid and how does it react with sodium hydroxide?"
N_TOOLS = 10_000


@pytest.fixture(scope="module")
def big():
    """A real DTDR-C (TF-IDF) fitted on demo plans over a 10,000-tool catalogue."""
    data = make_demo_dataset(n=200, seed=5)
    extra = [
        Tool(f"service_{i:05d}", f"Operation {i} of an internal service: record {i % 97}")
        for i in range(N_TOOLS - len(data.tools))
    ]
    tools = Toolset([*data.tools, *extra])
    retriever = DTDRC(encoder="tfidf").fit(list(data.demos), tools)
    assert retriever.rank(OOD).fallback
    return tools, retriever


@pytest.mark.parametrize("cache", ["off", "append", "set"])
def test_the_runtime_binds_at_most_fallback_k(big, cache):
    tools, retriever = big
    selector = StepSelector(
        tools, retriever, policy=SelectionPolicy(k=5), binding=BindingPolicy(cache=cache)
    )
    step = selector.select(OOD)
    assert step.selection.fallback
    assert 0 < len(step.bound) <= 32
    assert len(step.selection.names) == 32


def test_a_provider_cap_holds_out_of_distribution(big):
    tools, retriever = big
    selector = StepSelector(tools, retriever, policy=SelectionPolicy(k=5, max_tools=8))
    assert len(selector.select(OOD).bound) == 8


def test_the_mcp_proxy_lists_at_most_fallback_k(big):
    pytest.importorskip("mcp")
    from mcp import types

    from mcp_dtdr.proxy import ProxySession

    tools, retriever = big
    selector = StepSelector(tools, retriever, policy=SelectionPolicy(k=5, threshold=0.0))
    upstream = {
        t.name: types.Tool(name=t.name, description=t.description, inputSchema={"type": "object"})
        for t in tools
    }
    session = ProxySession(selector, upstream, search_k=5)
    session.set_task(OOD)
    assert session.step is not None and session.step.selection.fallback
    exposed = session.exposed()
    assert 0 < len(exposed) <= 32
    assert len(session.list_tools()) <= 32 + 2  # plus the proxy's own set_task, search_tools


def test_the_langchain_middleware_binds_at_most_fallback_k(big):
    pytest.importorskip("langchain")
    from langchain_core.tools import StructuredTool
    from pydantic import BaseModel

    from langchain_dtdr.selector import ToolSelector

    class Args(BaseModel):
        text: str = ""

    def run(text: str = "") -> str:
        return text

    tools, retriever = big
    lc_tools = [
        StructuredTool(name=t.name, description=t.description, args_schema=Args, func=run)
        for t in tools
    ]
    selector = ToolSelector(lc_tools, retriever, policy=SelectionPolicy(k=5))
    step = selector.select(OOD)
    assert step.selection.fallback and 0 < len(step.bound) <= 32
