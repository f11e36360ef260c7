"""A real MCP server (official SDK, stdio) used as the upstream of the proxy in the tests.

    python tests/mcp_upstream_server.py --tools tools.json [--duplicate] [--fail-on NAME]
        [--slow-on NAME] [--die-on NAME] [--hang-start]

Every tool of ``tools.json`` (a JSON list of ``{"name", "description", "parameters"}``) answers
``{"tool": name, "args": {...}}``; ``--fail-on`` makes a tool return an error result,
``--slow-on`` makes it sleep 60 s, ``--die-on`` makes the process exit, ``--duplicate`` lists
the first tool twice and ``--hang-start`` never answers the handshake. Standard library + mcp.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", required=True)
    parser.add_argument("--duplicate", action="store_true")
    parser.add_argument("--fail-on", default="")
    parser.add_argument("--slow-on", default="")
    parser.add_argument("--die-on", default="")
    parser.add_argument("--hang-start", action="store_true")
    args = parser.parse_args()
    with open(args.tools, encoding="utf-8") as fh:
        specs = json.load(fh)
    tools = [
        types.Tool(
            name=s["name"],
            description=s.get("description", ""),
            input_schema=s.get("parameters") or {"type": "object", "properties": {}},
        )
        for s in specs
    ]
    if args.duplicate:
        tools.append(tools[0])
    if args.hang_start:
        time.sleep(3600)

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        name = params.name
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
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


if __name__ == "__main__":
    sys.exit(main())
