"""The HTTP transport's socket and event loop options (`mcp_dtdr.proxy.serve_proxy_http`)."""

from __future__ import annotations

import socket
from typing import Any


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host`:`port` (0: a free port), for `serve_proxy_http`.

    Raises:
        ValueError: The port is out of range, or the address cannot be bound (in use, not
            an address of this machine, no permission).
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an integer from 0 to 65535, got {port!r}")
    if not isinstance(host, str) or not host:
        raise ValueError(f"host must be a host name or address, got {host!r}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ValueError(f"host {host!r} cannot be resolved: {exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def _loop_options(http: bool) -> dict[str, Any]:
    """The asyncio backend's options: uvloop for the HTTP server when it is installed."""
    if not http:
        return {}
    try:
        import uvloop  # noqa: F401  # optional: a faster event loop
    except ImportError:
        return {}
    return {"use_uvloop": True}
