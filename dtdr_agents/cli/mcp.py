"""`dtdr-agents mcp-proxy`: a history-aware MCP proxy in front of an upstream MCP server."""

from __future__ import annotations

import argparse
from typing import Any

from dtdr_agents.cli._common import CLIError, split_ids
from dtdr_agents.foundation.extras import install_hint
from dtdr_agents.store.errors import StoreError
from dtdr_agents.store.session_limits import DEFAULT_EXPIRE_INTERVAL, DEFAULT_TTL

INSTALL_HINT = install_hint("the MCP proxy", "mcp")  # "... needs the mcp extra: pip install ..."


def cmd_mcp_proxy(args: argparse.Namespace) -> int:
    """Run the proxy over stdin/stdout (or streamable HTTP) until it is stopped."""
    upstream = list(args.upstream)
    if upstream and upstream[0] == "--":
        upstream = upstream[1:]
    if not upstream:
        raise CLIError(
            "mcp-proxy needs the upstream server's command after --, e.g. "
            "dtdr-agents mcp-proxy --model model/ -- python my_server.py"
        )
    if args.k < 1 or args.timeout <= 0:
        raise CLIError("-k must be >= 1 and --timeout > 0 seconds")
    if args.reload_interval <= 0:
        raise CLIError(f"--reload-interval must be > 0 seconds, got {args.reload_interval:g}")
    http = args.transport == "streamable-http"
    if not http and (args.host is not None or args.port is not None):
        raise CLIError(
            "--host and --port are options of --transport streamable-http (stdio serves "
            "one client over stdin/stdout)"
        )
    if not http and args.session_store is not None:
        raise CLIError(
            "--session-store is an option of --transport streamable-http (stdio serves one "
            "client, whose session lives in the proxy process)"
        )
    ttl, every = args.session_ttl, args.expire_interval
    if args.session_store is None and (ttl is not None or every is not None):
        raise CLIError(
            "--session-ttl and --expire-interval are options of --session-store (without a "
            "store, a session ends with its client's connection)"
        )
    ttl = DEFAULT_TTL if ttl is None else ttl
    every = DEFAULT_EXPIRE_INTERVAL if every is None else every
    if not ttl > 0 or not every > 0:
        raise CLIError(
            f"--session-ttl and --expire-interval must be > 0 seconds, got {ttl:g} and {every:g}"
        )
    port = 8000 if args.port is None else args.port
    if not 0 <= port <= 65535:
        raise CLIError(f"--port must be from 0 to 65535 (0: a free port), got {port}")
    try:
        from mcp_dtdr import run_proxy
    except ImportError as exc:
        raise CLIError(f"{INSTALL_HINT} ({exc})") from exc
    try:
        run_proxy(
            args.model,
            upstream,
            k=args.k,
            always_include=split_ids(args.always_include, ()),
            timeout=args.timeout,
            search_k=args.search_k,
            cache=args.cache,
            transport=args.transport,
            host=args.host or "127.0.0.1",
            port=port,
            reload_interval=args.reload_interval,
            session_store=args.session_store,
            session_ttl=ttl,
            expire_interval=every,
        )
    except ValueError as exc:
        raise CLIError(str(exc)) from exc
    except StoreError as exc:  # a publish folder with no version that loads, or the store
        where = "--model " + str(args.model)
        if args.session_store is not None and "session store" in str(exc):
            where = "--session-store"
        raise CLIError(f"{where}: {exc}") from exc
    return 0


def add_commands(sub: Any) -> None:
    """Add ``mcp-proxy``."""
    p = sub.add_parser(
        "mcp-proxy",
        help="serve an upstream MCP server's tools, only those ranked for the next step",
        description=(
            "Speak MCP over stdio to a client (or over streamable HTTP to many clients, each "
            "MCP session with its own task) and start the upstream MCP server (the command "
            "after --) over stdio. The client sees at most k upstream tools, re-ranked from its "
            "task (set_task) and the calls made so far, plus set_task and search_tools."
        ),
    )
    p.add_argument(
        "--model",
        default=None,
        help="a retriever folder (dtdr-agents fit -o DIR), or a publish folder (DIR or "
        "DIR/latest: new versions are taken up between steps); without it, a zero-shot "
        "retriever is fitted on the upstream's tools (no demonstrations)",
    )
    p.add_argument(
        "--transport",
        choices=("stdio", "streamable-http"),
        default="stdio",
        help="stdio (one client, the default) or streamable-http (many clients at "
        "http://HOST:PORT/mcp)",
    )
    p.add_argument("--host", default=None, help="streamable-http: address to listen on (127.0.0.1)")
    p.add_argument(
        "--port", type=int, default=None, help="streamable-http: port (8000; 0 picks a free one)"
    )
    p.add_argument(
        "--session-store",
        default=None,
        metavar="URL",
        help="streamable-http: keep each session's state in this run store (sqlite:///FILE "
        "or postgresql://...); clients name their session in the X-Dtdr-Session header, and "
        "replicas on one store serve any session (no session affinity needed)",
    )
    p.add_argument(
        "--session-ttl",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"with --session-store: delete sessions not written for this long (default "
        f"{DEFAULT_TTL:g}: 30 minutes, the MCP SDK's session idle time-out)",
    )
    p.add_argument(
        "--expire-interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"with --session-store: seconds between two deletions of such sessions (default "
        f"{DEFAULT_EXPIRE_INTERVAL:g})",
    )
    p.add_argument(
        "--reload-interval",
        type=float,
        default=5.0,
        help="seconds between looks for a newly published version (publish folder only)",
    )
    p.add_argument("-k", type=int, default=5, help="upstream tools exposed per step")
    p.add_argument("--always-include", default="", help="comma-separated tools always exposed")
    p.add_argument(
        "--timeout", type=float, default=30.0, help="seconds per upstream request (default 30)"
    )
    p.add_argument("--search-k", type=int, default=None, help="tools found by search_tools")
    p.add_argument(
        "--cache",
        choices=("off", "append"),
        default="off",
        help="append: the exposed list only grows within a task (prompt-cache friendly)",
    )
    p.add_argument("upstream", nargs=argparse.REMAINDER, help="-- UPSTREAM_COMMAND [ARGS...]")
    p.set_defaults(func=cmd_mcp_proxy)
