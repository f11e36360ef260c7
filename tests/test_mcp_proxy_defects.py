"""MCP proxy defects of issue 20: concurrent ``tools/list`` during ``set_task``, and upstream
``notifications/tools/list_changed`` (a dropped tool must stop being listed and callable).

The proxy (`serve_proxy`) runs in this process on in-memory streams; the upstream is the real
MCP server of tests/mcp_upstream_server.py, started by the proxy over stdio. The client is the
SDK's `ClientSession`, which sends requests without waiting for earlier answers, and the SDK's
server runs them concurrently.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.memory import create_client_server_memory_streams

from dtdr_agents.foundation.types import Demonstration
from dtdr_agents.retrievers import make_retriever
from dtdr_agents.retrievers.base import ToolRetriever
from mcp_dtdr.proxy import ProxyConfig, serve_proxy

UPSTREAM = Path(__file__).with_name("mcp_upstream_server.py")
BOUND = 60  # seconds: one Python process starts, under load
META = ["set_task", "search_tools"]
ROUNDS = 20  # of 48 concurrent requests, 4 of them set_task
TOOLS = [
    {"name": "get_weather", "description": "Weather forecast for a city."},
    {"name": "web_search", "description": "Search the web for pages and news."},
    {"name": "send_email", "description": "Send an email message to a contact."},
    {"name": "read_file", "description": "Read a text file from the disk."},
    {"name": "create_note", "description": "Create a note with a title and text."},
    {"name": "translate_text", "description": "Translate text into another language."},
]
DEMOS = [
    Demonstration("weather in Oslo then search the web", ("get_weather", "web_search")),
    Demonstration("email Bob the file", ("read_file", "send_email")),
    Demonstration("note the translated text", ("translate_text", "create_note")),
    Demonstration("search the web and note it", ("web_search", "create_note")),
]
SWAPPED = [  # send_email dropped, book_flight added (unknown to the fitted retriever)
    *(t for t in TOOLS if t["name"] != "send_email"),
    {"name": "book_flight", "description": "Book a flight ticket to an airport city."},
]


class Client:
    """A connected `ClientSession` plus the tools/list_changed notifications it received."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.changes = 0
        self.changed = anyio.Event()

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.changes += 1
            self.changed.set()

    async def names(self) -> list[str]:
        return [t.name for t in (await self.session.list_tools()).tools]


