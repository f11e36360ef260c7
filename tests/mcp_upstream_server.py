"""A real MCP server (official SDK, stdio) used as the upstream of the proxy in the tests.

    python tests/mcp_upstream_server.py --tools tools.json [--duplicate] [--fail-on NAME]
        [--slow-on NAME] [--die-on NAME] [--hang-start] [--swap-tools FILE --swap-when PATH]
        [--ignore-term] [--grandchild] [--pid-file PATH] [--log-calls PATH]

Every tool of ``tools.json`` (a JSON list of ``{"name", "description", "parameters"}``) answers
``{"tool": name, "args": {...}}``; ``--fail-on`` makes a tool return an error result,
``--slow-on`` makes it sleep 60 s, ``--die-on`` makes the process exit, ``--duplicate`` lists
the first tool twice and ``--hang-start`` never answers the handshake. With ``--swap-tools``,
once the file ``--swap-when`` exists, the server lists the tools of ``--swap-tools`` instead,
answers calls of the others with an error result, and sends ``notifications/tools/list_changed``
(to the client that listed its tools). ``--ignore-term`` ignores SIGTERM, ``--grandchild`` starts
a process of its own (which ignores SIGTERM too) that sleeps for an hour, and ``--pid-file``
writes the process ids (this server's, then the grandchild's), one a line, once they run; the
lifecycle tests read it to check that nothing the proxy started survives. ``--log-calls`` appends
the name of every tool called to a file, one a line. Standard library + mcp.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server

GRANDCHILD = "mcp_upstream_grandchild"
"""The last argument of the grandchild's command line (``--grandchild``), to recognise it."""


def read_tools(path: str) -> list[types.Tool]:
    """The tools of a tools file (a JSON list of ``{"name", "description", "parameters"}``)."""
    with open(path, encoding="utf-8") as fh:
        specs = json.load(fh)
    return [
        types.Tool(
            name=s["name"],
            description=s.get("description", ""),
            input_schema=s.get("parameters") or {"type": "object", "properties": {}},
        )
        for s in specs
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", required=True)
    parser.add_argument("--duplicate", action="store_true")
    parser.add_argument("--fail-on", default="")
    parser.add_argument("--slow-on", default="")
    parser.add_argument("--die-on", default="")
    parser.add_argument("--hang-start", action="store_true")
    parser.add_argument("--swap-tools", default="")
    parser.add_argument("--swap-when", default="")
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--grandchild", action="store_true")
    parser.add_argument("--pid-file", default="")
    parser.add_argument("--log-calls", default="")
    args = parser.parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pids = [os.getpid()]
    if args.grandchild:
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        code += "time.sleep(3600)"
        grandchild = subprocess.Popen(
            [sys.executable, "-c", code, GRANDCHILD],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        pids.append(grandchild.pid)
    if args.pid_file:
        with open(args.pid_file + ".tmp", "w", encoding="utf-8") as fh:
            fh.write("".join(f"{pid}\n" for pid in pids))
        os.replace(args.pid_file + ".tmp", args.pid_file)
    tools = read_tools(args.tools)
    if args.duplicate:
        tools.append(tools[0])
    if args.hang_start:
        time.sleep(3600)

    listers: list[Any] = []  # the sessions that listed the tools (to notify of a change)

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        if ctx.session not in listers:
            listers.append(ctx.session)
        return types.ListToolsResult(tools=tools)

    async def swap_when_asked() -> None:
        nonlocal tools
        while not os.path.exists(args.swap_when):
            await anyio.sleep(0.02)
        tools = read_tools(args.swap_tools)
        for session in listers:
            await session.send_tool_list_changed()

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        name = params.name
        if args.log_calls:
            with open(args.log_calls, "a", encoding="utf-8") as fh:
                fh.write(name + "\n")
        if args.swap_tools and name not in {t.name for t in tools}:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"no tool {name} upstream")],
                is_error=True,
            )
        if name == args.die_on:
            os._exit(3)
        if name == args.slow_on:
            await anyio.sleep(60)
        text = json.dumps({"tool": name, "args": params.arguments or {}}, sort_keys=True)
        if name == args.fail_on:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"upstream failure in {name}")],
                is_error=True,
            )
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server = Server("test-upstream", on_list_tools=on_list_tools, on_call_tool=on_call_tool)

    async def run() -> None:
        options = server.create_initialization_options(NotificationOptions(tools_changed=True))
        async with stdio_server() as (read, write), anyio.create_task_group() as tg:
            if args.swap_tools:
                tg.start_soon(swap_when_asked)
            await server.run(read, write, options)
            tg.cancel_scope.cancel()

    anyio.run(run)


if __name__ == "__main__":
    sys.exit(main())
