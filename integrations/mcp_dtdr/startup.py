"""The MCP proxy's cold start, as a client sees it (``dtdr-agents speed --startup --mcp``).

Each run starts ``python -m mcp_dtdr --model M`` over stdio in front of the smallest real MCP
upstream (`loadbench_world.echo_upstream`: the SDK's low-level server, listing the model's
own catalogue and echoing every call, importing nothing else), and times, from the moment
the client starts the process, the answer to ``initialize`` and the answer to the first
``set_task``: what an agent waits for before its first ranked tool list. The proxy starts the
upstream itself, so its start (an interpreter and the MCP SDK) is part of both figures, as it
is for a user.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from dtdr_agents.foundation.persistence import read_model
from mcp_dtdr.loadbench_world import echo_upstream

TIMEOUT_S = 120.0
"""Longest a run may take before it counts as a failure."""


def _catalogue(model_dir: Path) -> list[dict[str, Any]]:
    """The saved model's tools (as `read_model` reads them): the upstream serves these."""
    return [
        {
            "name": t["name"],
            "description": t.get("description", ""),
            "parameters": t.get("parameters") or {"type": "object", "properties": {}},
        }
        for t in read_model(model_dir).manifest["tools"]
    ]


async def _one(model_dir: Path, tools_file: Path, query: str) -> tuple[float, float]:
    """(seconds to ``initialize`` answered, to the first ``set_task`` answered) of one start."""
    upstream = echo_upstream(tools_file)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_dtdr", "--model", str(model_dir), "--", *upstream],
        env=dict(os.environ),
    )
    log = tools_file.with_name("proxy.log")
    with log.open("w", encoding="utf-8") as errlog:
        t0 = time.perf_counter()
        try:
            with anyio.fail_after(TIMEOUT_S):
                async with (
                    stdio_client(params, errlog=errlog) as streams,
                    ClientSession(*streams) as session,
                ):
                    await session.initialize()
                    t1 = time.perf_counter()
                    result = await session.call_tool("set_task", {"request": query})
                    t2 = time.perf_counter()
        except Exception as exc:
            errlog.flush()
            raise RuntimeError(
                f"the MCP proxy on {model_dir} failed ({type(exc).__name__}: {exc}); its "
                f"standard error ends: {log.read_text(encoding='utf-8')[-1500:]}"
            ) from exc
    if result.is_error:
        raise RuntimeError(f"the MCP proxy's set_task failed: {result.content}")
    return t1 - t0, t2 - t0


def time_proxy(model_dir: Path, query: str, repeats: int) -> dict[str, Any]:
    """Start the proxy on `model_dir` `repeats` times (after one untimed start) and time it.

    Returns:
        ``{"initialize_s": [...], "initialize_p50_s", "set_task_s": [...],
        "set_task_p50_s", "transport": "stdio"}``.
    """
    with tempfile.TemporaryDirectory(prefix="dtdr-mcp-startup-") as tmp:
        tools_file = Path(tmp) / "tools.json"
        tools_file.write_text(json.dumps(_catalogue(model_dir)), encoding="utf-8")

        async def runs() -> list[tuple[float, float]]:
            await _one(model_dir, tools_file, query)  # untimed: warms the file cache
            return [await _one(model_dir, tools_file, query) for _ in range(repeats)]

        times = anyio.run(runs)
    initialize = [a for a, _ in times]
    set_task = [b for _, b in times]
    return {
        "transport": "stdio",
        "initialize_s": initialize,
        "initialize_p50_s": float(np.percentile(initialize, 50)),
        "set_task_s": set_task,
        "set_task_p50_s": float(np.percentile(set_task, 50)),
    }


__all__ = ["time_proxy"]
