"""Run the end-to-end evaluation against an OpenAI-compatible endpoint (or dry-run it offline).

`prepare_e2e` fits the retrievers on the training plans (as `dtdr-agents bench` does) and builds
every request; `dry_run_report` counts them and their prompt tokens without any network;
`run_e2e` sends them (`dtdr_agents.evaluation.e2e.calls`: a concurrency limit, retries and a
per-request time-out through `OpenAIChat`), caches each answered step in an append-only JSONL
file so an interrupted run resumes, and aggregates the metrics per (retriever, mode).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

from dtdr_agents.datasets.base import Dataset
from dtdr_agents.evaluation.e2e.cache import StepCache, step_key
from dtdr_agents.evaluation.e2e.calls import (
    ARGUMENTS_CELL,
    argument_key,
    error_type,
    run_requests,
)
from dtdr_agents.evaluation.e2e.metrics import summarize
from dtdr_agents.evaluation.e2e.protocol import (
    NO_RETRIEVER,
    ProtocolBuilder,
    StepRequest,
    cells,
)
from dtdr_agents.foundation.chat import OpenAIChat
from dtdr_agents.foundation.encoders import Encoder
from dtdr_agents.foundation.progress import Progress, no_progress
from dtdr_agents.foundation.selection import TOP_K
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.runtime.prompting import TokenCounter, get_token_counter

REPORT_KIND = "e2e"
"""The ``kind`` field of an end-to-end JSON report (`dtdr-agents report` dispatches on it)."""

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
        policy=dataclasses.replace(TOP_K, k=k),
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


def _argument_listing(plan: E2EPlan, model: str | None, cache: StepCache | None) -> dict[str, Any]:
    """The parameter-filling prompts of a run, one per step and next function.

    An upper bound: a run asks one only where a model selected that function.
    """
    reqs = plan.builder.argument_requests()
    cached = 0
    if cache is not None and model:
        cached = sum(argument_key(model, r) in cache for r in reqs)
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
    rows, cached, arg_calls, arg_cached = await run_requests(
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


class RunOptions(TypedDict, total=False):
    """The keyword options of `run_e2e` and `arun_e2e` (see `run_e2e`)."""

    cache: StepCache | None
    concurrency: int
    progress: Progress | None
    tool_choice: str | None
    text_ends_plan: bool


def run_e2e(plan: E2EPlan, chat: OpenAIChat, **options: Unpack[RunOptions]) -> dict[str, Any]:
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
    return asyncio.run(arun_e2e(plan, chat, **options))


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
