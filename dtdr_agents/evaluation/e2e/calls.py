"""Sending the requests of an end-to-end run: selection steps, then parameter filling.

Every request goes through `OpenAIChat.acreate` (its retry policy and time-out) under a
concurrency limit; a failure is recorded in the step's row (``kind`` "error", ``error_type``),
never raised, and never cached. Answered steps are appended to the step cache as they come.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dtdr_agents.evaluation.e2e.arguments import score_arguments
from dtdr_agents.evaluation.e2e.cache import StepCache, step_key
from dtdr_agents.evaluation.e2e.metrics import classify_reply, read_arguments
from dtdr_agents.evaluation.e2e.protocol import END_TOOL, ArgumentRequest, E2EStep, StepRequest
from dtdr_agents.foundation.chat import OpenAIChat
from dtdr_agents.foundation.errors import ChatModelError, DTDRError
from dtdr_agents.foundation.progress import Progress
from dtdr_agents.foundation.retry import status_code

if TYPE_CHECKING:
    from dtdr_agents.evaluation.e2e.harness import E2EPlan

ARGUMENTS_CELL = "<arguments>"
"""The ``retriever`` of a cached parameter-filling answer (shared by every cell)."""


class StepNotCachedError(DTDRError, LookupError):
    """A replay (no endpoint) met a step whose answer is not in the step cache."""


class EndpointUnreachableError(DTDRError, ConnectionError):
    """The endpoint stayed unreachable after a step's retries; the run stopped."""


class ReplayChat:
    """A stand-in for the endpoint in a cache-only replay: every answer must be cached.

    Args:
        model: The model name the answers were cached under (part of every step key).
    """

    base_url: str | None = None

    def __init__(self, model: str) -> None:
        if not model:
            raise ValueError("a replay needs the model name the step cache was written with")
        self.model = model

    async def acreate(self, messages: Any, **kwargs: Any) -> Any:
        """Never answers: a replay asks nothing (`run_requests` checks the cache first)."""
        raise StepNotCachedError("a replay sends no request")

    async def aclose(self) -> None:
        """Nothing to close."""


def _missing(what: str, model: str, cache: StepCache | None) -> StepNotCachedError:
    where = f"the step cache {cache.path}" if cache is not None else "no step cache"
    return StepNotCachedError(
        f"replay: {what} is not in {where} (model {model!r}); a replay sends no request: "
        "run with --base-url to answer it, or check --model and the dataset options"
    )


def argument_key(model: str, req: ArgumentRequest) -> str:
    """The step-cache key of a parameter-filling answer."""
    return step_key(model, ARGUMENTS_CELL, req.function, req.fingerprint)


def error_type(exc: BaseException) -> str:
    """A short class of a failed request.

    One of endpoint (an HTTP 200 that is not a completion), unreachable, timeout,
    http_<status>, malformed, other.
    """
    cause: BaseException = exc
    while isinstance(cause, ChatModelError) and cause.__cause__ is not None:
        cause = cause.__cause__
    names = {cls.__name__ for cls in type(cause).__mro__}
    if "EndpointFaultError" in names:
        return "endpoint"
    code = status_code(cause)
    if "APITimeoutError" in names or isinstance(cause, TimeoutError):
        return "timeout"
    if code is not None:
        return f"http_{code}"
    if names & {"APIConnectionError", "ConnectError", "ConnectionError"}:
        return "unreachable"
    if isinstance(cause, ValueError) or "APIResponseValidationError" in names:
        return "malformed"
    return "other"


def _row(req: StepRequest, model: str, key: str) -> dict[str, Any]:
    return {
        "key": key,
        "model": model,
        "retriever": req.retriever,
        "mode": req.mode,
        "plan": req.step.plan,
        "step": req.step.step,
        "plan_id": req.step.plan_id,
        "is_end": req.step.is_end,
        "acceptable": sorted(req.step.acceptable),
        "n_bound": len(req.bound),
        "prompt_tokens": req.prompt_tokens,
        "variable_tokens": req.variable_tokens,
        "tool_tokens": req.tool_tokens,
        **req.recorded(),  # the prompt answered, for a replay elsewhere (RECORDED_FIELDS)
    }


async def _timed(
    row: dict[str, Any],
    semaphore: asyncio.Semaphore,
    call: Callable[[], Awaitable[Any]],
    **on_error: Any,
) -> tuple[bool, Any]:
    """Await `call()` under `semaphore`, recording its latency in `row`.

    A failure is recorded in `row` (``kind`` "error", the `on_error` fields, ``error_type``,
    ``error``), never raised. Returns whether the call answered, and its answer.
    """
    async with semaphore:
        start = time.perf_counter()
        try:
            response = await call()
        except Exception as exc:  # every failure is recorded per step, never raised
            row.update(
                kind="error",
                **on_error,
                error_type=error_type(exc),
                error=str(exc)[:500],
                latency_ms=(time.perf_counter() - start) * 1000.0,
            )
            return False, None
        row["latency_ms"] = (time.perf_counter() - start) * 1000.0
    return True, response


