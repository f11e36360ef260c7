"""A history-aware MCP proxy: expose only the upstream tools ranked for the session's next step.

The proxy speaks MCP over stdio to its client (or over the SDK's streamable HTTP transport to
many clients, `serve_proxy_http`: each MCP session is a `ProxySession` with its own request,
history and found tools, over one shared catalogue, retriever and upstream connection; with a
session store, `mcp_dtdr.stored`, the state lives in the store and replicas share it) and
starts the upstream server over stdio. Started on a publish folder (`reloading`), it takes up
newly published versions between steps. A session sees at most `k` retrieved upstream tools
(plus ``always_include`` and the tools its last ``search_tools`` found) and two meta-tools:

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
every client whose list changed; dropped tools are no longer listed or callable. A model that
fails to rank is refused, with the reason told once (`mcp_dtdr.refusal`). The upstream
process ends with the proxy on every exit path (`mcp_dtdr.upstream`, `mcp_dtdr.guard`).

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
import logging
import socket
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from dtdr_agents.foundation.errors import DTDRError
from dtdr_agents.foundation.persistence import read_model
from dtdr_agents.foundation.selection import SelectionPolicy
from dtdr_agents.foundation.types import Toolset
from dtdr_agents.retrievers import load_retriever, make_retriever
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.runtime import (
    DEFAULT_RETRIEVER,
)
from dtdr_agents.store.errors import StoreError
from dtdr_agents.store.publishing import Reloader
from dtdr_agents.store.session_limits import DEFAULT_EXPIRE_INTERVAL, DEFAULT_TTL
from mcp_dtdr.names import (
    SEARCH_TOOLS,
    SET_TASK,
    UPSTREAM_PREFIX,
    NameClashWarning,
    listed_names,
)
from mcp_dtdr.network import _loop_options, listen
from mcp_dtdr.refusal import ModelRefusal, _say
from mcp_dtdr.reloading import publish_root, published_models
from mcp_dtdr.session import (
    ProxyConfig,
    ProxySession,
    _Catalogue,
    _catalogue,
    _core_tool,
    _selector,
)
from mcp_dtdr.stored import (
    SESSION_HEADER,
    StoredSessions,
    answered,
    call_digest,
    session_key,
    with_answer,
)
from mcp_dtdr.upstream import Upstream, UpstreamError, _mcp_error, _upstream_argv

if TYPE_CHECKING:  # the database layer: loaded only when a session store is opened
    from dtdr_agents.store.session_state import SessionState
    from dtdr_agents.store.sessions import SessionStore

logger = logging.getLogger(__name__)

__all__ = [
    "SEARCH_TOOLS",
    "SESSION_HEADER",
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
    "serve_proxy_http",
]


# ------------------------------------------------------------------------------------ server
def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def build_server(
    upstream: Upstream,
    retriever: ToolRetriever | None,
    config: ProxyConfig,
    *,
    model_name: str | None = None,
) -> Any:
    """The MCP `Server` of the proxy over a started `upstream` and a retriever.

    With `retriever` None, a zero-shot `dtdr_agents.runtime.DEFAULT_RETRIEVER` is fitted on
    the upstream's tools with no demonstrations. When the upstream failed (or the retriever
    cannot rank its tools), the server still answers: ``tools/list`` and ``tools/call``
    return an MCP error saying why; a retriever that fails to rank is refused from then on
    (`mcp_dtdr.refusal`; `model_name`, e.g. its folder, names it). The server does not
    follow the upstream's tool changes; `serve_proxy` does.
    """
    return _build(upstream, retriever, config, model_name=model_name).server


@dataclass
class _Client:
    """One client's session and the channel to tell it that its tools changed."""

    session: ProxySession
    notifier: Any = None  # the latest request's `ServerSession`: its connection's channel


