"""The connection to the upstream MCP server: start-up, listing, calls, time-outs, changes."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TextIO

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.stdio import get_default_environment
from mcp.shared.exceptions import MCPError

from dtdr_agents.foundation.errors import DTDRError


class UpstreamError(DTDRError, RuntimeError):
    """The upstream MCP server failed: it did not start, died, was too slow or is invalid."""


def _mcp_error(message: str, code: int = types.INTERNAL_ERROR) -> MCPError:
    return MCPError(code=code, message=message)


class Upstream:
    """The connection to the upstream MCP server (or why there is none).

    Attributes:
        argv: The upstream command line.
        timeout: Seconds to wait for each upstream request.
        session: The client session, None when the upstream failed to start.
        tools: The upstream's tools (unique names), in the order it listed them.
        error: Why the upstream is unusable, or None.
    """

    def __init__(self, argv: Sequence[str], timeout: float) -> None:
        self.argv = tuple(argv)
        self.timeout = timeout
        self.session: ClientSession | None = None
        self.tools: list[types.Tool] = []
        self.error: str | None = None
        # one pending "the upstream's tools changed" at most: changes coalesce until refreshed
        self._changed, self.changes = anyio.create_memory_object_stream[None](1)

    async def _on_message(self, message: Any) -> None:
        """Note the upstream's ``notifications/tools/list_changed`` (never blocks)."""
        if isinstance(message, types.ToolListChangedNotification):
            with contextlib.suppress(anyio.WouldBlock):
                self._changed.send_nowait(None)

    @property
    def name(self) -> str:
        """A short name of the upstream for messages."""
        return Path(self.argv[0]).name if self.argv else "upstream"

    @classmethod
    async def start(
        cls,
        stack: AsyncExitStack,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        errlog: TextIO | None = None,
    ) -> Upstream:
        """Start the upstream server, initialize it and list its tools.

        Failures do not raise: they are kept in `error` and reported to the client, and the
        server is ended at once. A started server ends when `stack` closes, and on POSIX
        also when the proxy is gone (`_guarded`).
        """
        upstream = cls(argv, timeout)
        stack.callback(upstream.changes.close)  # the change stream ends with the connection
        stack.callback(upstream._changed.close)
        if not argv:
            upstream.error = "no upstream command was given"
            return upstream
        connection = AsyncExitStack()  # closed at once when the start fails
        try:
            params = _guarded(argv, env)
            read, write = await connection.enter_async_context(
                stdio_client(params, errlog=errlog or sys.stderr)
            )
            session = await connection.enter_async_context(
                ClientSession(
                    read,
                    write,
                    read_timeout_seconds=timeout,
                    message_handler=upstream._on_message,
                )
            )
            with anyio.fail_after(timeout):
                await session.initialize()
            tools = await upstream._list(session)
        except BaseException as exc:
            # a failed start leaves nothing running: the server (and whatever it started)
            # ends now, not when the proxy exits
            await connection.aclose()
            if not isinstance(exc, Exception):
                raise
            upstream.error = upstream._start_error(exc)
            return upstream
        stack.push_async_exit(connection)
        upstream.session = session
        upstream.tools = tools
        return upstream

    def _start_error(self, exc: Exception) -> str:
        """Why the start failed, for the client; re-raises what is not a start failure."""
        if isinstance(exc, UpstreamError):
            return str(exc)
        if isinstance(exc, TimeoutError):
            return (
                f"the upstream MCP server {self.name!r} did not complete the MCP handshake "
                f"within {self.timeout:g} s"
            )
        if isinstance(exc, OSError | MCPError | ValueError | RuntimeError):
            return (
                f"the upstream MCP server {self.name!r} could not be started or initialized: "
                f"{type(exc).__name__}: {exc}"
            )
        raise exc

    async def _list(self, session: ClientSession) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(1000):  # bounded pagination
            with anyio.fail_after(self.timeout):
                page = await session.list_tools(
                    params=types.PaginatedRequestParams(cursor=cursor) if cursor else None
                )
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        seen: dict[str, int] = {}
        for pos, tool in enumerate(tools):
            if tool.name in seen:
                raise UpstreamError(
                    f"the upstream MCP server {self.name!r} lists the tool name {tool.name!r} "
                    f"twice (positions {seen[tool.name]} and {pos}); tool names must be unique"
                )
            seen[tool.name] = pos
        if not tools:
            raise UpstreamError(f"the upstream MCP server {self.name!r} lists no tools")
        return tools

    async def refresh(self) -> list[types.Tool]:
        """List the upstream's tools again (after its ``tools/list_changed``).

        Raises:
            MCPError: The upstream is unusable, or the new list is invalid (a name listed
                twice, no tools), too slow or cut off; the upstream is then marked unusable
                with the cause (`error`), as when it fails at start-up.
        """
        session = self.check()
        try:
            tools = await self._list(session)
        except UpstreamError as exc:
            self.error = str(exc)
        except TimeoutError:
            self.error = (
                f"the upstream MCP server {self.name!r} did not answer tools/list within "
                f"{self.timeout:g} s after it said its tools changed"
            )
        except (MCPError, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            self.error = (
                f"the upstream MCP server {self.name!r} failed to list its tools after it said "
                f"they changed: {type(exc).__name__}: {exc}"
            )
        else:
            self.tools = tools
            return tools
        self.session = None
        raise _mcp_error(f"dtdr-agents mcp-proxy: {self.error}")

    def check(self) -> ClientSession:
        """The session; raises an MCP error saying why the upstream is unusable."""
        if self.session is None:
            raise _mcp_error(f"dtdr-agents mcp-proxy: {self.error}")
        return self.session

    async def call(self, name: str, arguments: Mapping[str, Any] | None) -> types.CallToolResult:
        """Forward a tool call; upstream tool errors come back as results (``is_error``).

        Raises:
            MCPError: The upstream is unusable, timed out, closed the connection or answered
                with an MCP error (its message is kept).
        """
        session = self.check()
        try:
            with anyio.fail_after(self.timeout):
                return await session.call_tool(name, dict(arguments or {}))
        except TimeoutError:
            raise _mcp_error(
                f"the upstream MCP server {self.name!r} did not answer tools/call {name!r} "
                f"within {self.timeout:g} s"
            ) from None
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED or "closed" in exc.message.lower():
                self.session = None
                self.error = (
                    f"the upstream MCP server {self.name!r} closed the connection (it may have "
                    f"exited) during tools/call {name!r}: {exc.message}"
                )
                raise _mcp_error(f"dtdr-agents mcp-proxy: {self.error}") from exc
            raise MCPError(
                code=exc.code,
                message=f"upstream {self.name!r}: {exc.message}",
                data=exc.data,
            ) from exc
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            self.session = None
            self.error = (
                f"the upstream MCP server {self.name!r} is gone (it may have exited) during "
                f"tools/call {name!r}: {type(exc).__name__}"
            )
            raise _mcp_error(f"dtdr-agents mcp-proxy: {self.error}") from exc


KILL_GRACE = 1.0
"""Seconds between SIGTERM and SIGKILL when the upstream is ended (`mcp_dtdr.guard`)."""


def _guarded(argv: Sequence[str], env: Mapping[str, str] | None) -> StdioServerParameters:
    """How to start `argv` so that it ends with the proxy, on every exit path.

    The SDK starts a server in a session of its own and, when the connection closes, closes
    its stdin, then sends SIGTERM and SIGKILL to its process group; that does not run when the
    proxy itself is killed, and a server's children leave the group of a server that exited.
    On POSIX the command therefore runs under `mcp_dtdr.guard`, which ends the command's
    whole process group (SIGTERM, then SIGKILL after `KILL_GRACE` seconds) when the command
    exits, when the SDK stops it, or when the proxy is gone.

    Raises:
        FileNotFoundError: The command is not found (on the upstream's ``PATH``) or not
            executable: said here, since the guard would only see it after the start.
    """
    environment = get_default_environment() | dict(env or {})
    if os.name != "posix" or not sys.executable:
        return StdioServerParameters(command=argv[0], args=list(argv[1:]), env=environment)
    if shutil.which(argv[0], path=environment.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(
            errno.ENOENT, "no such executable (on the upstream's PATH)", argv[0]
        )
    guard = Path(__file__).with_name("guard.py")
    head = ["-I", "-S", str(guard), str(os.getpid()), f"{KILL_GRACE:g}"]
    return StdioServerParameters(command=sys.executable, args=[*head, *argv], env=environment)


def _upstream_argv(argv: Any) -> tuple[str, ...]:
    """The upstream command line as a tuple of strings.

    Raises:
        TypeError: `argv` is a single string or holds a non-string.
        ValueError: `argv` is empty.
    """
    if isinstance(argv, str | bytes) or not isinstance(argv, Sequence):
        raise TypeError(
            "upstream_argv must be a list of strings (the command and its arguments, e.g. "
            f"['python', 'server.py']), got {type(argv).__name__} {argv!r:.80}"
        )
    if not argv:
        raise ValueError("the upstream MCP server command is missing (after --)")
    bad = [a for a in argv if not isinstance(a, str)]
    if bad:
        raise TypeError(f"upstream_argv must hold strings, got {bad[0]!r:.80}")
    return tuple(argv)
