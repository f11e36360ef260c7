"""The model endpoint of the live-agent benchmark: every answer cached by its request body.

Every contestant's chat model sends its chat-completions requests here (the LangChain side
plugs it in as an HTTP transport, `langchain_dtdr.agent_bench`). A request is answered from
the e2e step cache (`dtdr_agents.evaluation.e2e.StepCache`) when its key is there, the key
being the model, the contestant, the caller's role and a hash of the full request body; else
it is sent through `OpenAIChat.create` (retries with backoff on 429/5xx, time-outs, dropped
connections and endpoint faults, `dtdr_agents.foundation.retry`), and the answer is cached.
A request that still fails is never cached: the run is marked with the fault and the
benchmark exits non-zero. In a replay (`chat` None) a request missing from the cache is
answered by the answer recorded for the same call of the same run (contestant, role, plan and
the call's place in the run) and counted in `changed`: on another machine a near tie in a
floating-point ranking can change a request's body. A call the cache has no answer for at
all is a `StepNotCachedError` naming it.

The endpoint also enforces the step limit: the agent's model calls of a run are counted and
the one past the limit is refused with `StepLimitError` before anything is sent.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dtdr_agents.evaluation.e2e import StepCache, StepNotCachedError, error_type, step_key
from dtdr_agents.foundation.chat import OpenAIChat
from dtdr_agents.foundation.errors import DTDRError
from dtdr_agents.runtime.tokens import TokenCounter, get_token_counter

AGENT = "agent"
"""Role of the agent's own model calls (they count toward the step limit)."""

SELECTOR = "selector"
"""Role of a selection call made on the agent's behalf (LLMToolSelectorMiddleware)."""

ROLES = (AGENT, SELECTOR)


class StepLimitError(DTDRError):
    """The agent asked for one model call more than its run allows."""


def body_hash(body: Mapping[str, Any]) -> str:
    """SHA-256 of a request body as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def counted_prompt_tokens(body: Mapping[str, Any], counter: TokenCounter) -> int:
    """Tokens of a request's messages and tools as JSON, by `counter` (as e2e counts them)."""
    text = json.dumps(body.get("messages") or [], ensure_ascii=False)
    if body.get("tools"):
        text += json.dumps(body["tools"], ensure_ascii=False)
    if body.get("response_format"):
        text += json.dumps(body["response_format"], ensure_ascii=False)
    return counter.count(text)


@dataclass(frozen=True)
class ModelCall:
    """One model call of a run.

    Attributes:
        role: `AGENT` or `SELECTOR`.
        tools: Names of the tools the request bound.
        response: The chat completion (JSON).
        latency_ms: Time the endpoint took (recorded when first asked; retries included).
        prompt_tokens: The server's ``usage.prompt_tokens``, else the counted tokens.
        usage_reported: Whether `prompt_tokens` is the server's figure.
        cached: Answered from the cache rather than the server.
    """

    role: str
    tools: tuple[str, ...]
    response: dict[str, Any]
    latency_ms: float
    prompt_tokens: int
    usage_reported: bool
    cached: bool


@dataclass
class RunLog:
    """The model calls of one run, and how it ended at the endpoint."""

    contestant: str
    plan: int
    step_limit: int
    calls: list[ModelCall] = field(default_factory=list)
    limit_hit: bool = False
    fault: str | None = None
    missing: str | None = None
    changed: int = 0

    @property
    def agent_calls(self) -> list[ModelCall]:
        """The agent's own calls, in order."""
        return [c for c in self.calls if c.role == AGENT]


