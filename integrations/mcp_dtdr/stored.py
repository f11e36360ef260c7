"""Sessions kept in a store: each request names its session, whose state is loaded and saved.

With ``--session-store URL`` the streamable HTTP proxy runs the SDK in stateless mode and keeps
nothing of a session in its process: every request names its session in the `SESSION_HEADER`
header; the session's request, calls and found tools are loaded from the store
(`dtdr_agents.store.SessionStore`), its next step selected again (`ProxySession.restore`),
and the state saved after ``set_task``, ``search_tools`` and each forwarded call. Replicas on
one store therefore answer a session alike, whichever of them a load balancer picks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext

from dtdr_agents.store.errors import StoreError
from dtdr_agents.store.sessions import MAX_KEY, SessionState, SessionStore
from mcp_dtdr.session import ProxySession, _Catalogue
from mcp_dtdr.upstream import _mcp_error

SESSION_HEADER = "X-Dtdr-Session"
"""The request header that names the client's session when its state lives in a store."""

T = TypeVar("T")
Ranking = Callable[..., Awaitable[Any]]
"""Runs a ranking: ``await rank(work, *args)``."""


def session_key(ctx: ServerRequestContext[Any]) -> str:
    """The request's `SESSION_HEADER`, or an INVALID_REQUEST error naming the header."""
    headers = getattr(ctx.request, "headers", None)
    key = headers.get(SESSION_HEADER, "") if headers is not None else ""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY:
        raise _mcp_error(
            "dtdr-agents mcp-proxy keeps sessions in a store (--session-store): every request "
            f"must name its session in the {SESSION_HEADER} header (1 to {MAX_KEY} characters, "
            f"the same on every request of the session), got {key!r}",
            types.INVALID_REQUEST,
        )
    return key


@dataclass
class StoredSessions:
    """Load and save the sessions of requests in `store`.

    Attributes:
        store: The session store.
        search_k: Tools returned by ``search_tools``.
        lock: The lock held around every ranking (the sessions share the retriever).
    """

    store: SessionStore
    search_k: int
    lock: anyio.Lock

    async def _run(self, work: Callable[[], T]) -> T:
        """`work()` on the store in a worker thread; a store failure is an MCP error."""
        try:
            return await anyio.to_thread.run_sync(work)
        except StoreError as exc:
            raise _mcp_error(f"the session store failed: {exc}", types.INTERNAL_ERROR) from None

    async def load(
        self, key: str, catalogue: _Catalogue, rank: Ranking = anyio.to_thread.run_sync
    ) -> ProxySession:
        """The session `key` over `catalogue`, its next step selected (a new one if unknown).

        `rank(work, *args)` runs the selection (default: in a worker thread; the proxy's
        `ModelRefusal.rank` refuses a model that fails).
        """
        saved = await self._run(lambda: self.store.load(key)) or SessionState()
        session = ProxySession.over(catalogue, search_k=self.search_k, lock=self.lock)
        async with self.lock:
            await rank(session.restore, saved.request, saved.history, saved.found)
        return session

    async def save(self, key: str, session: ProxySession) -> None:
        """Write the session's state under `key` (the last write wins)."""
        state = SessionState(session.request, session.history, session.found)
        await self._run(lambda: self.store.save(key, state))