@asynccontextmanager
async def proxy(
    tmp_path: Path,
    *upstream_flags: str,
    k: int = 2,
    always: Sequence[str] = (),
    retriever: ToolRetriever | None = None,
) -> AsyncIterator[Client]:
    """A client of the proxy (in this process) over the real upstream server."""
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(TOOLS), encoding="utf-8")
    retriever = retriever or make_retriever("bm25").fit(DEMOS, TOOLS)
    argv = [sys.executable, str(UPSTREAM), "--tools", str(tools_file), *upstream_flags]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PYTHONPATH")}
    config = ProxyConfig(k=k, timeout=BOUND, always_include=tuple(always))
    client = Client(None)  # type: ignore[arg-type]  # the session is set below
    async with (
        create_client_server_memory_streams() as (streams, server),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(partial(serve_proxy, retriever, argv, *server, config, env=env))
        async with ClientSession(
            *streams, read_timeout_seconds=BOUND, message_handler=client.on_message
        ) as session:
            client.session = session
            await session.initialize()
            yield client
        tg.cancel_scope.cancel()


async def test_tools_list_during_set_task_is_always_complete(tmp_path: Path) -> None:
    """Every tools/list answer is the state before or after a set_task, never half of it."""
    tasks = ["weather in Oslo", "email Bob the file", "note the translated text"]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads (set_task re-ranks in one) interleave finely
    try:
        await _concurrent_lists(tmp_path, tasks)
    finally:
        sys.setswitchinterval(interval)


async def _concurrent_lists(tmp_path: Path, tasks: list[str]) -> None:
    with anyio.fail_after(BOUND):
        async with proxy(tmp_path) as client:
            offered: dict[str, list[str]] = {}
            for task in tasks:  # one at a time: what each task offers
                await client.session.call_tool("set_task", {"request": task})
                offered[task] = await client.names()
                assert offered[task][:2] == META and len(offered[task]) > 2
            assert len({tuple(v) for v in offered.values()}) == len(tasks)

            lists: list[list[str]] = []

            async def list_tools(task: str) -> None:
                lists.append(await client.names())

            async def set_task(task: str) -> None:
                await client.session.call_tool("set_task", {"request": task})

            for _ in range(ROUNDS):
                async with anyio.create_task_group() as tg:  # all requests in flight at once
                    for i, task in enumerate(tasks * 4):
                        tg.start_soon(set_task if i % 3 == 0 else list_tools, task)
                        for _ in range(3):
                            tg.start_soon(list_tools, task)
            complete = [tuple(v) for v in offered.values()]
            partial_lists = [names for names in lists if tuple(names) not in complete]
            assert len(lists) == ROUNDS * (48 - 4)
            assert partial_lists == []


async def test_an_upstream_tools_list_change_is_followed(tmp_path: Path) -> None:
    """A tool the upstream drops is no longer listed or callable; a tool it adds is ranked."""
    swapped = tmp_path / "swapped.json"
    swapped.write_text(json.dumps(SWAPPED), encoding="utf-8")
    trigger = tmp_path / "swap-now"
    flags = ("--swap-tools", str(swapped), "--swap-when", str(trigger))
    # the hybrid ranks tools added after fit by their description's similarity to the query
    retriever = make_retriever("hybrid", encoder="tfidf").fit(DEMOS, TOOLS)
    always = ["send_email", "get_weather"]  # an always-included tool is dropped too
    with anyio.fail_after(BOUND):
        async with proxy(tmp_path, *flags, k=2, always=always, retriever=retriever) as c:
            await c.session.call_tool("set_task", {"request": "email Bob the file"})
            before = await c.names()
            assert "send_email" in before
            sent = await c.session.call_tool("send_email", {"to": "bob"})
            assert not sent.is_error
            c.changed = anyio.Event()
            changes = c.changes

            trigger.touch()  # the upstream drops send_email, adds book_flight, notifies
            with anyio.move_on_after(15):
                await c.changed.wait()
            assert c.changes > changes, "the proxy did not forward the upstream's change"
            after = await c.names()
            assert "send_email" not in after
            assert after[:2] == META and "get_weather" in after
            with pytest.raises(MCPError, match="'send_email' is unknown"):
                await c.session.call_tool("send_email", {"to": "bob"})

            query = {"query": "book a flight ticket to an airport city"}
            found = await c.session.call_tool("search_tools", query)
            part = found.content[0]
            assert isinstance(part, types.TextContent)
            assert "book_flight" in part.text  # ranked by the prior for tools added after fit
            assert "book_flight" in await c.names()
            booked = await c.session.call_tool("book_flight", {"to": "Oslo"})
            assert not booked.is_error
            part = booked.content[0]
            assert isinstance(part, types.TextContent)
            assert json.loads(part.text) == {"tool": "book_flight", "args": {"to": "Oslo"}}


async def test_an_invalid_new_upstream_list_is_reported(tmp_path: Path) -> None:
    """After the change the upstream lists a name twice: every request says so."""
    swapped = tmp_path / "swapped.json"
    swapped.write_text(json.dumps([*TOOLS, TOOLS[0]]), encoding="utf-8")
    trigger = tmp_path / "swap-now"
    flags = ("--swap-tools", str(swapped), "--swap-when", str(trigger))
    with anyio.fail_after(BOUND):
        async with proxy(tmp_path, *flags) as c:
            await c.session.call_tool("set_task", {"request": "weather in Oslo"})
            assert len(await c.names()) > 2
            c.changed = anyio.Event()
            trigger.touch()
            with anyio.move_on_after(15):
                await c.changed.wait()
            assert c.changed.is_set()
            twice = "lists the tool name 'get_weather' twice"
            with pytest.raises(MCPError, match=twice):
                await c.names()
            with pytest.raises(MCPError, match=twice):
                await c.session.call_tool("set_task", {"request": "weather in Rome"})


def test_an_upstream_output_schema_becomes_the_tools_outputs():
    """The proxy ranks upstream tools as core tools whose outputs feed the tool graph."""
    from mcp_dtdr.session import _core_tool

    tool = _core_tool(
        types.Tool(
            name="search",
            description="Search the docs",
            input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
            output_schema={"type": "object", "properties": {"doc_id": {"type": "string"}}},
        )
    )
    assert tool.outputs == ("doc_id",)
    assert tool.parameters["properties"] == {"q": {"type": "string"}}
    assert "outputs" not in tool.to_openai()["function"]
