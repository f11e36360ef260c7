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
import dataclasses
import sys
import warnings
from collections.abc import Callable, Coroutine, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from dtdr_agents.foundation.errors import DTDRError
from dtdr_agents.foundation.selection import SelectionPolicy, select
from dtdr_agents.foundation.types import Tool, Toolset
from dtdr_agents.retrievers import load_retriever, make_retriever
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.runtime import (
    DEFAULT_RETRIEVER,
    BindingPolicy,
    StepRecord,
    StepSelector,
    check_int,
    fitted_tools,
)

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

SET_TASK = "set_task"
"""Name of the meta-tool that sets the session's request."""

SEARCH_TOOLS = "search_tools"
"""Name of the meta-tool that looks tools up explicitly."""

_META_TOOLS = (
    types.Tool(
        name=SET_TASK,
        description=(
            "Set the task you are working on (the user's request, in their words). Call it "
            "first: the tools offered to you are chosen for this task and the calls you make."
        ),
        input_schema={
            "type": "object",
            "properties": {"request": {"type": "string", "description": "The user's request."}},
            "required": ["request"],
        },
    ),
    types.Tool(
        name=SEARCH_TOOLS,
        description=(
            "Find tools by what they do when none of the offered tools fits; the tools found "
            "become callable."
        ),
        input_schema={
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What the tool does."}},
            "required": ["query"],
        },
    ),
)


UPSTREAM_PREFIX = "upstream_"
"""Prefix of the listed name of an upstream tool named like one of the proxy's own tools."""


class NameClashWarning(UserWarning):
    """An upstream tool has the name of one of the proxy's own tools and is listed renamed."""


def _renamed(upstream_names: Sequence[str]) -> dict[str, str]:
    """The new name of each upstream tool named like one of the proxy's own tools."""
    own = {t.name for t in _META_TOOLS}
    taken = own | set(upstream_names)
    renamed: dict[str, str] = {}
    for name in upstream_names:
        if name in own:
            new, n = f"{UPSTREAM_PREFIX}{name}", 2
            while new in taken:
                new, n = f"{UPSTREAM_PREFIX}{name}_{n}", n + 1
            taken.add(new)
            renamed[name] = new
    return renamed


def listed_names(upstream_names: Sequence[str]) -> dict[str, str]:
    """The name clients see for each upstream tool, by upstream name.

    An upstream tool named like one of the proxy's own tools (``set_task``, ``search_tools``)
    gets `UPSTREAM_PREFIX` (then ``_2``, ``_3``, ... until the name is free) and a
    `NameClashWarning` naming both names; every other tool keeps its name.
    """
    renamed = _renamed(upstream_names)
    _warn_renamed(renamed)
    return {name: renamed.get(name, name) for name in upstream_names}


def _warn_renamed(renamed: Mapping[str, str]) -> None:
    """A `NameClashWarning` per renamed upstream tool, naming both names."""
    for name, new in renamed.items():
        warnings.warn(
            f"dtdr-agents mcp-proxy: the upstream tool {name!r} has the name of the proxy's own "
            f"tool {name!r}; it is listed to clients as {new!r}, and calls of {new!r} are "
            f"forwarded to the upstream's {name!r}",
            NameClashWarning,
            stacklevel=3,
        )


class UpstreamError(DTDRError, RuntimeError):
    """The upstream MCP server failed: it did not start, died, was too slow or is invalid."""


@dataclass(frozen=True)
class ProxyConfig:
    """Options of the proxy.

    Attributes:
        k: Expose at most this many retrieved upstream tools.
        always_include: Upstream tools exposed at every step (not counted against `k`).
        timeout: Seconds to wait for each upstream request (start-up included).
        search_k: Tools returned (and made callable) by ``search_tools`` (default `k`).
        cache: ``"off"`` or ``"append"`` (the exposed list only grows within a task).
    """

    k: int = 5
    always_include: tuple[str, ...] = ()
    timeout: float = 30.0
    search_k: int | None = None
    cache: str = "off"

    def __post_init__(self) -> None:
        check_int("ProxyConfig.k", self.k, minimum=1)
        timeout = self.timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"ProxyConfig.timeout must be > 0 seconds, got {timeout!r}")
        check_int("ProxyConfig.search_k", self.search_k, minimum=1, optional=True)
        policy = SelectionPolicy(k=self.k, always_include=self.always_include)
        object.__setattr__(self, "always_include", policy.always_include)
        BindingPolicy(cache=self.cache)  # raises ValueError naming an unknown cache


def _mcp_error(message: str, code: int = types.INTERNAL_ERROR) -> MCPError:
    return MCPError(code=code, message=message)


def _required_text(value: Any, tool: str, field: str, what: str = "") -> str:
    """`value` stripped, or an INVALID_PARAMS error naming the tool and the field."""
    if not isinstance(value, str) or not value.strip():
        raise _mcp_error(
            f"{tool} needs a non-empty '{field}' string{what}, got {value!r}",
            types.INVALID_PARAMS,
        )
    return value.strip()