class BenchEndpoint:
    """Answers chat-completions request bodies from the cache or the server.

    Args:
        model: The model name (part of every cache key; sent with every request).
        cache: The step cache.
        chat: The client that reaches the server; None replays from `cache` alone.
        counter: Token counter for requests whose answer has no ``usage``.
    """

    def __init__(
        self,
        model: str,
        cache: StepCache,
        chat: OpenAIChat | None = None,
        *,
        counter: TokenCounter | None = None,
    ) -> None:
        if not model:
            raise ValueError("the benchmark needs a model name (it keys every cached answer)")
        self.model = model
        self.cache = cache
        self.chat = chat
        self.counter = counter or get_token_counter()
        self.current: RunLog | None = None
        self.changed = 0
        """Replayed calls whose request body was not the recorded one (see the module)."""
        self._recorded: dict[tuple[Any, ...], list[dict[str, Any]]] | None = None

    @property
    def replay(self) -> bool:
        """True when nothing is sent (answers come from the cache only)."""
        return self.chat is None

    def begin(self, contestant: str, plan: int, step_limit: int) -> RunLog:
        """Start logging the run of `contestant` on test plan `plan`."""
        self.current = RunLog(contestant, plan, step_limit)
        return self.current

    def end(self) -> RunLog:
        """Stop logging; the finished run's log."""
        if self.current is None:
            raise RuntimeError("no run in progress")
        log, self.current = self.current, None
        return log

    def complete(self, body: Mapping[str, Any], role: str = AGENT) -> dict[str, Any]:
        """The chat completion (JSON) answering request `body`.

        Raises:
            ValueError: A streaming request (``"stream": true``).
            StepLimitError: An agent call past the run's step limit (nothing sent).
            StepNotCachedError: A replay met a request missing from the cache.
            ChatModelError: The server still failed after the retries (not cached).
        """
        log = self.current
        if log is None:
            raise RuntimeError("BenchEndpoint.complete outside a run: call begin() first")
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        if body.get("stream"):
            raise ValueError(
                "the benchmark endpoint answers whole completions: build the chat model "
                "without streaming (its answers are cached as one JSON completion)"
            )
        if role == AGENT and len(log.agent_calls) >= log.step_limit:
            log.limit_hit = True
            raise StepLimitError(
                f"{log.contestant} on plan {log.plan}: step limit of {log.step_limit} model calls"
            )
        body = {**body, "model": self.model}
        key = step_key(self.model, log.contestant, role, body_hash(body))
        row = self.cache.get(key)
        if row is None and self.replay:
            row = self._recorded_call(log, role)
            if row is not None:
                log.changed += 1
                self.changed += 1
        if row is None:
            row = self._ask(body, key, role, log)
        log.calls.append(self._call(body, role, row))
        return dict(row["response"])

    def _recorded_call(self, log: RunLog, role: str) -> dict[str, Any] | None:
        """The cached answer to this call of this run, by its place (the cache is in order)."""
        if self._recorded is None:
            self._recorded = {}
            for row in self.cache.rows():
                where = (row.get("model"), row.get("contestant"), row.get("role"), row.get("plan"))
                self._recorded.setdefault(where, []).append(row)
        rows = self._recorded.get((self.model, log.contestant, role, log.plan), [])
        n = sum(c.role == role for c in log.calls)
        return rows[n] if n < len(rows) else None

    def _ask(self, body: dict[str, Any], key: str, role: str, log: RunLog) -> dict[str, Any]:
        if self.chat is None:
            log.missing = f"{log.contestant} on plan {log.plan}, {role} call {len(log.calls) + 1}"
            raise StepNotCachedError(
                f"replay: the answer to {log.missing} is not in the step cache "
                f"{self.cache.path} (model {self.model!r}); a replay sends no request"
            )
        messages = body["messages"]
        rest = {k: v for k, v in body.items() if k not in ("messages", "stream")}
        start = time.perf_counter()
        try:
            response = self.chat.create(messages, **rest)
        except Exception as exc:
            log.fault = error_type(exc)
            raise
        latency = (time.perf_counter() - start) * 1000.0
        dump = getattr(response, "model_dump", None)
        data = dump(mode="json") if callable(dump) else dict(response)
        row = {
            "key": key,
            "model": self.model,
            "contestant": log.contestant,
            "role": role,
            "plan": log.plan,
            "response": data,
            "latency_ms": latency,
        }
        self.cache.add(row)
        return {**row, "fresh": True}

    def _call(self, body: Mapping[str, Any], role: str, row: Mapping[str, Any]) -> ModelCall:
        usage = (row["response"].get("usage") or {}).get("prompt_tokens")
        reported = isinstance(usage, int) and not isinstance(usage, bool) and usage > 0
        tools = tuple(
            str((t.get("function") or {}).get("name", t.get("name", "")))
            for t in body.get("tools") or []
            if isinstance(t, Mapping)
        )
        return ModelCall(
            role=role,
            tools=tools,
            response=dict(row["response"]),
            latency_ms=float(row.get("latency_ms") or 0.0),
            prompt_tokens=usage
            if isinstance(usage, int) and reported
            else counted_prompt_tokens(body, self.counter),
            usage_reported=reported,
            cached=not row.get("fresh", False),
        )


__all__ = [
    "AGENT",
    "ROLES",
    "SELECTOR",
    "BenchEndpoint",
    "ModelCall",
    "RunLog",
    "StepLimitError",
    "body_hash",
    "counted_prompt_tokens",
]
