"""Upstream tools named like the MCP proxy's own tools: renamed, listed, callable, warned about.

The proxy (`serve_proxy`) runs in this process on in-memory streams, so its warning can be
caught; the upstream is the real MCP server of tests/mcp_upstream_server.py, started by the
proxy over stdio. The client is the SDK's `ClientSession`.
"""

from __future__ import annotations

import json
import os
import re
import sys
import warnings
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.shared.memory import create_client_server_memory_streams

from dtdr_agents.foundation.types import Demonstration
from dtdr_agents.retrievers import make_retriever
from mcp_dtdr.proxy import NameClashWarning, ProxyConfig, listed_names, serve_proxy

UPSTREAM = Path(__file__).with_name("mcp_upstream_server.py")
BOUND = 60  # seconds: one Python process starts, under load
TOOLS = [
    {"name": "set_task", "description": "Set a task in the team's task tracker."},
    {"name": "search_tools", "description": "Search the hardware store for tools."},
    {"name": "upstream_set_task", "description": "Set a task in the upstream tracker."},
    {"name": "get_weather", "description": "Weather forecast for a city."},
]
OWN = ["set_task", "search_tools"]
RENAMED = {"set_task": "upstream_set_task_2", "search_tools": "upstream_search_tools"}


@asynccontextmanager
async def proxy(
    tmp_path: Path, *, always: Sequence[str] = ()
) -> AsyncIterator[tuple[ClientSession, list[str]]]:
    """A client session with the proxy (in this process) over the real upstream server.

    Also yields the list of the proxy's `NameClashWarning` messages (filled as they come).
    """
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(TOOLS), encoding="utf-8")
    demos = [
        Demonstration("add a task to the team tracker", ("set_task",)),
        Demonstration("find a hammer at the hardware store", ("search_tools",)),
        Demonstration("weather in Oslo", ("get_weather",)),
    ]
    retriever = make_retriever("bm25").fit(demos, TOOLS)
    argv = [sys.executable, str(UPSTREAM), "--tools", str(tools_file)]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PYTHONPATH")}
    config = ProxyConfig(k=4, timeout=BOUND, always_include=tuple(always))
    clashes: list[str] = []

    def record(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if issubclass(category, NameClashWarning):
            clashes.append(str(message))

    with warnings.catch_warnings():
        warnings.simplefilter("always", NameClashWarning)
        warnings.showwarning = record  # restored by catch_warnings
        async with (
            create_client_server_memory_streams() as (client, server),
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(partial(serve_proxy, retriever, argv, *server, config, env=env))
            async with ClientSession(*client, read_timeout_seconds=BOUND) as session:
                await session.initialize()
                yield session, clashes
            tg.cancel_scope.cancel()


def text(result: types.CallToolResult) -> str:
    """The text of a one-part tool result."""
    part = result.content[0]
    assert isinstance(part, types.TextContent)
    return part.text


async def names(session: ClientSession) -> list[str]:
    return [t.name for t in (await session.list_tools()).tools]


def test_the_renaming_rule() -> None:
    with pytest.warns(NameClashWarning) as caught:
        listed = listed_names([t["name"] for t in TOOLS])
    assert listed == {**{t["name"]: t["name"] for t in TOOLS}, **RENAMED}
    assert [str(w.message) for w in caught] == [
        "dtdr-agents mcp-proxy: the upstream tool 'set_task' has the name of the proxy's own "
        "tool 'set_task'; it is listed to clients as 'upstream_set_task_2', and calls of "
        "'upstream_set_task_2' are forwarded to the upstream's 'set_task'",
        "dtdr-agents mcp-proxy: the upstream tool 'search_tools' has the name of the proxy's "
        "own tool 'search_tools'; it is listed to clients as 'upstream_search_tools', and "
        "calls of 'upstream_search_tools' are forwarded to the upstream's 'search_tools'",
    ]


async def test_clashing_upstream_tools_are_listed_renamed_and_both_stay_callable(
    tmp_path: Path,
) -> None:
    always = ["set_task", "upstream_search_tools"]  # an upstream name and a listed name
    with anyio.fail_after(BOUND):
        async with proxy(tmp_path, always=always) as (s, warned):
            listed = await s.list_tools()
            shown = [t.name for t in listed.tools]
            assert shown == [*OWN, "upstream_set_task_2", "upstream_search_tools"]
            described = {t.name: t.description for t in listed.tools}
            assert described["upstream_set_task_2"] == TOOLS[0]["description"]
            assert described["set_task"] != TOOLS[0]["description"]  # the proxy's own

            own = await s.call_tool("set_task", {"request": "add a task to the tracker"})
            assert text(own).startswith("Task set. Tools offered for the next step: ")
            assert "upstream_set_task_2" in text(own)
            offered = await names(s)
            assert offered[:2] == OWN and "upstream_set_task_2" in offered

            upstream = await s.call_tool("upstream_set_task_2", {"title": "buy milk"})
            assert not upstream.is_error
            sent = json.loads(text(upstream))  # what the upstream server received
            assert sent == {"tool": "set_task", "args": {"title": "buy milk"}}

            found = await s.call_tool("search_tools", {"query": "hardware store tools"})
            assert text(found).startswith("Found (now callable):")
            assert "- upstream_search_tools: Search the hardware store" in text(found)
            hammer = await s.call_tool("upstream_search_tools", {"query": "hammer"})
            assert json.loads(text(hammer)) == {"tool": "search_tools", "args": {"query": "hammer"}}
            plain = await s.call_tool("upstream_set_task", {})  # its own name: not renamed
            assert json.loads(text(plain))["tool"] == "upstream_set_task"
    assert len(warned) == 2  # one per renamed tool
    assert "upstream tool 'set_task'" in warned[0] and "'upstream_set_task_2'" in warned[0]
    assert "upstream tool 'search_tools'" in warned[1]
    assert "'upstream_search_tools'" in warned[1]


@pytest.mark.slow  # starts two Python processes
async def test_the_proxy_command_warns_on_stderr_and_forwards_the_renamed_tool(
    tmp_path: Path,
) -> None:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(TOOLS), encoding="utf-8")
    demos = [Demonstration("add a task to the team tracker", ("set_task",))]
    make_retriever("bm25").fit(demos, TOOLS).save(tmp_path / "model")
    argv = ["-m", "mcp_dtdr", "--model", str(tmp_path / "model"), "-k", "4"]
    argv += ["--always-include", "set_task", "--", sys.executable, str(UPSTREAM)]
    argv += ["--tools", str(tools_file)]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PYTHONPATH")}
    env.update({"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    params = StdioServerParameters(command=sys.executable, args=argv, env=env)
    log = tmp_path / "stderr.txt"
    with log.open("w", encoding="utf-8") as errlog, anyio.fail_after(2 * BOUND):
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, read_timeout_seconds=2 * BOUND) as s,
        ):
            await s.initialize()
            assert await names(s) == [*OWN, "upstream_set_task_2"]
            result = await s.call_tool("upstream_set_task_2", {"title": "x"})
            assert json.loads(text(result)) == {"tool": "set_task", "args": {"title": "x"}}
    stderr = log.read_text(encoding="utf-8")
    assert "dtdr-agents mcp-proxy: the upstream tool 'set_task'" in stderr  # the CLI's format
    assert "listed to clients as 'upstream_set_task_2'" in stderr


async def test_an_unknown_or_hidden_renamed_tool_is_refused_by_its_listed_name(
    tmp_path: Path,
) -> None:
    hidden = "'upstream_set_task_2' is not offered at this step; callable now: "
    with anyio.fail_after(BOUND):
        async with proxy(tmp_path) as (s, _):
            with pytest.raises(MCPError, match=re.escape(f"{hidden}{OWN}")):
                await s.call_tool("upstream_set_task_2", {})  # no task set: nothing offered
            await s.call_tool("set_task", {"request": "weather in Oslo"})
            with pytest.raises(MCPError, match="'upstream_set_task_3' is unknown"):
                await s.call_tool("upstream_set_task_3", {})