# ---------------------------------------------------------------------------------- upstream
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

        Failures do not raise: they are kept in `error` and reported to the client.
        """
        upstream = cls(argv, timeout)
        if not argv:
            upstream.error = "no upstream command was given"
            return upstream
        params = StdioServerParameters(
            command=argv[0], args=list(argv[1:]), env=dict(env) if env is not None else None
        )
        try:
            read, write = await stack.enter_async_context(
                stdio_client(params, errlog=errlog or sys.stderr)
            )
            session = await stack.enter_async_context(
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
        except UpstreamError as exc:
            upstream.error = str(exc)
            return upstream
        except TimeoutError:
            upstream.error = (
                f"the upstream MCP server {upstream.name!r} did not complete the MCP handshake "
                f"within {timeout:g} s"
            )
            return upstream
        except (OSError, MCPError, ValueError, RuntimeError) as exc:
            upstream.error = (
                f"the upstream MCP server {upstream.name!r} could not be started or initialized: "
                f"{type(exc).__name__}: {exc}"
            )
            return upstream
        upstream.session = session
        upstream.tools = tools
        return upstream

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


# ----------------------------------------------------------------------------------- session
def _core_tool(tool: types.Tool) -> Tool:
    return Tool(name=tool.name, description=tool.description or "", parameters=tool.input_schema)


@dataclass(frozen=True)
class _Catalogue:
    """The upstream's tools as the proxy ranks and lists them (never changed in place)."""

    selector: StepSelector
    tools: Mapping[str, types.Tool]  # by upstream name
    listed: Mapping[str, str]  # the name clients see, by upstream name
    by_listed: Mapping[str, str]  # the upstream name, by listed name


@dataclass(frozen=True)
class _State:
    """A snapshot of what a session sees; replaced whole, never changed in place."""

    catalogue: _Catalogue
    request: str | None = None
    history: tuple[str, ...] = ()
    step: StepRecord | None = None
    found: tuple[str, ...] = ()

    def exposed(self) -> tuple[str, ...]:
        """Upstream tool names the session may call, in the order they are listed."""
        names = list(self.step.bound if self.step is not None else ())
        for name in (*self.catalogue.selector.policy.always_include, *self.found):
            if name not in names:
                names.append(name)
        return tuple(names)