def _forget_on_close(ctx: ServerRequestContext[Any], forget: Callable[[], object]) -> None:
    """Call `forget` when the client's connection closes (its MCP session ends).

    The SDK unwinds each connection's ``exit_stack`` when it closes; a handler reaches it
    through the request's `ServerSession`.
    """
    connection = getattr(ctx.session, "_connection", None)
    stack = getattr(connection, "exit_stack", None)
    if isinstance(stack, AsyncExitStack):
        stack.callback(forget)


@dataclass
class _Built:
    """The proxy's server and what runs beside it.

    Attributes:
        server: The MCP `Server`.
        follow_upstream: Follows the upstream's tool changes (None: the upstream is unusable).
        sessions: The live sessions of the clients, by MCP session id (streamable HTTP;
            ``""`` on stdio, where one connection has one session).
        reloader: The `Reloader` of published versions, when the proxy serves one.
    """

    server: Any
    follow_upstream: Callable[[], Coroutine[Any, Any, None]] | None
    sessions: dict[str, _Client]
    reloader: Reloader[Any] | None


def _build(
    upstream: Upstream,
    retriever: ToolRetriever | Reloader[Any] | None,
    config: ProxyConfig,
    *,
    per_connection: bool = False,
    store: SessionStore | None = None,
    model_name: str | None = None,
) -> _Built:
    """The server (see `build_server`) and the task that follows the upstream's tool changes.

    With `per_connection`, each client connection (an MCP session of the streamable HTTP
    transport) gets its own `ProxySession`: its own request, history and found tools, over
    the one shared catalogue and retriever. Rankings of all sessions take turns (one lock):
    they share the retriever, which the upstream's tool changes retarget.

    With a session `store` (streamable HTTP in the SDK's stateless mode), each request names
    its session in the `SESSION_HEADER` header: its state is loaded from the store, its next
    step selected again (`ProxySession.restore`), and a changed state saved before the answer;
    no state stays in this process, and no change notification is sent (clients list again).

    A ranking that fails refuses the model (`ModelRefusal`, `model_name` naming it): the
    request is told why once, later requests get a short error and no ranking runs.

    The follow task (None when the upstream is unusable) waits for each upstream
    ``notifications/tools/list_changed``, lists the upstream's tools again, retargets the
    retriever and every live session, and tells each client whose list changed.
    """
    lock = anyio.Lock()  # held around every ranking: the sessions share the retriever
    refusal = ModelRefusal(
        _model_name(retriever, model_name),
        retriever if isinstance(retriever, Reloader) else None,
    )
    catalogue: _Catalogue | None = None
    if upstream.session is not None:
        try:
            toolset = Toolset([_core_tool(t) for t in upstream.tools])
            if retriever is None:
                retriever = make_retriever(DEFAULT_RETRIEVER).fit([], toolset)
            catalogue = _catalogue(
                _selector(toolset, retriever, config, strict=True),
                {t.name: t for t in upstream.tools},
            )
        except DTDRError as exc:
            upstream.session = None
            upstream.error = str(exc)
    search_k = config.search_k or config.k
    clients: dict[str, _Client] = {}  # by MCP session id ("" on stdio: one connection)
    bus = InMemorySubscriptionBus()
    stored = None if store is None else StoredSessions(store, search_k, lock)

    def live(ctx: ServerRequestContext[Any]) -> ProxySession:
        key = ""
        if per_connection:
            request = ctx.request
            headers = getattr(request, "headers", None)
            key = headers.get(MCP_SESSION_ID_HEADER, "") if headers is not None else ""
            if not key:
                raise _mcp_error(
                    "dtdr-agents mcp-proxy over streamable HTTP keeps each client's task in its "
                    f"MCP session, and this request has none (protocol {ctx.protocol_version}): "
                    "connect with the initialize handshake (protocol "
                    f"{HANDSHAKE_PROTOCOL_VERSIONS[-1]} or older)",
                    types.INVALID_REQUEST,
                )
        client = clients.get(key)
        if client is None:
            upstream.check()
            assert catalogue is not None
            client = _Client(ProxySession.over(catalogue, search_k=search_k, lock=lock))
            clients[key] = client
            if per_connection:  # on stdio, a 2026-07-28 client's requests close connections
                _forget_on_close(ctx, lambda: clients.pop(key, None))
        client.notifier = ctx.session  # the connection's channel, for change notifications
        upstream.check()
        return client.session

    async def session_of(
        ctx: ServerRequestContext[Any],
    ) -> tuple[str, ProxySession, SessionState | None]:
        """The request's session (and its saved state): from the store, or this process's."""
        if stored is None:
            session = live(ctx)
            refusal.check()
            return "", session, None
        key = session_key(ctx)
        upstream.check()
        assert catalogue is not None
        return key, *await stored.load(key, catalogue, refusal.rank)

    async def notify(notifiers: Sequence[Any]) -> None:
        """Tell these clients that their list of tools changed."""

        async def send(notifier: Any) -> None:
            with contextlib.suppress(Exception), anyio.move_on_after(config.timeout):
                await notifier.send_tool_list_changed()  # handshake-era clients

        async with anyio.create_task_group() as tg:
            for notifier in notifiers:  # a client that cannot take it still polls
                tg.start_soon(send, notifier)
        await bus.publish(ToolsListChanged())  # 2026-07-28 clients' listen streams

    async def notify_all() -> None:
        await notify([c.notifier for c in list(clients.values())])

    async def on_list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=(await session_of(ctx))[1].list_tools())

    async def on_call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        key, sess, saved = await session_of(ctx)
        args = dict(params.arguments or {})
        answers = () if saved is None else saved.answers
        if params.name in (SET_TASK, SEARCH_TOOLS):
            change, arg = (
                (sess.set_task, "request") if params.name == SET_TASK else (sess.search, "query")
            )
            async with sess.lock:
                before = sess.exposed()
                result = _text(await refusal.rank(change, args.get(arg)))
                after = sess.exposed()
        else:
            call = call_digest(params.name, args)
            retried = None if saved is None else saved.answer(ctx.request_id, call)
            if retried is not None:  # recorded with its answer: not forwarded again
                return answered(retried, params.name)
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
                await refusal.rank_after_call(sess.record_call, name)
                after = sess.exposed()
            answers = with_answer(answers, ctx.request_id, call, result)
        if stored is not None:  # stateless: nothing stays here, no channel to notify on
            await stored.save(key, sess, answers)  # a call and its answer, both or neither
        elif after != before:
            await notify([ctx.session])
        return result

    def retarget(toolset: Toolset, tools: Sequence[types.Tool]) -> _Catalogue:
        """The catalogue of the upstream's new `tools` (in a worker thread, under the lock)."""
        assert catalogue is not None and retriever is not None
        selector = _selector(toolset, retriever, config, strict=False)
        return _catalogue(selector, {t.name: t for t in tools}, catalogue.listed)

    def move(sessions: Sequence[ProxySession], new: _Catalogue) -> None:
        """Re-rank each session's task over the new catalogue (in a worker thread).

        A ranking that fails refuses the model (the next request says why), not the upstream.
        """
        for session in sessions:
            if session.state.catalogue is not new and refusal.reason is None:
                try:
                    session.use_catalogue(new)
                except MCPError:
                    raise
                except Exception as exc:
                    refusal.refuse(exc)

    async def follow_upstream() -> None:
        nonlocal catalogue
        async for _ in upstream.changes:
            try:
                tools = await upstream.refresh()
            except MCPError:  # the upstream is now unusable: every request says why
                await notify_all()
                return
            try:
                toolset = Toolset([_core_tool(t) for t in tools])
                async with lock:  # no ranking runs while the retriever is retargeted
                    before = {id(c): c.session.list_tools() for c in list(clients.values())}
                    new = await anyio.to_thread.run_sync(retarget, toolset, tools)
                    catalogue = new  # sessions opened from now on start on it
                    now = list(clients.values())
                    await anyio.to_thread.run_sync(move, [c.session for c in now], new)
                    changed = [
                        c.notifier for c in now if c.session.list_tools() != before.get(id(c))
                    ]
            except DTDRError as exc:
                upstream.session = None
                upstream.error = f"the upstream's new list of tools cannot be used: {exc}"
                await notify_all()
                return
            if changed:
                await notify(changed)

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
    return _Built(
        server=server,
        follow_upstream=follow_upstream if catalogue is not None else None,
        sessions=clients,
        reloader=retriever if isinstance(retriever, Reloader) else None,
    )


