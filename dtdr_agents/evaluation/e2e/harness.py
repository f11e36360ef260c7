"""Run the end-to-end evaluation against an OpenAI-compatible endpoint (or dry-run it offline).

`prepare_e2e` fits the retrievers on the training plans (as `dtdr-agents bench` does) and builds
every request; `dry_run_report` counts them and their prompt tokens without any network;
`run_e2e` sends them with a concurrency limit, retries and a per-request time-out
(`dtdr_agents.foundation.retry` through `OpenAIChat`), caches each answered step in an append-only
JSONL file so an interrupted run resumes, and aggregates the metrics per (retriever, mode).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dtdr_agents.datasets.base import Dataset
from dtdr_agents.evaluation.e2e.arguments import score_arguments
from dtdr_agents.evaluation.e2e.cache import StepCache, step_key
from dtdr_agents.evaluation.e2e.metrics import classify_reply, read_arguments, summarize
from dtdr_agents.evaluation.e2e.protocol import (
    END_TOOL,
    NO_RETRIEVER,
    ArgumentRequest,
    E2EStep,
    ProtocolBuilder,
    StepRequest,
    cells,
)
from dtdr_agents.foundation.chat import OpenAIChat
from dtdr_agents.foundation.encoders import Encoder
from dtdr_agents.foundation.errors import ChatModelError
from dtdr_agents.foundation.progress import Progress, no_progress
from dtdr_agents.foundation.retry import status_code
from dtdr_agents.foundation.selection import SelectionPolicy
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.runtime.prompting import TokenCounter, get_token_counter

REPORT_KIND = "e2e"
"""The ``kind`` field of an end-to-end JSON report (`dtdr-agents report` dispatches on it)."""

ARGUMENTS_CELL = "<arguments>"
"""The ``retriever`` of a cached parameter-filling answer (shared by every cell)."""

MAX_LISTED_PROMPTS = 10
"""Parameter-filling prompts a dry-run report shows in full (all are listed by step)."""


@dataclass
class E2EPlan:
    """Everything a run needs before the first request.

    Attributes:
        dataset: The dataset's name.
        n_train: Training demonstrations.
        n_test: Test plans.
        builder: The protocol builder (steps, catalogue in API names, token counter).
        requests: Every request, cell by cell.
        cells: The (retriever, mode) pairs, in order.
        skipped: Retriever id -> why it could not run.
        encoder: The encoder id used by the retrievers.
        seed: Seed of the split, the retrievers and the example demonstrations.
        k: Retrieved tools kept per step.
    """

    dataset: str
    n_train: int
    n_test: int
    builder: ProtocolBuilder
    requests: list[StepRequest]
    cells: list[tuple[str, str]]
    skipped: dict[str, str] = field(default_factory=dict)
    encoder: str = ""
    seed: int = 0
    k: int = 5


def prepare_e2e(
    train: Dataset,
    test: Dataset,
    retriever_ids: Sequence[str],
    modes: Sequence[str],
    *,
    encoder: Encoder,
    seed: int = 0,
    k: int = 5,
    counter: TokenCounter | None = None,
    chat_model: Any = None,
    log: Any = None,
) -> E2EPlan:
    """Fit the retrievers on `train` and build every request of the run (no network).

    Args:
        train: Training split (demonstrations and catalogue).
        test: Test split.
        retriever_ids: Retriever ids (``"none"`` = the `no_icl` baseline).
        modes: Modes (see `dtdr_agents.evaluation.e2e.protocol.E2E_MODES`).
        encoder: Encoder of the retrievers.
        seed: Seed of the retrievers and of the example demonstrations.
        k: Retrieved tools kept per step (top-k).
        counter: Token counter (default: `get_token_counter()`).
        chat_model: A chat model for retrievers that need one (``lim``); without it they are
            skipped with the reason.
        log: Called with progress messages (e.g. `print`), or None.

    Returns:
        The `E2EPlan`.

    Raises:
        ValueError: For an unknown mode, set-valued data (no plan order to follow), or no
            runnable (retriever, mode) pair.
    """
    from dtdr_agents.evaluation.bench import build_retriever

    if test.set_valued or train.set_valued:
        raise ValueError(
            f"dataset {train.name!r} is set-valued (no call order): the end-to-end evaluation "
            "needs ordered plans"
        )
    pairs = cells(retriever_ids, modes)
    fitted: dict[str, ToolRetriever | None] = {}
    skipped: dict[str, str] = {}
    for rid in dict.fromkeys(r for r, _ in pairs):
        if rid == NO_RETRIEVER:
            fitted[rid] = None
            continue
        retriever, reason = build_retriever(
            rid, encoder=encoder, seed=seed, dataset=train, chat_model=chat_model
        )
        if retriever is None:
            skipped[rid] = reason or "unavailable"
            if log:
                log(f"skipping {rid}: {skipped[rid]}")
            continue
        if log:
            log(f"fitting {rid} ...")
        fitted[rid] = retriever.fit(train.demos, train.tools)
    builder = ProtocolBuilder(
        train.demos,
        test.demos,
        train.tools,
        counter=counter or get_token_counter(),
        policy=SelectionPolicy(k=k),
        seed=seed,
    )
    requests: list[StepRequest] = []
    for rid, retriever in fitted.items():
        wanted = [m for r, m in pairs if r == rid]
        try:
            requests.extend(builder.requests_for(rid, retriever, wanted))
        except Exception as exc:  # e.g. lim's chat model failing: skip this retriever only
            skipped[rid] = f"ranking failed: {type(exc).__name__}: {exc}"[:300]
            if log:
                log(f"skipping {rid}: {skipped[rid]}")
    return E2EPlan(
        dataset=train.name,
        n_train=len(train.demos),
        n_test=len(test.demos),
        builder=builder,
        requests=requests,
        cells=[p for p in pairs if p[0] in fitted and p[0] not in skipped],
        skipped=skipped,
        encoder=encoder.id,
        seed=seed,
        k=k,
    )


def _base_report(plan: E2EPlan, *, model: str | None, dry_run: bool) -> dict[str, Any]:
    counter = plan.builder.counter
    return {
        "kind": REPORT_KIND,
        "version": 1,
        "dataset": plan.dataset,
        "n_train": plan.n_train,
        "n_test": plan.n_test,
        "n_steps": len(plan.builder.steps),
        "n_tools": len(plan.builder.tools),
        "encoder": plan.encoder,
        "seed": plan.seed,
        "k": plan.k,
        "model": model,
        "dry_run": dry_run,
        "token_counter": {"name": counter.name, "exact": counter.exact, "note": counter.note},
        "skipped": dict(plan.skipped),
    }


def dry_run_report(
    plan: E2EPlan, *, model: str | None = None, cache: StepCache | None = None
) -> dict[str, Any]:
    """How many calls the run would make and their prompt tokens, per (retriever, mode).

    Args:
        plan: The prepared run.
        model: The model name (only needed to look up cached steps).
        cache: A step cache: steps already in it are counted as cached, not as calls.

    Returns:
        A report of kind ``"e2e"`` with ``dry_run`` true; each result has ``calls``,
        ``cached``, ``prompt_tokens`` and ``variable_tokens`` (means per step) and
        ``prompt_tokens_total``.
    """
    report = _base_report(plan, model=model, dry_run=True)
    results = []
    for rid, mode in plan.cells:
        reqs = [r for r in plan.requests if r.retriever == rid and r.mode == mode]
        cached = 0
        if cache is not None and model:
            cached = sum(step_key(model, rid, mode, r.fingerprint) in cache for r in reqs)
        tokens = [r.prompt_tokens for r in reqs]
        variable = [r.variable_tokens for r in reqs]
        results.append(
            {
                "retriever": rid,
                "mode": mode,
                "calls": len(reqs) - cached,
                "cached": cached,
                "n_steps": len(reqs),
                "prompt_tokens": sum(tokens) / len(tokens) if tokens else None,
                "variable_tokens": sum(variable) / len(variable) if variable else None,
                "prompt_tokens_total": sum(tokens),
                "tools_bound": sum(len(r.bound) for r in reqs) / len(reqs) if reqs else None,
            }
        )
    report["results"] = results
    report["calls"] = sum(r["calls"] for r in results)
    report["prompt_tokens_total"] = sum(r["prompt_tokens_total"] for r in results)
    report["arguments"] = _argument_listing(plan, model, cache)
    return report


def _argument_key(model: str, req: ArgumentRequest) -> str:
    return step_key(model, ARGUMENTS_CELL, req.function, req.fingerprint)


def _argument_listing(plan: E2EPlan, model: str | None, cache: StepCache | None) -> dict[str, Any]:
    """The parameter-filling prompts of a run, one per step and next function.

    An upper bound: a run asks one only where a model selected that function.
    """
    reqs = plan.builder.argument_requests()
    cached = 0
    if cache is not None and model:
        cached = sum(_argument_key(model, r) in cache for r in reqs)
    tokens = [r.prompt_tokens for r in reqs]
    return {
        "scored": plan.builder.has_arguments,
        "prompts": len(reqs),
        "cached": cached,
        "prompt_tokens": sum(tokens) / len(tokens) if tokens else None,
        "prompt_tokens_total": sum(tokens),
        "list": [
            {
                "plan": r.step.plan,
                "step": r.step.step,
                "plan_id": r.step.plan_id,
                "function": r.function,
                "prompt_tokens": r.prompt_tokens,
                "gold": r.step.gold_for(r.function) if r.step.gold_arguments is not None else None,
            }
            for r in reqs
        ],
        "examples": [
            {"function": r.function, "messages": r.messages, "tools": r.tools}
            for r in reqs[:MAX_LISTED_PROMPTS]
        ],
    }


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
    }


async def _ask(
    req: StepRequest,
    chat: OpenAIChat,
    key: str,
    semaphore: asyncio.Semaphore,
    catalogue: frozenset[str],
    request_kwargs: Mapping[str, Any],
    text_ends_plan: bool,
) -> dict[str, Any]:
    row = _row(req, chat.model, key)
    async with semaphore:
        start = time.perf_counter()
        try:
            response = await chat.acreate(req.messages, tools=req.tools, **request_kwargs)
        except Exception as exc:  # every failure is recorded per step, never raised
            row.update(
                kind="error",
                correct=False,
                called=None,
                error_type=error_type(exc),
                error=str(exc)[:500],
                latency_ms=(time.perf_counter() - start) * 1000.0,
            )
            return row
        row["latency_ms"] = (time.perf_counter() - start) * 1000.0
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


async def _arun(
    plan: E2EPlan,
    chat: OpenAIChat,
    cache: StepCache | None,
    concurrency: int,
    progress: Progress,
    request_kwargs: Mapping[str, Any],
    text_ends_plan: bool,
) -> tuple[list[dict[str, Any]], int, int, int]:
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
    if todo:
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
        for next_done in progress(asyncio.as_completed(tasks), "e2e", len(tasks)):
            row = await next_done
            if cache is not None and row["kind"] != "error":
                cache.add(row)
            rows.append(row)
        rows, arg_calls, arg_cached = await _fill_arguments(
            plan, chat, rows, cache, semaphore, progress
        )
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
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
    req: ArgumentRequest, chat: OpenAIChat, key: str, semaphore: asyncio.Semaphore
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
    async with semaphore:
        start = time.perf_counter()
        try:
            response = await chat.acreate(
                req.messages, tools=req.tools, tool_choice=req.tool_choice
            )
        except Exception as exc:  # recorded, never raised (as for selection steps)
            row.update(
                kind="error",
                error_type=error_type(exc),
                error=str(exc)[:500],
                latency_ms=(time.perf_counter() - start) * 1000.0,
            )
            return row
        row["latency_ms"] = (time.perf_counter() - start) * 1000.0
    row.update(kind="arguments", **read_arguments(response, req.function))
    return row


async def _fill_arguments(
    plan: E2EPlan,
    chat: OpenAIChat,
    rows: list[dict[str, Any]],
    cache: StepCache | None,
    semaphore: asyncio.Semaphore,
    progress: Progress,
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
        key = _argument_key(chat.model, req)
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            answers[ident] = hit
        else:
            todo.append((ident, req, key))
    reused = len(answers)
    tasks = [
        asyncio.ensure_future(_ask_arguments(req, chat, key, semaphore)) for _, req, key in todo
    ]
    try:
        for next_done in progress(asyncio.as_completed(tasks), "arguments", len(tasks)):
            answer = await next_done
            if cache is not None and answer["kind"] != "error":
                cache.add(answer)
            answers[(int(answer["plan"]), int(answer["step"]), str(answer["function"]))] = answer
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
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


async def arun_e2e(
    plan: E2EPlan,
    chat: OpenAIChat,
    *,
    cache: StepCache | None = None,
    concurrency: int = 4,
    progress: Progress | None = None,
    tool_choice: str | None = "auto",
    text_ends_plan: bool = True,
) -> dict[str, Any]:
    """Async `run_e2e` (for callers already inside an event loop)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    start = time.perf_counter()
    kwargs: dict[str, Any] = {}
    if tool_choice is not None:
        kwargs["tool_choice"] = tool_choice
    rows, cached, arg_calls, arg_cached = await _arun(
        plan, chat, cache, concurrency, progress or no_progress, kwargs, text_ends_plan
    )
    report = _base_report(plan, model=chat.model, dry_run=False)
    report["base_url"] = chat.base_url
    report["results"] = summarize_cells(rows, plan.cells)
    report["calls"] = len(rows) - cached
    report["cached"] = cached
    report["argument_calls"] = arg_calls
    report["argument_cached"] = arg_cached
    report["arguments_scored"] = plan.builder.has_arguments
    report["wall_s"] = time.perf_counter() - start
    return report


