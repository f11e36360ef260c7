"""A history-aware MCP proxy (``pip install 'dtdr-agents[mcp]'``).

``dtdr-agents mcp-proxy --model DIR [-k N] [--always-include a,b] -- UPSTREAM_COMMAND [ARGS...]``
(or `run_proxy` from Python) exposes to an MCP client only the upstream tools ranked for the
next step of its task, re-ranked after every call from the calls made so far. With
``--transport streamable-http --host H --port P`` it serves many clients, each MCP session with
its own task (`mcp_dtdr.proxy.serve_proxy_http`); ``--model DIR/latest`` follows a publish
folder, taking up new versions between steps. ``python -m mcp_dtdr.loadbench`` measures it.
"""

from __future__ import annotations

from dtdr_agents.foundation.extras import needs_extra

with needs_extra("mcp_dtdr", "mcp"):  # a missing framework: name its extra
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
