"""The MCP proxy end to end: the SDK's own client talks over stdio to `python -m mcp_dtdr`,
which starts a real upstream MCP server (tests/mcp_upstream_server.py) over stdio.

The retriever is DTDR-C fitted on the demo data with the TF-IDF encoder (no model download),
saved, and loaded by the proxy process. Expected exposures are computed independently from the
same saved model with the core `rank` + `select`. Every test is bounded in time.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio
import mcp_common
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp_common import Client, K, expected

from dtdr_agents.foundation.types import Demonstration
from dtdr_agents.retrievers.base import ToolRetriever

pytestmark = pytest.mark.slow  # each test starts two Python processes (~5-10 s)

model = mcp_common.model  # the module-scoped fixtures
core = mcp_common.core

UPSTREAM = Path(__file__).with_name("mcp_upstream_server.py")
META = ["set_task", "search_tools"]
BOUND = 90  # seconds: start-up of two Python processes included, under load


@asynccontextmanager
async def proxy(
    model: tuple[Path, Path, list[Demonstration]],
    *upstream_flags: str,
    timeout: float = 20.0,
    extra: Sequence[str] = (),
    zero_shot: bool = False,
) -> AsyncIterator[Client]:
    model_dir, tools_file, _ = model
    argv = [
        "-m",
        "mcp_dtdr",
        *([] if zero_shot else ["--model", str(model_dir)]),
        "-k",
        str(K),
        "--timeout",
        str(timeout),
        *extra,
        "--",
        sys.executable,
        str(UPSTREAM),
        "--tools",
        str(tools_file),
        *upstream_flags,
    ]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PYTHONPATH")}
    env.update({"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    notes: list[str] = []

    async def on_message(message: Any) -> None:
        method = getattr(message, "method", None) or getattr(
            getattr(message, "root", None), "method", None
        )
        notes.append(str(method))

    params = StdioServerParameters(command=sys.executable, args=argv, env=env)
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, message_handler=on_message, read_timeout_seconds=BOUND) as s,
    ):
        await s.initialize()
        yield Client(s, notes)


async def test_a_session_sees_the_tools_of_its_next_step(
    model: tuple[Path, Path, list[Demonstration]], core: ToolRetriever
) -> None:
    request = model[2][0]
    with anyio.fail_after(BOUND):
        async with proxy(model) as client:
            assert await client.names() == META  # nothing retrieved before the task is set
            done = await client.call("set_task", {"request": request.query})
            first = expected(core, request.query, ())
            assert all(n in done.content[0].text for n in first)  # type: ignore[union-attr]
            assert await client.names() == META + first
            assert "notifications/tools/list_changed" in client.notes
            history: list[str] = []
            for _ in range(len(request.calls)):
                offered = (await client.names())[2:]
                assert offered == expected(core, request.query, history)
                if not offered:  # the retriever expects the plan to be complete
                    break
                planned = request.calls[len(history)]
                name = planned if planned in offered else offered[0]
                n_notes = client.notes.count("notifications/tools/list_changed")
                result = await client.call(name, {})
                assert not result.is_error
                assert json.loads(result.content[0].text)["tool"] == name  # type: ignore[union-attr]
                history.append(name)
                now = expected(core, request.query, history)
                assert (await client.names())[2:] == now
                changed = client.notes.count("notifications/tools/list_changed") > n_notes
                assert changed == (now != offered)
            assert history  # at least one upstream call went through the proxy


async def test_refusals_search_and_bad_input(
    model: tuple[Path, Path, list[Demonstration]], core: ToolRetriever
) -> None:
    request = model[2][0]
    with anyio.fail_after(BOUND):
        async with proxy(model, "--fail-on", "web_search") as client:
            with pytest.raises(MCPError, match="set_task needs a non-empty 'request'"):
                await client.call("set_task", {"request": "  "})
            await client.call("set_task", {"request": request.query})
            offered = (await client.names())[2:]
            hidden = next(n for n in core.tools_.names if n not in offered)
            with pytest.raises(MCPError, match=f"'{hidden}' is not offered at this step"):
                await client.call(hidden, {})
            with pytest.raises(MCPError, match="'teleport' is unknown"):
                await client.call("teleport", {})
            found = await client.call("search_tools", {"query": "search the web for news"})
            assert "web_search" in found.content[0].text  # type: ignore[union-attr]
            assert "web_search" in await client.names()
            failed = await client.call("web_search", {"query": "x"})  # upstream error passes
            assert failed.is_error
            assert failed.content[0].text == "upstream failure in web_search"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (("--duplicate",), "lists the tool name 'get_phone_number' twice"),
        (("--hang-start",), "did not complete the MCP handshake within 3 s"),
    ],
)
async def test_a_broken_upstream_is_reported(
    model: tuple[Path, Path, list[Demonstration]], flags: tuple[str, ...], match: str
) -> None:
    with anyio.fail_after(BOUND):
        async with proxy(model, *flags, timeout=3) as client:
            with pytest.raises(MCPError, match=match):
                await client.names()
            with pytest.raises(MCPError, match=match):
                await client.call("set_task", {"request": "anything"})


async def test_a_slow_or_dying_upstream_is_reported(
    model: tuple[Path, Path, list[Demonstration]],
) -> None:
    with anyio.fail_after(BOUND):
        async with proxy(
            model,
            "--slow-on",
            "web_search",
            "--die-on",
            "get_weather",
            timeout=3,
            extra=["--always-include", "web_search,get_weather"],
        ) as client:
            assert await client.names() == [*META, "web_search", "get_weather"]
            with pytest.raises(MCPError, match="did not answer tools/call 'web_search' within 3 s"):
                await client.call("web_search", {"query": "x"})
            with pytest.raises(MCPError, match=r"closed the connection|is gone"):
                await client.call("get_weather", {"city": "Oslo"})
            with pytest.raises(MCPError, match=r"closed the connection|is gone"):
                await client.names()  # the proxy stays up and keeps saying why


async def test_a_2026_client_gets_changes_on_its_listen_stream(
    model: tuple[Path, Path, list[Demonstration]], core: ToolRetriever
) -> None:
    """`mcp.Client` negotiates the 2026-07-28 protocol; list changes travel on listen streams."""
    from mcp import Client

    model_dir, tools_file, tests = model
    request = tests[0]
    argv = ["-m", "mcp_dtdr", "--model", str(model_dir), "-k", str(K), "--"]
    argv += [sys.executable, str(UPSTREAM), "--tools", str(tools_file)]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PYTHONPATH")}
    params = StdioServerParameters(command=sys.executable, args=argv, env=env)
    with anyio.fail_after(BOUND):
        async with Client(params, read_timeout_seconds=BOUND) as client:
            assert client.protocol_version == "2026-07-28"
            async with client.listen(tools_list_changed=True) as sub:
                await client.call_tool("set_task", {"request": request.query})
                event = await sub.__aiter__().__anext__()
                assert type(event).__name__ == "ToolsListChanged"
            names = [t.name for t in (await client.list_tools()).tools]
            assert names == [*META, *expected(core, request.query, ())]


async def test_without_a_model_a_zero_shot_retriever_ranks_the_upstream_tools(
    model: tuple[Path, Path, list[Demonstration]], core: ToolRetriever
) -> None:
    request = model[2][0]
    with anyio.fail_after(2 * BOUND):  # the proxy loads the sentence encoder
        async with proxy(model, zero_shot=True, timeout=60) as client:
            await client.call("set_task", {"request": request.query})
            offered = (await client.names())[2:]
            assert 0 < len(offered) <= K
            assert set(offered) <= set(core.tools_.names)
            result = await client.call(offered[0], {})
            assert json.loads(result.content[0].text)["tool"] == offered[0]  # type: ignore[union-attr]