def run_e2e(
    plan: E2EPlan,
    chat: OpenAIChat,
    *,
    cache: StepCache | None = None,
    concurrency: int = 4,
    progress: Progress | None = None,
    tool_choice: str | None = "auto",
    text_ends_plan: bool = True,
) -> dict[str, Any]:
    """Send every request of `plan` to `chat` and aggregate the metrics per (retriever, mode).

    Failed requests (unreachable endpoint, time-out, HTTP error after the retries, malformed
    body) are recorded per step and counted, never raised. An interruption (Ctrl-C) loses
    only the requests in flight: answered steps are already in `cache`.

    Args:
        plan: The prepared run (`prepare_e2e`).
        chat: The endpoint (`OpenAIChat`: its retry policy and time-out apply to each request).
        cache: Step cache; cached steps are not asked again, answered steps are appended.
        concurrency: Requests in flight at most.
        progress: Progress wrapper (e.g. `dtdr_agents.foundation.progress.progress_bar(True)`).
        tool_choice: Sent as ``tool_choice`` (None: not sent).
        text_ends_plan: Count a text answer at a plan's end as end-of-plan.

    Returns:
        A report of kind ``"e2e"``: per-cell metrics in ``results`` (see
        `dtdr_agents.evaluation.e2e.metrics.summarize`), ``calls`` made and ``cached`` steps reused.
    """
    return asyncio.run(
        arun_e2e(
            plan,
            chat,
            cache=cache,
            concurrency=concurrency,
            progress=progress,
            tool_choice=tool_choice,
            text_ends_plan=text_ends_plan,
        )
    )


def summarize_cells(
    rows: Iterable[Mapping[str, Any]], pairs: Sequence[tuple[str, str]]
) -> list[dict[str, Any]]:
    """`summarize` per (retriever, mode), in `pairs` order, with a few error messages each."""
    by_cell: dict[tuple[str, str], list[Mapping[str, Any]]] = {p: [] for p in pairs}
    for row in rows:
        by_cell.setdefault((str(row["retriever"]), str(row["mode"])), []).append(row)
    out = []
    for (rid, mode), cell_rows in by_cell.items():
        ordered = sorted(cell_rows, key=lambda r: (int(r["plan"]), int(r["step"])))
        summary = summarize(ordered)
        errors = [str(r.get("error")) for r in ordered if r["kind"] == "error"]
        out.append({"retriever": rid, "mode": mode, **summary, "error_examples": errors[:3]})
    return out


__all__ = [
    "ARGUMENTS_CELL",
    "REPORT_KIND",
    "E2EPlan",
    "arun_e2e",
    "dry_run_report",
    "error_type",
    "prepare_e2e",
    "run_e2e",
    "summarize_cells",
]
