"""Run the end-to-end evaluation against an OpenAI-compatible endpoint (or dry-run it offline).

`prepare_e2e` fits the retrievers on the training plans (as `dtdr-agents bench` does) and builds
every request; `dry_run_report` counts them and their prompt tokens without any network;
`run_e2e` sends them (`dtdr_agents.evaluation.e2e.calls`: a concurrency limit, retries and a
per-request time-out through `OpenAIChat`), caches each answered step in an append-only JSONL
file so an interrupted run resumes, and aggregates the metrics per (retriever, mode).

A replay (`ReplayChat`) answers each step with the prompt the step cache recorded for it
(`match_recorded`), so the figures come back even where the retrievers, on another machine,
give a probability that differs in its third decimal; `check_prompts` counts the steps whose
prompt at this commit is not the one recorded.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

from dtdr_agents.datasets.base import Dataset
from dtdr_agents.evaluation.e2e.cache import StepCache, step_key
from dtdr_agents.evaluation.e2e.calls import (
    ARGUMENTS_CELL,
    EndpointUnreachableError,
    ReplayChat,
    StepNotCachedError,
    argument_key,
    error_type,
    run_requests,
)
from dtdr_agents.evaluation.e2e.metrics import summarize
from dtdr_agents.evaluation.e2e.protocol import (
    NO_RETRIEVER,
    RECORDED_FIELDS,
    ProtocolBuilder,
    StepRequest,
    cells,
    split_spec,
)
from dtdr_agents.evaluation.e2e.uncertainty import (
    cell_intervals,
    compare_cells,
    compare_counted_prompts,
    comparison_pairs,
    targets,
)
from dtdr_agents.evaluation.intervals import LEVEL, N_BOOTSTRAP
from dtdr_agents.foundation.chat import OpenAIChat
from dtdr_agents.foundation.encoders import Encoder
from dtdr_agents.foundation.encoders.base import FittableEncoder
from dtdr_agents.foundation.progress import Progress, no_progress
from dtdr_agents.foundation.selection import TOP_K
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.runtime.prompting import TokenCounter, get_token_counter

REPORT_KIND = "e2e"
"""The ``kind`` field of an end-to-end JSON report (`dtdr-agents report` dispatches on it)."""

MAX_LISTED_PROMPTS = 10
"""Parameter-filling prompts a dry-run report shows in full (all are listed by step)."""

PROMPT_CHECK_EXAMPLES = 5
"""Steps `check_prompts` describes, of those whose prompt changed or has no answer."""


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
        n_demos: Retriever id -> demonstrations it was fit on.
        skipped_cells: The cells refused by `max_prompt_tokens`, with their measured sizes.
        max_prompt_tokens: The prompt size over which a cell is refused (None: none is).
        counted: Refused cell -> (plan, prompt tokens) of each of its steps: counted, never
            sent, so that the prompt-token ratio against it is still reported.
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
    n_demos: dict[str, int] = field(default_factory=dict)
    skipped_cells: list[dict[str, Any]] = field(default_factory=list)
    max_prompt_tokens: int | None = None
    counted: dict[tuple[str, str], list[tuple[int, int]]] = field(default_factory=dict)


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
    zero_train: Dataset | None = None,
    max_prompt_tokens: int | None = None,
) -> E2EPlan:
    """Fit the retrievers on `train` and build every request of the run (no network).

    A retriever spec ending in `ZERO_DEMOS` (``hybrid@0demos``) is that retriever fitted on
    `zero_train` (the training split cut to no demonstrations, as `dtdr-agents bench --n-demos
    0` fits), with prompts that carry no example demonstration: a new user's first run.

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
        zero_train: The training split with no demonstrations (needed by `ZERO_DEMOS` specs).
        max_prompt_tokens: Refuse (skip, with the measured sizes in ``skipped_cells``) every
            cell with a prompt longer than this; None refuses none.

    Returns:
        The `E2EPlan`.

    Raises:
        ValueError: For an unknown mode, set-valued data (no plan order to follow), no
            runnable (retriever, mode) pair, or a `ZERO_DEMOS` spec without `zero_train`
            (or with demonstrations in it).
    """
    from dtdr_agents.evaluation.bench import build_retriever

    if test.set_valued or train.set_valued:
        raise ValueError(
            f"dataset {train.name!r} is set-valued (no call order): the end-to-end evaluation "
            "needs ordered plans"
        )
    pairs = cells(retriever_ids, modes)
    # An encoder that fits on the first retriever's data (TF-IDF) must not carry the
    # demonstrations into a zero-demonstration retriever: that one gets its own copy.
    zero_encoder = encoder
    if isinstance(encoder, FittableEncoder) and not encoder.is_fitted:
        zero_encoder = copy.deepcopy(encoder)
    fitted: dict[str, ToolRetriever | None] = {}
    skipped: dict[str, str] = {}
    n_demos: dict[str, int] = {}
    for rid in dict.fromkeys(r for r, _ in pairs):
        base, zero = split_spec(rid)
        data = train
        if zero:
            if zero_train is None or zero_train.demos:
                raise ValueError(
                    f"retriever {rid!r} fits on no demonstrations: pass zero_train, the "
                    "training split cut to 0 demonstrations"
                )
            data = zero_train
        n_demos[rid] = len(data.demos)
        if rid == NO_RETRIEVER:
            fitted[rid] = None
            continue
        retriever, reason = build_retriever(
            base,
            encoder=zero_encoder if zero else encoder,
            seed=seed,
            dataset=data,
            chat_model=chat_model,
        )
        if retriever is None:
            skipped[rid] = reason or "unavailable"
            if log:
                log(f"skipping {rid}: {skipped[rid]}")
            continue
        if log:
            log(f"fitting {rid} on {len(data.demos)} demonstrations ...")
        fitted[rid] = retriever.fit(data.demos, data.tools)
    builder = ProtocolBuilder(
        train.demos,
        test.demos,
        train.tools,
        counter=counter or get_token_counter(),
        policy=dataclasses.replace(TOP_K, k=k),
        seed=seed,
    )
    zero_builder = None
    requests: list[StepRequest] = []
    for rid, retriever in fitted.items():
        wanted = [m for r, m in pairs if r == rid]
        use = builder
        if split_spec(rid)[1]:
            zero_builder = zero_builder or builder.without_demonstrations()
            use = zero_builder
        try:
            requests.extend(use.requests_for(rid, retriever, wanted))
        except Exception as exc:  # e.g. lim's chat model failing: skip this retriever only
            skipped[rid] = f"ranking failed: {type(exc).__name__}: {exc}"[:300]
            if log:
                log(f"skipping {rid}: {skipped[rid]}")
    kept = [p for p in pairs if p[0] in fitted and p[0] not in skipped]
    refused: list[dict[str, Any]] = []
    counted: dict[tuple[str, str], list[tuple[int, int]]] = {}
    if max_prompt_tokens is not None:
        asked = requests
        requests, kept, refused = _refuse_oversized(requests, kept, max_prompt_tokens)
        for cell in refused:
            key = (cell["retriever"], cell["mode"])
            counted[key] = [
                (r.step.plan, r.prompt_tokens) for r in asked if (r.retriever, r.mode) == key
            ]
            if log:
                log(f"skipping {cell['retriever']}/{cell['mode']}: {cell['reason']}")
    return E2EPlan(
        dataset=train.name,
        n_train=len(train.demos),
        n_test=len(test.demos),
        builder=builder,
        requests=requests,
        cells=kept,
        skipped=skipped,
        encoder=encoder.id,
        seed=seed,
        k=k,
        n_demos=n_demos,
        skipped_cells=refused,
        max_prompt_tokens=max_prompt_tokens,
        counted=counted,
    )


def _refuse_oversized(
    requests: list[StepRequest], pairs: list[tuple[str, str]], limit: int
) -> tuple[list[StepRequest], list[tuple[str, str]], list[dict[str, Any]]]:
    """Drop every cell with a prompt over `limit` tokens; say which, why and how big."""
    refused: list[dict[str, Any]] = []
    kept: list[tuple[str, str]] = []
    for rid, mode in pairs:
        sizes = [r.prompt_tokens for r in requests if r.retriever == rid and r.mode == mode]
        over = sum(s > limit for s in sizes)
        if not over:
            kept.append((rid, mode))
            continue
        refused.append(
            {
                "retriever": rid,
                "mode": mode,
                "n_steps": len(sizes),
                "n_over": over,
                "max_prompt_tokens": max(sizes),
                "mean_prompt_tokens": sum(sizes) / len(sizes),
                "limit": limit,
                "reason": f"{over} of {len(sizes)} prompts exceed --max-prompt-tokens {limit} "
                f"(up to {max(sizes):,}, {sum(sizes) / len(sizes):,.0f} on average): they "
                "cannot fit the model's context, so the cell is not run",
            }
        )
    wanted = set(kept)
    return [r for r in requests if (r.retriever, r.mode) in wanted], kept, refused


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
        "skipped_cells": list(plan.skipped_cells),
        "max_prompt_tokens": plan.max_prompt_tokens,
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
        ``cached``, ``prompt_tokens`` and ``variable_tokens`` (means per step),
        ``prompt_tokens_max`` and ``prompt_tokens_total``.
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
                "n_demos": plan.n_demos.get(rid),
                "calls": len(reqs) - cached,
                "cached": cached,
                "n_steps": len(reqs),
                "prompt_tokens": sum(tokens) / len(tokens) if tokens else None,
                "prompt_tokens_max": max(tokens, default=None),
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


@dataclass(frozen=True)
class RecordedMatch:
    """A request of a run, and the request whose answer the step cache holds for its step.

    Attributes:
        head: The request as this commit builds it.
        answered: `head` itself when the cache holds the answer to its prompt; the prompt
            the cache recorded for the step when that differs (rebuilt from its
            `RECORDED_FIELDS`, checked against its key); None when the step has no answer.
    """

    head: StepRequest
    answered: StepRequest | None

    @property
    def status(self) -> str:
        """``"same"``, ``"changed"`` (another prompt was answered) or ``"missing"``."""
        if self.answered is None:
            return "missing"
        return "same" if self.answered is self.head else "changed"


def match_recorded(plan: E2EPlan, cache: StepCache, model: str) -> list[RecordedMatch]:
    """Each request of `plan` with the request the step cache answered at its step.

    A row that records its prompt answers its step when that prompt, rebuilt on the step's
    frame (the instructions, the example, the request, the calls so far), has the row's own
    key: the frame is then unchanged, and only the retrieval may differ from this commit's,
    such as a probability in its third decimal on another machine. Of several such rows for
    a step the last written wins (the latest run's answer), whatever this commit's prompt;
    a step with none is answered by the row of its request's key, if any (rows written
    before prompts were recorded).

    Args:
        plan: The run (its requests as this commit builds them).
        cache: The step cache.
        model: The model name the answers were cached under.
    """
    recorded: dict[tuple[str, str, int, int], list[Mapping[str, Any]]] = {}
    for row in cache.rows():
        if row.get("model") == model and all(f in row for f in RECORDED_FIELDS):
            ident = (str(row["retriever"]), str(row["mode"]), int(row["plan"]), int(row["step"]))
            recorded.setdefault(ident, []).append(row)
    out: list[RecordedMatch] = []
    for req in plan.requests:
        key = step_key(model, req.retriever, req.mode, req.fingerprint)
        answered = None
        for row in reversed(
            recorded.get((req.retriever, req.mode, req.step.plan, req.step.step), [])
        ):
            if row["key"] == key:
                answered = req
                break
            rebuilt = plan.builder.recorded_request(req, row)
            if rebuilt is not None and row["key"] == step_key(
                model, req.retriever, req.mode, rebuilt.fingerprint
            ):
                answered = rebuilt
                break
        if answered is None and key in cache:
            answered = req
        out.append(RecordedMatch(req, answered))
    return out


def _first_difference(a: str, b: str) -> tuple[str, str]:
    """The first line where `a` and `b` differ (each side's), or ("", "")."""
    for x, y in zip([*a.splitlines(), ""], [*b.splitlines(), ""], strict=False):
        if x != y:
            return x, y
    return "", ""


def check_prompts(
    plan: E2EPlan, cache: StepCache, model: str, *, examples: int = PROMPT_CHECK_EXAMPLES
) -> dict[str, Any]:
    """How many steps' prompts at this commit differ from those the step cache answered.

    Args:
        plan: The run (its requests as this commit builds them).
        cache: The step cache.
        model: The model name the answers were cached under.
        examples: Steps to describe (changed or missing ones, in the run's order).

    Returns:
        ``n_steps``, ``same``, ``changed`` (the cache answered another prompt at the step: a
        replay uses that one), ``missing`` (no answer: a replay stops there), per-cell
        counts in ``cells``, and ``examples`` (the step, its status and, when changed, the
        tools bound only at this commit or only in the record and the first line of the
        mode text that differs).
    """
    matches = match_recorded(plan, cache, model)
    per_cell: dict[tuple[str, str], Counter[str]] = {p: Counter() for p in plan.cells}
    described: list[dict[str, Any]] = []
    for m in matches:
        per_cell.setdefault((m.head.retriever, m.head.mode), Counter())[m.status] += 1
        if m.status == "same" or len(described) >= examples:
            continue
        entry: dict[str, Any] = {
            "retriever": m.head.retriever,
            "mode": m.head.mode,
            "plan": m.head.step.plan,
            "step": m.head.step.step,
            "status": m.status,
        }
        if m.answered is not None:
            head_text, recorded_text = _first_difference(m.head.text, m.answered.text)
            entry.update(
                bound_at_head_only=sorted(set(m.head.bound) - set(m.answered.bound)),
                bound_recorded_only=sorted(set(m.answered.bound) - set(m.head.bound)),
                text_at_head=head_text,
                text_recorded=recorded_text,
            )
        described.append(entry)
    totals = Counter(m.status for m in matches)
    return {
        "model": model,
        "step_cache": str(cache.path),
        "n_steps": len(matches),
        "same": totals["same"],
        "changed": totals["changed"],
        "missing": totals["missing"],
        "cells": [
            {
                "retriever": r,
                "mode": mode,
                "n_steps": sum(c.values()),
                **{s: c[s] for s in ("same", "changed", "missing")},
            }
            for (r, mode), c in per_cell.items()
        ],
        "examples": described,
    }


def format_prompt_check(check: Mapping[str, Any]) -> str:
    """`check_prompts`'s result as a Markdown table, a summary line and its examples."""
    lines = [
        f"Prompts at this commit against the step cache {check['step_cache']} "
        f"(model {check['model']}):",
        "",
        "| retriever | mode | steps | same | changed | missing |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for c in check["cells"]:
        lines.append(
            f"| {c['retriever']} | {c['mode']} | {c['n_steps']} | {c['same']} | "
            f"{c['changed']} | {c['missing']} |"
        )
    lines += [
        "",
        f"{check['changed']} of {check['n_steps']} steps' prompts would change at this commit "
        "(a --replay uses the recorded ones); "
        f"{check['missing']} have no recorded answer (a --replay stops at the first).",
    ]
    for e in check["examples"]:
        where = f"- {e['retriever']}/{e['mode']} plan {e['plan']} step {e['step']}: {e['status']}"
        if e["status"] == "changed":
            where += (
                f"; bound only now {e['bound_at_head_only']}, only recorded "
                f"{e['bound_recorded_only']}; text now {e['text_at_head']!r}, recorded "
                f"{e['text_recorded']!r}"
            )
        lines.append(where)
    return "\n".join(lines)


def record_prompts(plan: E2EPlan, cache: StepCache, model: str) -> int:
    """Add the prompt (`RECORDED_FIELDS`) to older cached rows that record only its key.

    Only rows whose key is the key of a request this commit builds gain it (that request's
    prompt is then, by its hash, the one answered); the others are left as they are. No
    figure changes: no answer, size or latency is touched.

    Returns:
        The rows that gained the fields.
    """
    fields: dict[str, dict[str, Any]] = {}
    for req in plan.requests:
        key = step_key(model, req.retriever, req.mode, req.fingerprint)
        row = cache.get(key)
        if row is not None and not all(f in row for f in RECORDED_FIELDS):
            fields[key] = req.recorded()
    return cache.add_fields(fields) if fields else 0


async def arun_e2e(
    plan: E2EPlan,
    chat: OpenAIChat | ReplayChat,
    *,
    cache: StepCache | None = None,
    concurrency: int = 4,
    progress: Progress | None = None,
    tool_choice: str | None = "auto",
    text_ends_plan: bool = True,
    stop_on_unreachable: bool = False,
    n_boot: int = N_BOOTSTRAP,
) -> dict[str, Any]:
    """Async `run_e2e` (for callers already inside an event loop)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    start = time.perf_counter()
    kwargs: dict[str, Any] = {}
    if tool_choice is not None:
        kwargs["tool_choice"] = tool_choice
    replayed: Counter[str] | None = None
    if isinstance(chat, ReplayChat) and cache is not None:  # the prompts the cache answered
        matches = match_recorded(plan, cache, chat.model)
        replayed = Counter(m.status for m in matches)
        plan = dataclasses.replace(plan, requests=[m.answered or m.head for m in matches])
    rows, cached, arg_calls, arg_cached = await run_requests(
        plan,
        chat,
        cache,
        concurrency,
        progress or no_progress,
        kwargs,
        text_ends_plan,
        stop_on=frozenset({"unreachable"}) if stop_on_unreachable else frozenset(),
    )
    report = _base_report(plan, model=chat.model, dry_run=False)
    report["base_url"] = chat.base_url
    report["replay"] = isinstance(chat, ReplayChat)
    if replayed is not None:  # steps whose recorded prompt differs from this commit's
        report["replayed_changed_prompts"] = replayed["changed"]
    report["tool_choice"] = tool_choice
    report["results"] = summarize_cells(rows, plan.cells)
    _add_intervals(report, plan, rows, n_boot)
    report["calls"] = len(rows) - cached
    report["cached"] = cached
    report["argument_calls"] = arg_calls
    report["argument_cached"] = arg_cached
    report["arguments_scored"] = plan.builder.has_arguments
    report["wall_s"] = time.perf_counter() - start
    return report


def _label(cell: tuple[str, str]) -> str:
    return f"{cell[0]}/{cell[1]}"


def _add_intervals(
    report: dict[str, Any], plan: E2EPlan, rows: Sequence[Mapping[str, Any]], n_boot: int
) -> None:
    """Bootstrap intervals over plans per cell, paired comparisons and the issue's targets."""
    by_cell: dict[tuple[str, str], list[Mapping[str, Any]]] = {p: [] for p in plan.cells}
    for row in rows:
        by_cell.setdefault((str(row["retriever"]), str(row["mode"])), []).append(row)
    for result in report["results"]:
        cell = (str(result["retriever"]), str(result["mode"]))
        result["n_demos"] = plan.n_demos.get(cell[0])
        result["intervals"] = cell_intervals(
            by_cell.get(cell, []), plan.n_test, n_boot=n_boot, seed=plan.seed
        )
    refused = {(c["retriever"], c["mode"]): c["reason"] for c in plan.skipped_cells}
    every = [*plan.cells, *refused]
    comparisons: list[dict[str, Any]] = []
    for a, b in comparison_pairs(every):
        entry: dict[str, Any] = {"a": _label(a), "b": _label(b)}
        missing = [c for c in (a, b) if c not in by_cell]
        if missing:
            entry["skipped"] = "; ".join(
                f"{_label(c)} was not run: {refused.get(c, 'skipped')}" for c in missing
            )
            if missing == [b] and b in plan.counted:  # its prompts were counted, not sent
                entry.update(
                    compare_counted_prompts(
                        by_cell[a], plan.counted[b], plan.n_test, n_boot=n_boot, seed=plan.seed
                    )
                )
        else:
            entry.update(
                compare_cells(by_cell[a], by_cell[b], plan.n_test, n_boot=n_boot, seed=plan.seed)
            )
        comparisons.append(entry)
    report["comparisons"] = comparisons
    sr_key = "sr_full" if plan.builder.has_arguments else "sr"
    report["targets"] = targets(comparisons, sr_key)
    report["bootstrap"] = {"unit": "test plan", "n_boot": n_boot, "level": LEVEL, "seed": plan.seed}


class RunOptions(TypedDict, total=False):
    """The keyword options of `run_e2e` and `arun_e2e` (see `run_e2e`)."""

    cache: StepCache | None
    concurrency: int
    progress: Progress | None
    tool_choice: str | None
    text_ends_plan: bool
    stop_on_unreachable: bool
    n_boot: int


def run_e2e(
    plan: E2EPlan, chat: OpenAIChat | ReplayChat, **options: Unpack[RunOptions]
) -> dict[str, Any]:
    """Send every request of `plan` to `chat` and aggregate the metrics per (retriever, mode).

    Failed requests (unreachable endpoint, time-out, HTTP error after the retries, malformed
    body) are recorded per step and counted, never raised, unless `stop_on_unreachable`. An
    interruption (Ctrl-C) loses only the requests in flight: answered steps are already in
    `cache`.

    Args:
        plan: The prepared run (`prepare_e2e`).
        chat: The endpoint (`OpenAIChat`: its retry policy and time-out apply to each
            request), or a `ReplayChat`: every answer comes from `cache`, none is asked.
        cache: Step cache; cached steps are not asked again, answered steps are appended.
        concurrency: Requests in flight at most.
        progress: Progress wrapper (e.g. `dtdr_agents.foundation.progress.progress_bar(True)`).
        tool_choice: Sent as ``tool_choice`` (None: not sent).
        text_ends_plan: Count a text answer at a plan's end as end-of-plan.
        stop_on_unreachable: Stop the run at the first step whose endpoint stayed unreachable
            after its retries (`EndpointUnreachableError`; the answered steps stay cached).
        n_boot: Bootstrap replicates of the intervals over test plans.

    Returns:
        A report of kind ``"e2e"``: per-cell metrics in ``results`` (see
        `dtdr_agents.evaluation.e2e.metrics.summarize`) with ``intervals`` (bootstrap over test
        plans, `dtdr_agents.evaluation.e2e.uncertainty`), paired ``comparisons`` and the
        issue's ``targets``, ``calls`` made and ``cached`` steps reused.

    Raises:
        StepNotCachedError: A `ReplayChat` run met a step missing from `cache` (named).
        EndpointUnreachableError: With `stop_on_unreachable`, the endpoint went away.
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
    "PROMPT_CHECK_EXAMPLES",
    "REPORT_KIND",
    "E2EPlan",
    "EndpointUnreachableError",
    "RecordedMatch",
    "ReplayChat",
    "StepNotCachedError",
    "arun_e2e",
    "check_prompts",
    "dry_run_report",
    "error_type",
    "format_prompt_check",
    "match_recorded",
    "prepare_e2e",
    "record_prompts",
    "run_e2e",
    "summarize_cells",
]