def _model_name(retriever: ToolRetriever | Reloader[Any] | None, given: str | None) -> str:
    """How messages name the model the proxy serves."""
    if given is not None:
        return given
    if isinstance(retriever, Reloader):
        return str(retriever.root)
    if retriever is None:
        return f"zero-shot {DEFAULT_RETRIEVER} (no --model)"
    return f"{type(retriever).__name__} retriever"


async def _poll_models(reloader: Reloader[Any], interval: float) -> None:
    """Look for a newly published version every `interval` seconds (outside any step).

    A version taken up serves from the next step on (`StepSelector` with a `Reloader`); one
    that does not load is refused (`Reloader.reload`) and the running version keeps serving.
    """
    refused = set(reloader.refused)
    while True:
        await anyio.sleep(interval)
        running = reloader.version.name
        await anyio.to_thread.run_sync(reloader.reload)
        if reloader.version.name != running:
            _say(f"serving {reloader.version.name} of {reloader.root} from the next step")
        for name in set(reloader.refused) - refused:
            _say(f"{name} is refused ({reloader.refused[name]}); {running} keeps serving")
        refused = set(reloader.refused)


async def _expire_sessions(store: SessionStore, ttl: float, interval: float) -> None:
    """Delete the sessions not written for `ttl` seconds, now and every `interval` seconds.

    A failure of the store is said once (until an expiry works again) and tried again.
    """
    failing = False
    while True:
        try:
            gone = await anyio.to_thread.run_sync(store.expire, ttl)
        except StoreError as exc:
            if not failing:
                _say(f"expiring idle sessions failed (tried again every {interval:g} s): {exc}")
            failing = True
        else:
            failing = False
            if gone:
                _say(f"expired {gone} session(s) not written for {ttl:g} s")
        await anyio.sleep(interval)


