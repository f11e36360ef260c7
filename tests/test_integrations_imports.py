"""Public names of the integration packages, and a framework-free core runtime."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

PACKAGES = [
    "langchain_dtdr",
    "langgraph_dtdr",
    "llama_index_dtdr",
    "mcp_dtdr",
    "pydantic_ai_dtdr",
    "openai_agents_dtdr",
]


def test_pinned_public_names() -> None:
    import llama_index_dtdr
    import mcp_dtdr

    assert sorted(llama_index_dtdr.__all__) == [
        "BindingPolicy",
        "DTDRFunctionAgent",
        "DTDRObjectRetriever",
        "RECORDS_KEY",
        "SelectionPolicy",
        "StepRecord",
        "core_tool",
        "run_report",
    ]
    assert sorted(mcp_dtdr.__all__) == [
        "ProxyConfig",
        "ProxySession",
        "SEARCH_TOOLS",
        "SET_TASK",
        "Upstream",
        "UpstreamError",
        "build_server",
        "run_proxy",
        "serve_proxy",
    ]
    import openai_agents_dtdr
    import pydantic_ai_dtdr

    assert sorted(pydantic_ai_dtdr.__all__) == [
        "DTDRPrepareTools",
        "DTDRSearchStrategy",
        "SelectionPolicy",
        "StepRecord",
        "core_tool",
        "current_turn",
        "prepare_tools",
        "run_report",
        "search_strategy",
    ]
    assert sorted(openai_agents_dtdr.__all__) == [
        "DTDRAgentHooks",
        "DTDRRunContext",
        "DTDRToolSelection",
        "SelectionPolicy",
        "StepRecord",
        "core_tool",
        "current_turn",
        "run_report",
    ]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_resolves(name: str) -> None:
    module = importlib.import_module(name)
    for attr in module.__all__:
        assert getattr(module, attr) is not None, f"{name}.{attr}"


def test_the_runtime_and_the_mcp_command_import_no_framework() -> None:
    code = (
        "import sys, dtdr_agents.runtime, dtdr_agents.runtime.replay, dtdr_agents.cli.mcp\n"
        "import dtdr_agents.runtime.tool_search\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langchain', 'langchain_core', 'langgraph', 'llama_index', 'mcp', 'mcp_dtdr', "
        "'pydantic_ai', 'agents', 'openai', 'anthropic'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
