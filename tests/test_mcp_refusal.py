"""A model that fails to rank is refused by the MCP proxy, and the client is told why once.

Issue 41 (item 3): a corrupt model made the proxy log a traceback at every ``set_task`` and keep
serving a model that answers nothing. The proxy (`serve_proxy`) runs in this process on
in-memory streams in front of the real upstream of tests/mcp_upstream_server.py; the model is
a saved DTDR-C whose Markov counts are made NaN after it was loaded (its rank raises our typed
error), or a retriever whose rank raises an error that is not ours (a bug).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest

pytest.importorskip("mcp")

import anyio
import numpy as np
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.memory import create_client_server_memory_streams

from dtdr_agents.foundation.types import Demonstration
from dtdr_agents.retrievers import load_retriever, make_retriever
from dtdr_agents.retrievers.base import ToolRetriever
from mcp_dtdr.proxy import ProxyConfig, serve_proxy

UPSTREAM = Path(__file__).with_name("mcp_upstream_server.py")
BOUND = 60  # seconds: the upstream (one Python process) starts under load
TOOLS = [
    {"name": "get_weather", "description": "Weather forecast for a city."},
    {"name": "web_search", "description": "Search the web for pages and news."},
    {"name": "send_email", "description": "Send an email message to a contact."},
]
DEMOS = [
    Demonstration("weather in Oslo then search the web", ("get_weather", "web_search")),
    Demonstration("email Bob the weather", ("get_weather", "send_email")),
]
REFUSED = r"the model .*model failed to rank and is refused: "
SHORT = r"the model .*model is refused \(it failed to rank; the reason was given once"


def corrupt(model: ToolRetriever) -> None:
    """Make every Markov count of a DTDR-C NaN (in memory, after load)."""
    frozen = model.tables_._frozen  # type: ignore[attr-defined]
    for _, counts in frozen.values():
        counts[:] = np.nan


@pytest.fixture
def dtdrc(tmp_path: Path) -> tuple[ToolRetriever, Path]:
    """A DTDR-C saved and loaded again, and its folder."""
    folder = tmp_path / "model"
    make_retriever("dtdr-c", encoder="tfidf").fit(DEMOS, TOOLS).save(folder)
    return load_retriever(folder), folder


@asynccontextmanager
async def proxy(
    tmp_path: Path, retriever: ToolRetriever, name: str, *flags: str
) -> AsyncIterator[ClientSession]:
    """A client of the proxy (in this process) over the real upstream server."""
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(TOOLS), encoding="utf-8")
    argv = [sys.executable, str(UPSTREAM), "--tools", str(tools_file), *flags]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PYTHONPATH")}
    config = ProxyConfig(k=2, timeout=BOUND)
    serve = partial(serve_proxy, retriever, argv, config=config, env=env, model_name=name)
    async with (
        create_client_server_memory_streams() as (streams, server),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(partial(serve, *server))
        async with ClientSession(*streams, read_timeout_seconds=BOUND) as session:
            await session.initialize()
            yield session
        tg.cancel_scope.cancel()


def tracebacks(caplog: pytest.LogCaptureFixture, err: str) -> int:
    """Tracebacks logged (by the SDK) or written to stderr (by the proxy)."""
    logged = sum(1 for r in caplog.records if r.exc_info)
    return logged + err.count("Traceback (most recent call last)")


async def test_a_model_that_fails_to_rank_is_refused_and_told_once(
    tmp_path: Path,
    dtdrc: tuple[ToolRetriever, Path],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    model, folder = dtdrc
    corrupt(model)
    caplog.set_level(logging.WARNING)
    with anyio.fail_after(BOUND):
        async with proxy(tmp_path, model, str(folder)) as client:
            assert [t.name for t in (await client.list_tools()).tools] == [
                "set_task",
                "search_tools",
            ]
            with pytest.raises(MCPError, match=REFUSED + r"\w+Error: .*not finite") as first:
                await client.call_tool("set_task", {"request": "weather in Oslo"})
            assert str(folder) in first.value.error.message
            for _ in range(3):  # from now on: short errors, no ranking, no traceback
                with pytest.raises(MCPError, match=SHORT):
                    await client.list_tools()
                with pytest.raises(MCPError, match=SHORT):
                    await client.call_tool("set_task", {"request": "weather in Oslo"})
                with pytest.raises(MCPError, match=SHORT):
                    await client.call_tool("get_weather", {"city": "Oslo"})
    err = capfd.readouterr().err
    assert err.count("failed to rank and is refused") == 1, err
    assert tracebacks(caplog, err) == 0, err


async def test_a_ranking_that_fails_after_a_call_returns_the_calls_answer(
    tmp_path: Path, dtdrc: tuple[ToolRetriever, Path]
) -> None:
    """The forwarded call went through: its answer is returned, the next request says why."""
    model, folder = dtdrc
    with anyio.fail_after(BOUND):
        async with proxy(tmp_path, model, str(folder)) as client:
            await client.call_tool("set_task", {"request": "weather in Oslo then search"})
            offered = [t.name for t in (await client.list_tools()).tools][2:]
            assert offered
            corrupt(model)
            answer = await client.call_tool(offered[0], {"city": "Oslo"})
            assert not answer.is_error
            assert json.loads(answer.content[0].text)["tool"] == offered[0]  # type: ignore[union-attr]
            with pytest.raises(MCPError, match=REFUSED + r"\w+Error: .*not finite"):
                await client.list_tools()
            with pytest.raises(MCPError, match=SHORT):
                await client.list_tools()


async def test_an_error_that_is_not_ours_is_shown_once_with_its_traceback(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A retriever bug (not a typed error) refuses the model too; its traceback shows once."""
    model = make_retriever("bm25").fit(DEMOS, TOOLS)

    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("a bug in rank")

    object.__setattr__(model, "rank", broken)
    with anyio.fail_after(BOUND):
        async with proxy(tmp_path, model, "bug-model") as client:
            with pytest.raises(MCPError, match=r"bug-model failed to rank .*ZeroDivisionError"):
                await client.call_tool("set_task", {"request": "weather in Oslo"})
            for _ in range(3):
                with pytest.raises(MCPError, match=r"bug-model is refused"):
                    await client.call_tool("search_tools", {"query": "weather"})
    err = capfd.readouterr().err
    assert tracebacks(caplog, err) == 1, err


async def test_a_ranking_that_fails_after_an_upstream_change_refuses_the_model(
    tmp_path: Path, dtdrc: tuple[ToolRetriever, Path]
) -> None:
    """Re-ranking after the upstream's tools changed fails: the model is refused, not the
    upstream (whose new list is fine)."""
    model, folder = dtdrc
    swapped = tmp_path / "swapped.json"
    swapped.write_text(json.dumps(TOOLS[:2]), encoding="utf-8")
    flag = tmp_path / "swap-now"
    swap = ("--swap-tools", str(swapped), "--swap-when", str(flag))
    with anyio.fail_after(BOUND):
        async with proxy(tmp_path, model, str(folder), *swap) as client:
            await client.call_tool("set_task", {"request": "weather in Oslo then search"})
            corrupt(model)
            flag.write_text("now", encoding="utf-8")
            message = ""
            while not message:  # the proxy follows the change in the background
                try:
                    await client.list_tools()
                except MCPError as exc:
                    message = exc.error.message
                await anyio.sleep(0.05)
            assert re.search(REFUSED + r"\w+Error: .*not finite", message), message