async def _run_beside(
    built: _Built,
    reload_interval: float | None,
    main: Any,
    beside: Sequence[Callable[[], Coroutine[Any, Any, None]]] = (),
) -> None:
    """Run `main()` with the upstream follower, the model poller and `beside` beside it."""
    async with anyio.create_task_group() as tg:
        for task in beside:
            tg.start_soon(task)
        if built.follow_upstream is not None:
            tg.start_soon(built.follow_upstream)
        if built.reloader is not None and reload_interval is not None:
            tg.start_soon(_poll_models, built.reloader, reload_interval)
        await main()
        tg.cancel_scope.cancel()


async def serve_proxy(
    retriever: ToolRetriever | Reloader[Any] | None,
    upstream_argv: Sequence[str],
    read_stream: ReadStream[SessionMessage | Exception],
    write_stream: WriteStream[SessionMessage],
    config: ProxyConfig,
    *,
    env: Mapping[str, str] | None = None,
    reload_interval: float | None = None,
    model_name: str | None = None,
    load: Callable[[], ToolRetriever] | None = None,
) -> None:
    """Start the upstream and serve one client on the given streams until it disconnects.

    `retriever` None fits a zero-shot default retriever on the upstream's tools; a
    `Reloader` (`published_models`) is polled every `reload_interval` seconds. `model_name`
    (e.g. the model's folder) names the model in errors. `load` (in place of `retriever`)
    loads it in a background thread while the upstream starts (`run_proxy`'s way); its
    error is raised once the upstream has started, and the upstream is ended.
    """
    argv = _upstream_argv(upstream_argv)
    async with AsyncExitStack() as stack:
        upstream, retriever = await _start(stack, argv, config, env, retriever, load)
        built = _build(upstream, retriever, config, model_name=model_name)
        options = built.server.create_initialization_options(
            NotificationOptions(tools_changed=True)
        )
        await _run_beside(
            built,
            reload_interval,
            lambda: built.server.run(read_stream, write_stream, options),
        )


