"""What an MCP proxy session keeps between requests (`SessionState`, `Answer`), without SQLAlchemy.

`dtdr_agents.store.sessions.SessionStore` keeps these in the run store; the proxy builds and
reads them on every request, so they live apart from the database layer: a proxy that keeps
its sessions in memory (stdio, or streamable HTTP without a store) never loads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dtdr_agents.store.session_limits import MAX_ANSWER_CHARS, MAX_ANSWERS

MAX_KEY = 256
"""The longest session key the store keeps."""


def _names(value: Any, field: str) -> tuple[str, ...]:
    """`value` as a tuple of non-empty names, or a ValueError naming `field`."""
    if isinstance(value, str) or not isinstance(value, tuple | list):
        raise ValueError(f"SessionState.{field} must be a tuple of tool names, got {value!r}")
    if not all(isinstance(n, str) and n for n in value):
        raise ValueError(f"SessionState.{field} must hold non-empty tool names, got {value!r}")
    return tuple(value)


@dataclass(frozen=True)
class Answer:
    """The answer to one forwarded call, kept so that a retry of the call gets it again.

    Attributes:
        request_id: The client's request id (JSON-RPC: an integer or a string).
        call: What was called (a digest of the tool's name and arguments): a retry is the same
            call under the same request id.
        result: The answer as JSON, or None when it was longer than `MAX_ANSWER_CHARS`.
        size: The answer's length as JSON, in characters.
    """

    request_id: int | str
    call: str
    result: dict[str, Any] | None
    size: int = 0

    def __post_init__(self) -> None:
        rid = self.request_id
        if isinstance(rid, bool) or not isinstance(rid, int | str):
            raise ValueError(f"Answer.request_id must be an integer or a string, got {rid!r}")
        if not isinstance(self.call, str) or not self.call:
            raise ValueError(f"Answer.call must be a non-empty string, got {self.call!r}")
        if self.result is not None and not isinstance(self.result, dict):
            raise ValueError(f"Answer.result must be a JSON object or None, got {self.result!r}")

    @classmethod
    def of(cls, request_id: int | str, call: str, result: dict[str, Any]) -> Answer:
        """The answer to keep: `result` itself, or None when it is too long to keep."""
        size = len(json.dumps(result, separators=(",", ":")))
        return cls(request_id, call, result if size <= MAX_ANSWER_CHARS else None, size)

    def _row(self) -> list[Any]:
        return [self.request_id, self.call, self.result, self.size]


def _answers(value: Any) -> tuple[Answer, ...]:
    if isinstance(value, str) or not isinstance(value, tuple | list):
        raise ValueError(f"SessionState.answers must be a tuple of Answer, got {value!r}")
    if not all(isinstance(a, Answer) for a in value):
        raise ValueError(f"SessionState.answers must hold Answer objects, got {value!r}")
    return tuple(value)[-MAX_ANSWERS:]


@dataclass(frozen=True)
class SessionState:
    """What one proxy session remembers between requests.

    Attributes:
        request: The session's request (its task), None before ``set_task``.
        history: The upstream tools called in the current task, in order.
        found: The tools the last ``search_tools`` found (callable until the next search).
        answers: The answers to the session's last forwarded calls, oldest first (at most
            `MAX_ANSWERS`; older ones are dropped).
    """

    request: str | None = None
    history: tuple[str, ...] = ()
    found: tuple[str, ...] = ()
    answers: tuple[Answer, ...] = ()

    def __post_init__(self) -> None:
        if self.request is not None and not isinstance(self.request, str):
            raise ValueError(f"SessionState.request must be a string or None, got {self.request!r}")
        object.__setattr__(self, "history", _names(self.history, "history"))
        object.__setattr__(self, "found", _names(self.found, "found"))
        object.__setattr__(self, "answers", _answers(self.answers))

    def answer(self, request_id: int | str | None, call: str) -> Answer | None:
        """The kept answer to `call` under `request_id` (a retried call), or None."""
        if request_id is None:
            return None
        for kept in reversed(self.answers):
            if kept.request_id == request_id and type(kept.request_id) is type(request_id):
                return kept if kept.call == call else None
        return None


def _check_key(key: Any) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY:
        raise ValueError(
            f"session key must be a non-empty string of at most {MAX_KEY} characters, got {key!r}"
        )
    return key


__all__ = ["MAX_KEY", "Answer", "SessionState"]
