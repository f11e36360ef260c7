"""The load bench's world: 1,000 generated tools, typical plans, and an echoing upstream.

`mcp_dtdr.loadbench` fits a retriever on `demonstrations()`, serves `catalogue()` through
`echo_upstream` (an MCP server over stdio that echoes every call) and gives each client
session its own `session_request`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

DOMAINS = (
    "invoice payment billing",
    "calendar meeting event",
    "support ticket issue",
    "customer contact crm",
    "shipment parcel delivery",
    "warehouse stock inventory",
    "employee payroll salary",
    "flight airline booking",
    "hotel room reservation",
    "recipe cooking meal",
    "weather forecast climate",
    "music playlist song",
    "movie film cinema",
    "podcast episode audio",
    "photo album picture",
    "document file folder",
    "spreadsheet sheet cell",
    "email inbox message",
    "chat channel conversation",
    "repository code commit",
    "server cluster node",
    "database table query",
    "dashboard chart metric",
    "budget expense cost",
    "loan mortgage credit",
    "stock share portfolio",
    "crypto wallet coin",
    "insurance policy claim",
    "patient clinic appointment",
    "prescription pharmacy drug",
    "fitness workout exercise",
    "diet nutrition calorie",
    "course lesson student",
    "exam grade score",
    "library book loan",
    "news article headline",
    "blog post draft",
    "social follower profile",
    "advert campaign marketing",
    "survey poll response",
    "contract legal clause",
    "vehicle car fleet",
    "parking garage spot",
    "restaurant table dining",
    "grocery shopping cart",
    "garden plant watering",
    "pet veterinary animal",
    "home thermostat heating",
    "travel itinerary trip",
    "translation language text",
)
ACTIONS = (
    ("search", "Search for {d} records matching keywords"),
    ("get", "Get the full details of one {d} record by its id"),
    ("create", "Create a new {d} record"),
    ("update", "Update the fields of an existing {d} record"),
    ("delete", "Delete a {d} record permanently"),
    ("list", "List recent {d} records with paging"),
    ("export", "Export {d} records to a CSV file"),
    ("import", "Import {d} records from a CSV file"),
    ("share", "Share a {d} record with another person by email"),
    ("archive", "Archive an old {d} record"),
    ("restore", "Restore an archived {d} record"),
    ("comment", "Add a comment note to a {d} record"),
    ("assign", "Assign a {d} record to a team member"),
    ("approve", "Approve a pending {d} request"),
    ("reject", "Reject a pending {d} request with a reason"),
    ("tag", "Add labels and tags to a {d} record"),
    ("merge", "Merge two duplicate {d} records into one"),
    ("summarize", "Summarize the history of a {d} record"),
    ("remind", "Set a reminder about a {d} record"),
    ("report", "Build a statistics report over {d} records"),
)
PLANS = (
    ("search", "get", "update"),
    ("search", "get", "share"),
    ("list", "summarize", "report"),
    ("create", "assign", "remind"),
    ("search", "merge", "tag"),
    ("get", "comment", "approve"),
    ("get", "reject", "comment"),
    ("import", "list", "export"),
    ("search", "archive"),
    ("restore", "get", "update", "share"),
)
PHRASES = {
    "search": "find the {w} about {x}",
    "get": "open the {w} details",
    "update": "change the {w} fields",
    "share": "send the {w} to my colleague",
    "list": "show my recent {w} entries",
    "summarize": "summarize the {w} history",
    "report": "make a statistics report of {w}",
    "create": "create a new {w}",
    "assign": "give the {w} to a teammate",
    "remind": "remind me about the {w} tomorrow",
    "merge": "merge the duplicate {w} entries",
    "tag": "label the {w}",
    "comment": "add a note on the {w}",
    "approve": "approve the {w} request",
    "reject": "turn down the {w} request",
    "import": "load {w} entries from a csv file",
    "export": "save the {w} entries to a csv file",
    "archive": "archive the old {w}",
    "restore": "bring back the archived {w}",
}
TOPICS = ("march", "the berlin office", "project apollo", "last week", "the new client")


def catalogue() -> list[dict[str, Any]]:
    """The 1,000 generated tools: ``{"name", "description", "parameters"}``."""
    tools = []
    for words in DOMAINS:
        domain = words.split()[0]
        for action, text in ACTIONS:
            tools.append(
                {
                    "name": f"{domain}_{action}",
                    "description": text.format(d=words) + ".",
                    "parameters": {
                        "type": "object",
                        "properties": {"id": {"type": "string"}, "query": {"type": "string"}},
                    },
                }
            )
    return tools


def plan_request(domain_index: int, plan_index: int, variant: int) -> tuple[str, list[str]]:
    """A request in words and the calls that answer it."""
    words = DOMAINS[domain_index].split()
    plan = PLANS[plan_index]
    parts = [PHRASES[a].format(w=" ".join(words), x=TOPICS[variant % len(TOPICS)]) for a in plan]
    domain = words[0]
    return "Please " + ", then ".join(parts) + ".", [f"{domain}_{a}" for a in plan]


def demonstrations() -> list[Any]:
    """Solved requests for every domain and plan (what a fitted retriever learns from)."""
    from dtdr_agents.foundation.types import Demonstration

    demos = []
    for d in range(len(DOMAINS)):
        for p in range(len(PLANS)):
            query, calls = plan_request(d, p, d + p)
            demos.append(Demonstration(query=query, calls=tuple(calls), id=f"d{d}p{p}"))
    return demos


def session_request(i: int) -> str:
    """The request of session `i` (distinct per session: a domain, a plan and wording)."""
    return plan_request((i * 7) % len(DOMAINS), i % len(PLANS), i + 1)[0]


# ---------------------------------------------------------------------------------- upstream
ECHO_UPSTREAM = """
import json, sys
import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

specs = json.load(open(sys.argv[1], encoding="utf-8"))
tools = [
    types.Tool(name=s["name"], description=s["description"], input_schema=s["parameters"])
    for s in specs
]

async def on_list_tools(ctx, params):
    return types.ListToolsResult(tools=tools)

async def on_call_tool(ctx, params):
    text = json.dumps({"tool": params.name, "args": params.arguments or {}}, sort_keys=True)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

async def run():
    server = Server("echo-upstream", on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(run)
"""
"""An MCP server over stdio that lists the tools of its argument's JSON file and echoes every
call: the SDK's low-level server and nothing else, so that it starts as fast as an MCP server
can (a module of this package would import the whole proxy first)."""


def echo_upstream(tools_file: str | Path) -> list[str]:
    """The command that starts `ECHO_UPSTREAM` on `tools_file` (a proxy's upstream command)."""
    return [sys.executable, "-c", ECHO_UPSTREAM, str(tools_file)]
