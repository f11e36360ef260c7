"""A history-aware MCP proxy: expose only the upstream tools ranked for the session's next step.

The proxy speaks MCP over stdio to its client and starts the upstream server over stdio. A
session sees at most `k` retrieved upstream tools (plus ``always_include`` and the tools its
last ``search_tools`` found) and two meta-tools:

* ``set_task(request)`` sets the session's request (the user's task) and re-ranks;
* ``search_tools(query)`` is an explicit look-up that also makes the found tools callable.

Every ``tools/call`` of an upstream tool is forwarded, appended to the session's history, and
the catalogue is re-ranked from the request and that history (`dtdr_agents.runtime`); when the
exposed set changed, the proxy sends ``notifications/tools/list_changed``. Calls of tools the
session does not expose are refused with an MCP error; upstream errors pass through. An
upstream that fails to start, dies, answers too slowly or lists duplicate tool names is
reported to the client as an MCP error naming the cause; every upstream request has a
time-out. When the upstream sends ``notifications/tools/list_changed``, the proxy lists its
tools again, retargets the retriever (`ToolRetriever.set_tools`) and the session, and tells
the client if its list changed; dropped tools are no longer listed or callable.

A session's state is one immutable snapshot replaced whole by each change, so that a
``tools/list`` answered while ``set_task`` runs (the SDK runs requests concurrently) is
the list from before or after the change.

The proxy's own tools keep their names (``set_task`` and ``search_tools`` are its documented
interface: its instructions and error messages name them). An upstream tool with one of those
names is listed as ``upstream_<name>`` (``upstream_<name>_2``, ``_3``, ... when that is taken
too), with a warning naming both names; a call of the listed name is forwarded to the upstream
under its own name. The retriever, the history and ``always_include`` use the upstream's names.

The change notification is sent on the connection to clients that connected with the
initialize handshake (protocol versions up to 2025-11-25, what `ClientSession.initialize`
negotiates), and published on ``subscriptions/listen`` streams for clients of the 2026-07-28
protocol (where change notifications travel only on such streams).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Coroutine, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from dtdr_agents.foundation.errors import DTDRError
from dtdr_agents.foundation.selection import SelectionPolicy
from dtdr_agents.foundation.types import Toolset
from dtdr_agents.retrievers import load_retriever, make_retriever
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.runtime import (
    DEFAULT_RETRIEVER,
)
from mcp_dtdr.names import (
    SEARCH_TOOLS,
    SET_TASK,
    UPSTREAM_PREFIX,
    NameClashWarning,
    listed_names,
)
from mcp_dtdr.session import ProxyConfig, ProxySession, _core_tool, _selector
from mcp_dtdr.upstream import Upstream, UpstreamError, _mcp_error, _upstream_argv

__all__ = [
    "SEARCH_TOOLS",
    "SET_TASK",
    "UPSTREAM_PREFIX",
    "NameClashWarning",
    "ProxyConfig",
    "ProxySession",
    "Upstream",
    "UpstreamError",
    "build_server",
    "listed_names",
    "run_proxy",
    "serve_proxy",
]


# ------------------------------------------------------------------------------------ server
def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def build_server(upstream: Upstream, retriever: ToolRetriever | None, config: ProxyConfig) -> Any:
    """The MCP `Server` of the proxy over a started `upstream` and a retriever.

    With `retriever` None, a zero-shot `dtdr_agents.runtime.DEFAULT_RETRIEVER` is fitted on
    the upstream's tools with no demonstrations. When the upstream failed (or the retriever
    cannot rank its tools), the server still answers: ``tools/list`` and ``tools/call``
    return an MCP error saying why. The server does not follow the upstream's tool changes;
    `serve_proxy` does.
    """
    return _build(upstream, retriever, config)[0]


def _build(
    upstream: Upstream, retriever: ToolRetriever | None, config: ProxyConfig
) -> tuple[Any, Callable[[], Coroutine[Any, Any, None]] | None]:
    """The server (see `build_server`) and the task that follows the upstream's tool changes.

    The task (None when the upstream is unusable) waits for each upstream
    ``notifications/tools/list_changed``, lists the upstream's tools again, retargets the
    retriever and the session, and tells the client when its list changed.
    """
    session: ProxySession | None = None
    if upstream.session is not None:
        try:
            toolset = Toolset([_core_tool(t) for t in upstream.tools])
            if retriever is None:
                retriever = make_retriever(DEFAULT_RETRIEVER).fit([], toolset)
            session = ProxySession(
                _selector(toolset, retriever, config, strict=True),
                {t.name: t for t in upstream.tools},
                search_k=config.search_k or config.k,
            )
        except DTDRError as exc:
            upstream.session = None
            upstream.error = str(exc)

    bus = InMemorySubscriptionBus()
    clients: list[Any] = []  # the connection's server session, once it sent a request

    def live(ctx: ServerRequestContext[Any]) -> ProxySession:
        if not any(c is ctx.session for c in clients):
            clients.append(ctx.session)
        upstream.check()
        assert session is not None
        return session

    async def notify(ctx_session: Any | None) -> None:
        """Tell the clients that the list of tools changed."""
        for client in [ctx_session] if ctx_session is not None else clients:
            with contextlib.suppress(Exception):  # a client that cannot take it still polls
                await client.send_tool_list_changed()  # handshake-era clients
        await bus.publish(ToolsListChanged())  # 2026-07-28 clients' listen streams

    async def on_list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=live(ctx).list_tools())

    async def on_call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        sess = live(ctx)
        args = dict(params.arguments or {})
        if params.name in (SET_TASK, SEARCH_TOOLS):
            change, arg = (
                (sess.set_task, "request") if params.name == SET_TASK else (sess.search, "query")
            )
            async with sess.lock:
                before = sess.exposed()
                result = _text(await anyio.to_thread.run_sync(change, args.get(arg)))
                after = sess.exposed()
        else:
            state = sess.state
            name = state.catalogue.by_listed.get(params.name)  # the upstream's name
            if name is None or name not in state.exposed():
                raise _mcp_error(
                    f"the tool {params.name!r} is "
                    f"{'unknown' if name is None else 'not offered at this step'}; callable "
                    f"now: {[SET_TASK, SEARCH_TOOLS, *sess.callable_names()]}. Call "
                    f"{SET_TASK} with the user's request, or {SEARCH_TOOLS} to find a tool.",
                    types.INVALID_PARAMS,
                )
            result = await upstream.call(name, args)
            async with sess.lock:
                before = sess.exposed()
                await anyio.to_thread.run_sync(sess.record_call, name)
                after = sess.exposed()
        if after != before:
            await notify(ctx.session)
        return result

    def retarget(toolset: Toolset, tools: Sequence[types.Tool]) -> None:
        """Rank and expose the upstream's new `tools` (in a worker thread, under the lock)."""
        assert session is not None and retriever is not None
        selector = _selector(toolset, retriever, config, strict=False)
        session.set_catalogue(selector, {t.name: t for t in tools})

    async def follow_upstream() -> None:
        assert session is not None
        async for _ in upstream.changes:
            try:
                tools = await upstream.refresh()
            except MCPError:  # the upstream is now unusable: every request says why
                await notify(None)
                return
            try:
                toolset = Toolset([_core_tool(t) for t in tools])
                async with session.lock:  # no ranking runs while the retriever is retargeted
                    before = session.list_tools()

                    await anyio.to_thread.run_sync(retarget, toolset, tools)
                    after = session.list_tools()
            except DTDRError as exc:
                upstream.session = None
                upstream.error = f"the upstream's new list of tools cannot be used: {exc}"
                await notify(None)
                return
            if after != before:
                await notify(None)

    server = Server(
        "dtdr-agents-mcp-proxy",
        instructions=(
            f"Call {SET_TASK} with the user's request first. The tools offered change after "
            f"every call to fit the next step; use {SEARCH_TOOLS} when none fits."
        ),
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        on_subscriptions_listen=ListenHandler(bus),
    )
    return server, follow_upstream if session is not None else None