async def _ask(
    req: StepRequest,
    chat: OpenAIChat | ReplayChat,
    key: str,
    semaphore: asyncio.Semaphore,
    catalogue: frozenset[str],
    request_kwargs: Mapping[str, Any],
    text_ends_plan: bool,
) -> dict[str, Any]:
    row = _row(req, chat.model, key)
    answered, response = await _timed(
        row,
        semaphore,
        lambda: chat.acreate(req.messages, tools=req.tools, **request_kwargs),
        correct=False,
        called=None,
    )
    if answered:
        row.update(
            classify_reply(
                response,
                bound=req.bound,
                catalogue=catalogue,
                acceptable=req.step.acceptable,
                end_tool=END_TOOL,
                text_ends_plan=text_ends_plan,
            )
        )
    return row


async def _drain(
    tasks: Sequence[asyncio.Future[dict[str, Any]]],
    progress: Progress,
    label: str,
    cache: StepCache | None,
) -> AsyncGenerator[dict[str, Any], None]:
    """The rows of `tasks` as they finish; answered ones are appended to `cache`.

    Every task still running is cancelled when the caller stops (an interruption, an error).
    """
    try:
        for next_done in progress(asyncio.as_completed(tasks), label, len(tasks)):
            row = await next_done
            if cache is not None and row["kind"] != "error":
                cache.add(row)
            yield row
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _check_stop(
    row: Mapping[str, Any],
    stop_on: frozenset[str],
    chat: OpenAIChat | ReplayChat,
    cache: StepCache | None,
    answered: int,
) -> None:
    """Raise `EndpointUnreachableError` when `row` failed with an error type in `stop_on`."""
    if row.get("kind") != "error" or row.get("error_type") not in stop_on:
        return
    where = f"{row['retriever']}/{row['mode']} plan {row['plan']} step {row['step']}"
    kept = (
        f"{len(cache)} answered steps are in the step cache {cache.path} (kept: run the same "
        "command again to resume)"
        if cache is not None
        else "no step cache: nothing is kept"
    )
    raise EndpointUnreachableError(
        f"the endpoint {chat.base_url} is unreachable after the retries of {where} "
        f"({row.get('error')}); stopped after {answered} answer(s) in this run; {kept}"
    )


async def run_requests(
    plan: E2EPlan,
    chat: OpenAIChat | ReplayChat,
    cache: StepCache | None,
    concurrency: int,
    progress: Progress,
    request_kwargs: Mapping[str, Any],
    text_ends_plan: bool,
    stop_on: frozenset[str] = frozenset(),
) -> tuple[list[dict[str, Any]], int, int, int]:
    """Ask (or reuse from `cache`) every step of `plan`, then its parameter filling.

    With a `ReplayChat` nothing is asked: the first step (in the plan's order) missing from
    `cache` raises `StepNotCachedError` naming it. A failed step whose ``error_type`` is in
    `stop_on` stops the run (`EndpointUnreachableError`); answered steps stay cached.

    Returns the selection rows, the steps reused from the cache, the parameter-filling calls
    made and the parameter-filling answers reused.
    """
    rows: list[dict[str, Any]] = []
    todo: list[tuple[StepRequest, str]] = []
    for req in plan.requests:
        key = step_key(chat.model, req.retriever, req.mode, req.fingerprint)
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            rows.append(hit)
        else:
            todo.append((req, key))
    cached = len(rows)
    replay = isinstance(chat, ReplayChat)
    if todo and replay:
        req = todo[0][0]
        step = f" ({req.step.plan_id})" if req.step.plan_id else ""
        raise _missing(
            f"step {req.retriever}/{req.mode} plan {req.step.plan}{step} step {req.step.step} "
            f"(and {len(todo) - 1} more)",
            chat.model,
            cache,
        )
    if todo and isinstance(chat, OpenAIChat):
        _ = chat.async_client  # fail here, not per step, when the openai package is missing
    semaphore = asyncio.Semaphore(concurrency)
    catalogue = frozenset(plan.builder.api_catalogue.names)
    tasks = [
        asyncio.ensure_future(
            _ask(req, chat, key, semaphore, catalogue, request_kwargs, text_ends_plan)
        )
        for req, key in todo
    ]
    try:
        answered = 0
        async with contextlib.aclosing(_drain(tasks, progress, "e2e", cache)) as drained:
            async for row in drained:
                rows.append(row)
                _check_stop(row, stop_on, chat, cache, answered)
                answered += row["kind"] != "error"
        rows, arg_calls, arg_cached = await _fill_arguments(
            plan, chat, rows, cache, semaphore, progress, stop_on
        )
    finally:
        await chat.aclose()
    return rows, cached, arg_calls, arg_cached


