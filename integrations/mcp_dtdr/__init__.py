"""A history-aware MCP proxy (``pip install 'dtdr-agents[mcp]'``).

``dtdr-agents mcp-proxy --model DIR [-k N] [--always-include a,b] -- UPSTREAM_COMMAND [ARGS...]``
(or `run_proxy` from Python) exposes to an MCP client only the upstream tools ranked for the
next step of its task, re-ranked after every call from the calls made so far.
"""

from __future__ import annotations

from mcp_dtdr.proxy import (
    SEARCH_TOOLS,
    SET_TASK,
    ProxyConfig,
    ProxySession,
    Upstream,
    UpstreamError,
    build_server,
    run_proxy,
    serve_proxy,
)

__all__ = [
    "SEARCH_TOOLS",
    "SET_TASK",
    "ProxyConfig",
    "ProxySession",
    "Upstream",
    "UpstreamError",
    "build_server",
    "run_proxy",
    "serve_proxy",
]