class ProxySession:
    """What one client session sees: its request, its call history and the exposed tools.

    The state is one immutable snapshot (`state`), replaced whole by each change, so a
    ``tools/list`` answered while ``set_task`` runs sees the state before or after it, never
    half of it. The changing methods (`set_task`, `search`, `record_call`) run in worker
    threads; callers hold `lock` around them, so that one change does not undo another.

    Args:
        selector: The step selector over the upstream's tools.
        upstream_tools: The upstream's tools, by name.
        search_k: Tools returned by ``search_tools``.

    Attributes:
        lock: Held (by the server) around every change of the state.
        steps: The steps selected in the current task, in order.
    """

    def __init__(
        self,
        selector: StepSelector,
        upstream_tools: Mapping[str, types.Tool],
        *,
        search_k: int,
    ) -> None:
        self.search_k = search_k
        self.lock = anyio.Lock()
        self.steps: list[StepRecord] = []
        listed = listed_names(list(upstream_tools))
        self.state = _State(
            _Catalogue(
                selector,
                dict(upstream_tools),
                listed,
                {shown: name for name, shown in listed.items()},
            )
        )

    @property
    def selector(self) -> StepSelector:
        """The step selector over the upstream's current tools."""
        return self.state.catalogue.selector

    @property
    def upstream_tools(self) -> Mapping[str, types.Tool]:
        """The upstream's tools, by upstream name."""
        return self.state.catalogue.tools

    @property
    def listed(self) -> Mapping[str, str]:
        """The name clients see for each upstream tool, by upstream name (`listed_names`)."""
        return self.state.catalogue.listed

    @property
    def by_listed(self) -> Mapping[str, str]:
        """The upstream name of each listed name."""
        return self.state.catalogue.by_listed

    @property
    def request(self) -> str | None:
        """The session's request, None before ``set_task``."""
        return self.state.request

    @property
    def history(self) -> tuple[str, ...]:
        """The upstream tools called in the current task, in order."""
        return self.state.history

    @property
    def step(self) -> StepRecord | None:
        """The selection for the next step, None before ``set_task``."""
        return self.state.step

    @property
    def found(self) -> tuple[str, ...]:
        """The tools the last ``search_tools`` found (callable)."""
        return self.state.found

    def exposed(self) -> tuple[str, ...]:
        """Upstream tool names the session may call, in the order they are listed."""
        return self.state.exposed()

    def rerank(self) -> None:
        """Select the tools for the next step (needs a request; hold `lock`)."""
        self.state = self._ranked(self.state, self.state.step)

    def _ranked(self, state: _State, previous: StepRecord | None) -> _State:
        """`state` with the step selected for its request and history (needs a request)."""
        if state.request is None:
            return state
        step = state.catalogue.selector.select(state.request, state.history, previous=previous)
        self.steps.append(step)
        return dataclasses.replace(state, step=step)

    def set_task(self, request: Any) -> str:
        """Set the request, reset the history, re-rank; the text answered to the client.

        Raises:
            MCPError: The request is missing or empty.
        """
        text = _required_text(request, SET_TASK, "request", " (the user's task)")
        self.steps = []
        self.state = self._ranked(_State(self.state.catalogue, request=text), None)
        return f"Task set. Tools offered for the next step: {', '.join(self.callable_names())}."

    def search(self, query: Any) -> str:
        """Look tools up by `query` and make them callable; the text answered to the client.

        Raises:
            MCPError: The query is missing or empty.
        """
        state = self.state
        cat = state.catalogue
        ranking = cat.selector.retriever.rank(_required_text(query, SEARCH_TOOLS, "query"), ())
        sel = select(ranking, SelectionPolicy(k=self.search_k, respect_fallback=False))
        self.state = dataclasses.replace(state, found=sel.names)
        lines = [
            f"- {cat.listed[n]}: {cat.tools[n].description or ''}".rstrip(": ") for n in sel.names
        ]
        return "Found (now callable):\n" + "\n".join(lines)

    def record_call(self, name: str) -> None:
        """Append an upstream call to the history and re-rank."""
        state = self.state
        state = dataclasses.replace(state, history=(*state.history, name))
        self.state = self._ranked(state, state.step)

    def set_catalogue(
        self, selector: StepSelector, upstream_tools: Mapping[str, types.Tool]
    ) -> None:
        """Switch to the upstream's new tools and re-rank the current task.

        Tools that left are no longer exposed or callable (nor found by the last search);
        the history keeps their calls. Warns about newly renamed tools (`listed_names`).
        """
        state = self.state
        renamed = _renamed(list(upstream_tools))
        _warn_renamed(
            {n: new for n, new in renamed.items() if state.catalogue.listed.get(n) != new}
        )
        listed = {name: renamed.get(name, name) for name in upstream_tools}
        cat = _Catalogue(
            selector, dict(upstream_tools), listed, {new: n for n, new in listed.items()}
        )
        found = tuple(n for n in state.found if n in upstream_tools)
        # the previous step may bind tools that left: the binding starts afresh
        self.state = self._ranked(dataclasses.replace(state, catalogue=cat, found=found), None)

    def callable_names(self) -> tuple[str, ...]:
        """The listed names of the exposed upstream tools (what clients call them)."""
        state = self.state
        return tuple(state.catalogue.listed[n] for n in state.exposed())

    def list_tools(self) -> list[types.Tool]:
        """The meta-tools, then the exposed upstream tools under their listed names."""
        state = self.state  # one snapshot: complete even while another request changes it
        cat = state.catalogue
        tools = [*_META_TOOLS]
        for name in state.exposed():
            tool = cat.tools[name]
            shown = cat.listed[name]
            tools.append(tool if shown == name else tool.model_copy(update={"name": shown}))
        return tools


# ------------------------------------------------------------------------------------ server
def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def _selector(
    toolset: Toolset, retriever: ToolRetriever, config: ProxyConfig, *, strict: bool
) -> StepSelector:
    """The step selector over the upstream's `toolset`; retargets `retriever` to it.

    `strict`: an ``always_include`` name the upstream does not list is an error (at start-up);
    otherwise (after the upstream's tools changed) it is left out until the tool comes back.
    """
    renamed = {new: n for n, new in _renamed(list(toolset.names)).items()}
    always = tuple(dict.fromkeys(renamed.get(n, n) for n in config.always_include))
    missing = [n for n in always if not toolset.has(n)]
    if missing and strict:
        raise UpstreamError(f"--always-include names tools the upstream does not list: {missing}")
    if set(fitted_tools(retriever).names) != set(toolset.names):
        retriever.set_tools(toolset)  # tools added after fit are ranked by a prior
    return StepSelector(
        toolset,
        retriever,
        policy=SelectionPolicy(
            k=config.k,
            threshold=0.0,
            always_include=tuple(n for n in always if toolset.has(n)),
        ),
        # the history may name tools the upstream dropped since: they are ignored
        binding=BindingPolicy(cache=config.cache, ignore_unknown_history=True),
    )


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
    )
    retriever = load_retriever(model_dir) if model_dir is not None else None

    async def main() -> None:
        async with stdio_server() as (read, write):
            await serve_proxy(retriever, argv, read, write, config, env=env)

    anyio.run(main)
