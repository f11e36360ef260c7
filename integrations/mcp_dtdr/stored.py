"""Sessions kept in a store: each request names its session, whose state is loaded and saved.

With ``--session-store URL`` the streamable HTTP proxy runs the SDK in stateless mode and keeps
nothing of a session in its process: every request names its session in the `SESSION_HEADER`
header; the session's request, calls and found tools are loaded from the store
(`dtdr_agents.store.SessionStore`), its next step selected again (`ProxySession.restore`),
and the state saved after ``set_task``, ``search_tools`` and each forwarded call. Replicas on
one store therefore answer a session alike, whichever of them a load balancer picks.

A forwarded call is saved together with its answer (one upsert: both or neither), keyed by
the session and the client's request id (`dtdr_agents.store.sessions.Answer`). A call that
comes again with the same request id, tool and arguments is a retry (MCP forbids reusing a
request id within a session): it gets the recorded answer, and is neither forwarded again
nor recorded twice, whichever replica it reaches. So a client whose proxy was killed after
the call was recorded, but before the answer reached it, may simply retry. A session keeps
the answers of its last `MAX_ANSWERS` calls; an answer longer than `MAX_ANSWER_CHARS` is kept
without its content, and its retry gets an MCP error saying the call already ran.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext

from dtdr_agents.store.errors import StoreError
from dtdr_agents.store.session_limits import MAX_ANSWER_CHARS, MAX_ANSWERS
from dtdr_agents.store.session_state import MAX_KEY, Answer, SessionState
from mcp_dtdr.session import ProxySession, _Catalogue
from mcp_dtdr.upstream import _mcp_error

if TYPE_CHECKING:  # the database layer: loaded only when a session store is opened
    from dtdr_agents.store.sessions import SessionStore

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
    ) -> tuple[ProxySession, SessionState]:
        """The session `key` over `catalogue`, its next step selected (a new one if unknown).

        Returns the session and its saved state (for the answers it keeps). `rank(work,
        *args)` runs the selection (default: in a worker thread; the proxy's
        `ModelRefusal.rank` refuses a model that fails).
        """
        saved = await self._run(lambda: self.store.load(key)) or SessionState()
        session = ProxySession.over(catalogue, search_k=self.search_k, lock=self.lock)
        async with self.lock:
            await rank(session.restore, saved.request, saved.history, saved.found)
        return session, saved

    async def save(self, key: str, session: ProxySession, answers: tuple[Answer, ...] = ()) -> None:
        """Write the session's state and `answers` under `key` (the last write wins)."""
        state = SessionState(session.request, session.history, session.found, answers)
        await self._run(lambda: self.store.save(key, state))


def call_digest(name: str, arguments: Mapping[str, Any]) -> str:
    """What identifies a call besides its request id: a digest of its tool and arguments."""
    text = json.dumps([name, arguments], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def answered(answer: Answer, name: str) -> types.CallToolResult:
    """The recorded answer of a retried call of tool `name`.

    Raises:
        MCPError: The answer was too long to keep (the call is not run a second time).
    """
    if answer.result is None:
        raise _mcp_error(
            f"tools/call {name!r} with request id {answer.request_id!r} already ran in this "
            f"session; its answer ({answer.size} characters) was longer than the "
            f"{MAX_ANSWER_CHARS} kept, so it cannot be sent again, and the call is not run twice",
            types.INTERNAL_ERROR,
        )
    return types.CallToolResult.model_validate(answer.result)


def with_answer(
    answers: tuple[Answer, ...], request_id: int | str | None, call: str, result: Any
) -> tuple[Answer, ...]:
    """`answers` and the answer to this call (the last `MAX_ANSWERS`; none without an id)."""
    if request_id is None:
        return answers
    kept = Answer.of(
        request_id, call, result.model_dump(mode="json", by_alias=True, exclude_none=True)
    )
    return (*answers, kept)[-MAX_ANSWERS:]