async def serve_proxy_http(
    retriever: ToolRetriever | Reloader[Any] | None,
    upstream_argv: Sequence[str],
    sock: socket.socket,
    config: ProxyConfig,
    *,
    env: Mapping[str, str] | None = None,
    reload_interval: float | None = None,
    path: str = "/mcp",
    json_response: bool = True,
    ready: Callable[[str], None] | None = None,
    session_store: SessionStore | None = None,
    model_name: str | None = None,
    session_ttl: float = DEFAULT_TTL,
    expire_interval: float = DEFAULT_EXPIRE_INTERVAL,
    load: Callable[[], ToolRetriever] | None = None,
) -> None:
    """Start the upstream and serve many clients over streamable HTTP on `sock` until stopped.

    Each MCP session (the SDK's `StreamableHTTPSessionManager`, run by uvicorn) gets its own
    `ProxySession`; all share the one upstream connection, catalogue and retriever.
    With `json_response` (the default) a request is answered with plain JSON rather than an
    SSE stream (about twice the throughput in the load bench); change notifications travel
    on the session's GET stream either way. `ready(url)` is called once the server accepts
    connections. SIGINT/SIGTERM stop it.

    With a `session_store`, the SDK runs in stateless mode and each request names its session
    in the `SESSION_HEADER` header, whose state lives in the store (see `_build`): replicas
    on one store answer a session alike, behind any load balancer. The sessions not written
    for `session_ttl` seconds are deleted from the store at start and every
    `expire_interval` seconds (`SessionStore.expire`). `load` is as `serve_proxy`'s.
    """
    import uvicorn  # a dependency of mcp

    _check_seconds(session_ttl=session_ttl, expire_interval=expire_interval)

    argv = _upstream_argv(upstream_argv)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    async with AsyncExitStack() as stack:
        upstream, retriever = await _start(stack, argv, config, env, retriever, load)
        if upstream.session is None:
            _say(f"the upstream is unusable; every request will say why: {upstream.error}")
        built = _build(
            upstream,
            retriever,
            config,
            per_connection=True,
            store=session_store,
            model_name=model_name,
        )
        app = built.server.streamable_http_app(
            streamable_http_path=path,
            host=host,
            json_response=json_response,
            stateless_http=session_store is not None,
        )
        web = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
        )

        async def main() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(web.serve, [sock])
                while not web.started and not web.should_exit:
                    await anyio.sleep(0.02)
                if web.started and ready is not None:
                    ready(f"http://{shown}:{port}{path}")

        beside = []
        if session_store is not None:
            beside.append(partial(_expire_sessions, session_store, session_ttl, expire_interval))
        await _run_beside(built, reload_interval, main, beside)


TRANSPORTS = ("stdio", "streamable-http")


async def _start(
    stack: AsyncExitStack,
    argv: Sequence[str],
    config: ProxyConfig,
    env: Mapping[str, str] | None,
    retriever: ToolRetriever | Reloader[Any] | None,
    load: Callable[[], ToolRetriever] | None,
) -> tuple[Upstream, ToolRetriever | Reloader[Any] | None]:
    """Start the upstream, the retriever's encoder (or `load` and then it) loading beside it.

    A load that fails ends the upstream first, then raises its own error (not wrapped in
    the upstream connection's task group).
    """
    loading = _Loading(load) if load is not None else None
    if loading is None:
        _warm_encoder(retriever)  # while the upstream starts
    connection = AsyncExitStack()
    upstream = await Upstream.start(connection, argv, timeout=config.timeout, env=env)
    if loading is not None:
        try:
            retriever = await loading.loaded()
        except BaseException:
            await connection.aclose()
            raise
    stack.push_async_exit(connection)
    return upstream, retriever