async def serve_proxy(
    retriever: ToolRetriever | None,
    upstream_argv: Sequence[str],
    read_stream: ReadStream[SessionMessage | Exception],
    write_stream: WriteStream[SessionMessage],
    config: ProxyConfig,
    *,
    env: Mapping[str, str] | None = None,
) -> None:
    """Start the upstream and serve one client on the given streams until it disconnects.

    `retriever` None fits a zero-shot default retriever on the upstream's tools.
    """
    argv = _upstream_argv(upstream_argv)
    async with AsyncExitStack() as stack:
        upstream = await Upstream.start(stack, argv, timeout=config.timeout, env=env)
        server, follow_upstream = _build(upstream, retriever, config)
        options = server.create_initialization_options(NotificationOptions(tools_changed=True))
        async with anyio.create_task_group() as tg:
            if follow_upstream is not None:
                tg.start_soon(follow_upstream)
            await server.run(read_stream, write_stream, options)
            tg.cancel_scope.cancel()


def run_proxy(
    model_dir: str | Path | None,
    upstream_argv: Sequence[str],
    *,
    k: int = 5,
    always_include: Sequence[str] = (),
    timeout: float = 30.0,
    search_k: int | None = None,
    cache: str = "off",
    env: Mapping[str, str] | None = None,
    policy: SelectionPolicy | None = None,
) -> None:
    """Run the proxy over this process's stdin/stdout until the client disconnects.

    Args:
        model_dir: A retriever saved with `save` / ``dtdr-agents fit``; the upstream's tools
            may differ from its catalogue (new tools are ranked by a query-similarity prior).
            None: a zero-shot `dtdr_agents.runtime.DEFAULT_RETRIEVER` fitted on the upstream's
            tools with no demonstrations (it ranks by relevance; what typically follows a
            call is learned only from demonstrations).
        upstream_argv: The upstream MCP server's command line.
        k: Expose at most this many retrieved upstream tools.
        always_include: Upstream tools exposed at every step.
        timeout: Seconds to wait for each upstream request (start-up included).
        search_k: Tools returned by ``search_tools`` (default `k`).
        cache: ``"append"`` keeps the exposed list growing within a task.
        env: Environment of the upstream process (default: the SDK's safe default).
        policy: The `SelectionPolicy` of every step (`ProxyConfig.policy`); `k`,
            `always_include` and `cache` are shorthands for its fields.

    Raises:
        ModelLoadError: The model folder cannot be loaded.
        ValueError: Invalid options or an empty upstream command.
        TypeError: `upstream_argv` is a single string instead of a list.
    """
    argv = _upstream_argv(upstream_argv)
    if isinstance(always_include, str):  # tuple() would split it into letters
        raise ValueError(f"always_include must be a list of tool names, got {always_include!r}")
    config = ProxyConfig(
        k=k,
        always_include=tuple(always_include),
        timeout=timeout,
        search_k=search_k,
        cache=cache,
        policy=policy,
    )
    retriever = load_retriever(model_dir) if model_dir is not None else None

    async def main() -> None:
        async with stdio_server() as (read, write):
            await serve_proxy(retriever, argv, read, write, config, env=env)

    anyio.run(main)