def _needs_arguments(row: Mapping[str, Any], step: E2EStep) -> bool:
    """A correctly selected catalogue tool at a step with recorded arguments."""
    return (
        bool(row.get("correct"))
        and row.get("kind") in ("tool", "unbound")
        and step.gold_arguments is not None
        and not step.is_end
    )


async def _ask_arguments(
    req: ArgumentRequest, chat: OpenAIChat | ReplayChat, key: str, semaphore: asyncio.Semaphore
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "key": key,
        "model": chat.model,
        "retriever": ARGUMENTS_CELL,
        "mode": req.function,
        "plan": req.step.plan,
        "step": req.step.step,
        "function": req.function,
        "prompt_tokens": req.prompt_tokens,
    }
    answered, response = await _timed(
        row,
        semaphore,
        lambda: chat.acreate(req.messages, tools=req.tools, tool_choice=req.tool_choice),
    )
    if not answered:
        return row
    row.update(kind="arguments", **read_arguments(response, req.function))
    return row


async def _fill_arguments(
    plan: E2EPlan,
    chat: OpenAIChat | ReplayChat,
    rows: list[dict[str, Any]],
    cache: StepCache | None,
    semaphore: asyncio.Semaphore,
    progress: Progress,
    stop_on: frozenset[str] = frozenset(),
) -> tuple[list[dict[str, Any]], int, int]:
    """Ask (or reuse) the parameter filling of every correctly selected function and score it.

    Returns the selection rows, each with ``has_arguments`` and, where asked, ``args``
    (``{"match", "reason", "kind"}``, or ``{"error", "error_type"}``); the calls made; the answers
    reused from the cache.
    """
    builder = plan.builder
    steps = {(s.plan, s.step): s for s in builder.steps}
    wanted: dict[tuple[int, int, str], ArgumentRequest] = {}
    out: list[dict[str, Any]] = []
    for row in rows:
        step = steps[(int(row["plan"]), int(row["step"]))]
        row = {**row, "has_arguments": step.gold_arguments is not None}
        out.append(row)
        if _needs_arguments(row, step):
            ident = (step.plan, step.step, str(row["called"]))
            if ident not in wanted:
                wanted[ident] = builder.argument_request(step, str(row["called"]))
    answers: dict[tuple[int, int, str], dict[str, Any]] = {}
    todo: list[tuple[tuple[int, int, str], ArgumentRequest, str]] = []
    for ident, req in wanted.items():
        key = argument_key(chat.model, req)
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            answers[ident] = hit
        else:
            todo.append((ident, req, key))
    reused = len(answers)
    if todo and isinstance(chat, ReplayChat):
        (plan_i, step_i, function), _, _ = todo[0]
        raise _missing(
            f"the parameter filling of {function} at plan {plan_i} step {step_i} "
            f"(and {len(todo) - 1} more)",
            chat.model,
            cache,
        )
    tasks = [
        asyncio.ensure_future(_ask_arguments(req, chat, key, semaphore)) for _, req, key in todo
    ]
    answered = 0
    async with contextlib.aclosing(_drain(tasks, progress, "arguments", cache)) as drained:
        async for answer in drained:
            answers[(int(answer["plan"]), int(answer["step"]), str(answer["function"]))] = answer
            _check_stop({**answer, "mode": answer["function"]}, stop_on, chat, cache, answered)
            answered += answer["kind"] != "error"
    for row in out:
        step = steps[(int(row["plan"]), int(row["step"]))]
        if not _needs_arguments(row, step):
            continue
        answer = answers[(step.plan, step.step, str(row["called"]))]
        if answer["kind"] == "error":
            row["args"] = {"error": answer.get("error"), "error_type": answer.get("error_type")}
            continue
        score = score_arguments(
            answer.get("arguments"),
            step.gold_for(str(row["called"])),
            builder.schemas[str(row["called"])]["function"]["parameters"],
            step.labels,
        )
        row["args"] = {"match": score.match, "reason": score.reason, "kind": score.kind}
    return out, len(todo), reused


__all__ = [
    "ARGUMENTS_CELL",
    "EndpointUnreachableError",
    "ReplayChat",
    "StepNotCachedError",
    "argument_key",
    "error_type",
    "run_requests",
]