def _warm_encoder(retriever: ToolRetriever | Reloader[Any] | None) -> threading.Thread | None:
    """Load `retriever`'s encoder in a background thread; the thread, or None (nothing to load).

    The proxy calls it before it starts the upstream, so that the model loads while the
    upstream server starts and the client initializes, not in the first ``set_task``. A load
    that fails here fails again, and is reported, where a request needs the encoder.
    """
    if _encoder_of(retriever) is None:
        return None
    thread = threading.Thread(
        target=_warm, args=(retriever,), name="dtdr-encoder-warm-up", daemon=True
    )
    thread.start()
    return thread


def _encoder_of(retriever: object) -> Any:
    encoder = getattr(retriever, "encoder_", None)
    return encoder if callable(getattr(encoder, "encode", None)) else None


def _warm(retriever: object) -> None:
    """Load `retriever`'s encoder now (its first `encode`); a failure is only logged."""
    encoder = _encoder_of(retriever)
    if encoder is None:
        return
    try:
        encoder.encode(["warm-up"])
    except Exception as exc:  # reported by the request that needs the encoder
        logger.debug("encoder warm-up failed: %s", exc)


class _Loading:
    """A retriever loading in a background thread, then its encoder, while the upstream starts.

    The model's restore (BM25's index, its imports) and the encoder's load take about as long
    as an upstream server's start; done beside it, the first ``set_task`` waits for the
    longer of the two rather than for both.
    """

    def __init__(self, load: Callable[[], ToolRetriever]) -> None:
        self._load = load
        self._done = threading.Event()
        self._value: ToolRetriever | None = None
        self._error: BaseException | None = None
        thread = threading.Thread(target=self._run, name="dtdr-model-load", daemon=True)
        thread.start()

    def _run(self) -> None:
        try:
            self._value = self._load()
        except BaseException as exc:  # raised by `loaded`, in the proxy's task
            self._error = exc
            return
        finally:
            self._done.set()
        _warm(self._value)  # the encoder, after the model: `loaded` does not wait for it

    async def loaded(self) -> ToolRetriever:
        """The loaded retriever (its encoder may still be loading), or the load's error."""
        await anyio.to_thread.run_sync(self._done.wait)
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


def _sole_error(group: BaseExceptionGroup[Any]) -> BaseException | None:
    """The one exception inside `group` (nested groups unwrapped), or None when there are more.

    So that, for example, a model that fails to load once the upstream has started is said
    as itself (`ModelLoadError`, which the command line reports in a line), not as a group.
    """
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else None


def _check_seconds(**options: Any) -> None:
    """Each option a number of seconds > 0, or a ValueError naming it."""
    for option, value in options.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(f"{option} must be > 0 seconds, got {value!r}")


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
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    reload_interval: float = 5.0,
    session_store: str | Path | None = None,
    session_ttl: float = DEFAULT_TTL,
    expire_interval: float = DEFAULT_EXPIRE_INTERVAL,
) -> None:
    """Run the proxy over this process's stdin/stdout (or streamable HTTP) until stopped.

    Args:
        model_dir: A retriever saved with `save` / ``dtdr-agents fit``; the upstream's tools
            may differ from its catalogue (new tools are ranked by a query-similarity prior).
            A publish folder (``DIR`` or ``DIR/latest``, `dtdr_agents.store.publish`) serves
            its current version and takes up newly published ones between steps.
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
        transport: ``"stdio"`` (one client) or ``"streamable-http"`` (many clients, each
            MCP session with its own task, at ``http://HOST:PORT/mcp``).
        host: The address to listen on (streamable HTTP).
        port: The port to listen on (streamable HTTP; 0 picks a free one, printed on stderr).
        reload_interval: Seconds between looks for a newly published version.
        session_store: A run store URL (`dtdr_agents.store.SessionStore`) that keeps each
            session's state (streamable HTTP only): clients name their session in the
            `SESSION_HEADER` header, and replicas on the same store serve any session.
            A retried call (same request id, tool and arguments) gets its recorded answer
            (`mcp_dtdr.stored`).
        session_ttl: Seconds a stored session may go unwritten before it is deleted
            (default `DEFAULT_TTL`, 30 minutes: the SDK's idle time-out of a session).
        expire_interval: Seconds between two deletions of such sessions (default
            `DEFAULT_EXPIRE_INTERVAL`, one minute).

    Raises:
        ModelLoadError: The model folder cannot be loaded.
        PublishError: The publish folder has no version, or its current one does not load.
        StoreError: The session store cannot be opened (named without its password).
        ValueError: Invalid options (transport, port, intervals, time-to-live, a session store
            on stdio),
            an address that cannot be bound, or an empty upstream command.
        TypeError: `upstream_argv` is a single string instead of a list.
    """
    argv = _upstream_argv(upstream_argv)
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {list(TRANSPORTS)}, got {transport!r}")
    if isinstance(always_include, str):  # tuple() would split it into letters
        raise ValueError(f"always_include must be a list of tool names, got {always_include!r}")
    interval = reload_interval
    _check_seconds(
        reload_interval=interval, session_ttl=session_ttl, expire_interval=expire_interval
    )
    config = ProxyConfig(
        k=k,
        always_include=tuple(always_include),
        timeout=timeout,
        search_k=search_k,
        cache=cache,
        policy=policy,
    )
    if session_store is not None and transport != "streamable-http":
        raise ValueError("session_store is an option of the streamable-http transport")
    sessions = None
    if session_store is not None:
        from dtdr_agents.store.sessions import SessionStore

        sessions = SessionStore(session_store)
    try:
        sock = listen(host, port) if transport == "streamable-http" else None
    except ValueError:
        if sessions is not None:
            sessions.close()
        raise
    try:
        retriever: ToolRetriever | Reloader[Any] | None = None
        load: Callable[[], ToolRetriever] | None = None
        name = None if model_dir is None else str(model_dir)
        if model_dir is not None:
            root = publish_root(model_dir)
            if root is None:
                # read and verified now (a folder that cannot load is said before anything
                # starts), restored while the upstream starts
                load = partial(load_retriever, read_model(model_dir))
            else:
                retriever = published_models(root)

        async def main() -> None:
            if sessions is not None:
                _say(
                    f"session state in {sessions.where}: clients name their session in the "
                    f"{SESSION_HEADER} header"
                )
            if sock is None:
                async with stdio_server() as (read, write):
                    await serve_proxy(
                        retriever,
                        argv,
                        read,
                        write,
                        config,
                        env=env,
                        reload_interval=interval,
                        model_name=name,
                        load=load,
                    )
            else:
                await serve_proxy_http(
                    retriever,
                    argv,
                    sock,
                    config,
                    env=env,
                    reload_interval=interval,
                    ready=lambda url: _say(f"serving MCP over streamable HTTP at {url}"),
                    session_store=sessions,
                    model_name=name,
                    session_ttl=session_ttl,
                    expire_interval=expire_interval,
                    load=load,
                )

        try:
            anyio.run(main, backend_options=_loop_options(sock is not None))
        except BaseExceptionGroup as group:  # the SDK's stdio server runs a task group
            alone = _sole_error(group)
            if alone is None:
                raise
            raise alone from None
    finally:
        if sock is not None:
            sock.close()
        if sessions is not None:
            sessions.close()
