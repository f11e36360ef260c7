"""The live-agent benchmark: each test plan's request run as a real agent loop, per contestant.

For every test plan, every contestant (in turn, plan by plan, so machine load falls on all
alike) runs its agent on the plan's request over the dataset's catalogue until the model
answers without a tool call or asks for one model call more than the step limit (plan length
+ 3). Tool calls are answered with a simulated result (`AgentTask.tool_result`), the same for
every contestant. The model calls go through a `BenchEndpoint` (cached by request body);
the run is then read off the endpoint's log (what the model answered, not what a framework
kept in its state) and scored against the gold plan (`dtdr_agents.evaluation.agent_bench.scoring`).

Contestants are objects of the `Contestant` protocol; the LangChain/LangGraph ones live in
`langchain_dtdr.agent_bench`, so this module imports no framework.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from dtdr_agents.datasets import Dataset
from dtdr_agents.evaluation.agent_bench.endpoint import BenchEndpoint, RunLog
from dtdr_agents.evaluation.agent_bench.scoring import (
    FAILURE_REASONS,
    failure_reason,
    loops,
    matched_calls,
    plan_success,
)
from dtdr_agents.evaluation.e2e import StepNotCachedError, api_names
from dtdr_agents.evaluation.e2e.protocol import TOOL_RESULT
from dtdr_agents.evaluation.e2e.uncertainty import estimate_json
from dtdr_agents.evaluation.intervals import (
    LEVEL,
    N_BOOTSTRAP,
    paired_unit_ratio,
    unit_ratio_estimate,
    verdict,
)
from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.runtime.tokens import TokenCounter, catalogue_schema_tokens

REPORT_KIND = "agent-bench"
"""The ``kind`` of the results JSON."""

EXTRA_STEPS = 3
"""The step limit is the plan's length plus this many model calls."""

SYSTEM_PROMPT = (
    "You are an agent that solves the user's request with the tools you are given. Call the "
    "tools the request needs, one call at a time, in an order that respects what each call "
    "needs from the others. When every part of the request has been handled, answer with a "
    "short final message and no tool call."
)
"""The system prompt every contestant's agent gets."""

CONTESTANT_IDS = (
    "all-tools",
    "bigtool",
    "llm-selector",
    "search",
    "dtdr",
    "dtdr@0demos",
    "bm25",
    "dtdr+append",
)
"""Every contestant id (`langchain_dtdr.agent_bench` builds them), in report order."""

DEFAULT_CONTESTANTS = CONTESTANT_IDS[:-1]
"""The contestants of issue 37 (``dtdr+append`` is asked for by name)."""

REFERENCE = "dtdr"
"""The contestant every other is compared with (when it runs)."""

SEARCH_TOOL = "search_tools"
"""Name of the search meta-tool of the `search` contestant (the MCP proxy's name)."""

RETRIEVE_TOOL = "retrieve_tools"
"""Name of langgraph-bigtool's retrieval meta-tool."""

META_TOOLS = (SEARCH_TOOL, RETRIEVE_TOOL)
"""Names no catalogue tool may take (renamed away by `api_dataset`)."""


class AgentTask:
    """One run's input: the request, the catalogue, the step limit and the tool results.

    Args:
        plan: Index of the test plan.
        demo: The gold plan (its request is the run's user message).
        tools: The catalogue the agent works over.
        step_limit: Model calls the agent may make.
        system_prompt: The system prompt.
    """

    def __init__(
        self,
        plan: int,
        demo: Demonstration,
        tools: Toolset,
        step_limit: int,
        system_prompt: str = SYSTEM_PROMPT,
    ) -> None:
        self.plan = plan
        self.demo = demo
        self.tools = tools
        self.step_limit = step_limit
        self.system_prompt = system_prompt
        self._seen: Counter[str] = Counter()

    @property
    def query(self) -> str:
        """The user's request."""
        return self.demo.query

    def tool_result(self, name: str, arguments: Mapping[str, Any] | None = None) -> str:
        """The simulated result of a call of `name` (see `simulated_result`)."""
        self._seen[name] += 1
        return simulated_result(self.demo, name, self._seen[name])


def simulated_result(demo: Demonstration, name: str, occurrence: int) -> str:
    """What a call returns: the dataset's result label where it records one, else fixed text.

    The `occurrence`-th call (from 1) of `name` in a run stands for the `occurrence`-th call
    of `name` in the gold plan. Where the dataset records that call's result label
    (Seal-Tools ``API_call_0``, NESTFUL ``var1``, TaskBench ``<node-0>`` where its nodes keep
    arguments) the result is ``"Done. Result label: <label>"``, as e2e shows a result;
    otherwise (no label, or a call the plan does not have) ``"Done. <name> returned its
    result."``. The text depends only on the plan and the call, never on the contestant.
    """
    positions = [i for i, call in enumerate(demo.calls) if call == name]
    if demo.arguments is not None and occurrence <= len(positions):
        label = demo.arguments[positions[occurrence - 1]].label
        if label:
            return f"{TOOL_RESULT} Result label: {label}"
    return f"{TOOL_RESULT} {name} returned its result."


class Contestant(Protocol):
    """How one way of giving tools to the model runs an agent.

    Attributes:
        name: The contestant's id (``all-tools``, ``dtdr``, ...).
        binds_all: Its prompts carry every tool's schema (checked against the context).
        meta_tools: Names of the tools it adds that are not catalogue tools (a search tool).
    """

    name: str
    binds_all: bool
    meta_tools: frozenset[str]

    def run(self, task: AgentTask) -> None:
        """Run the agent on `task`; its model calls go through the benchmark's endpoint."""
        ...


def api_dataset(data: Dataset, names: Mapping[str, str]) -> Dataset:
    """`data` with every tool renamed by `names` (catalogue, plans, tool graph)."""
    tools = Toolset(dataclasses.replace(t, name=names[t.name]) for t in data.tools)
    demos = [dataclasses.replace(d, calls=tuple(names[c] for c in d.calls)) for d in data.demos]
    graph = data.tool_graph
    if graph is not None:
        graph = tuple((names[a], names[b]) for a, b in graph if a in names and b in names)
    return dataclasses.replace(data, tools=tools, demos=demos, tool_graph=graph)


def api_split(train: Dataset, test: Dataset) -> tuple[Dataset, Dataset, dict[str, str]]:
    """(train, test) with API-safe tool names (no meta-tool name taken), and the renaming."""
    names = api_names([t.name for t in train.tools], reserved=META_TOOLS)
    return api_dataset(train, names), api_dataset(test, names), names


@dataclass
class RunResult:
    """One scored run (a row of the results JSON)."""

    contestant: str
    plan: int
    status: str
    n_gold: int
    called: list[str] = field(default_factory=list)
    success: bool = False
    matched: int = 0
    stopped: bool = False
    meta_calls: int = 0
    outside: int = 0
    outside_names: list[str] = field(default_factory=list)
    unbound: int = 0
    unparseable: int = 0
    failure: str | None = None
    error: str | None = None
    model_calls: int = 0
    agent_calls: int = 0
    reasks: int = 0
    prompt_tokens: int = 0
    usage_reported: bool = False
    model_ms: float = 0.0
    wall_ms: float = 0.0

    @property
    def scored(self) -> bool:
        """Whether the run counts in the figures (it ran and the endpoint answered)."""
        return self.status == "scored"


def _arguments_key(arguments: Any) -> tuple[str, bool]:
    """(canonical text, parses as a JSON object) of a tool call's arguments."""
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except ValueError:
            return arguments, False
    else:
        value = arguments
    if not isinstance(value, dict):
        return json.dumps(value, sort_keys=True), False
    return json.dumps(value, sort_keys=True), True


def score_log(
    log: RunLog,
    demo: Demonstration,
    catalogue: Toolset,
    meta_tools: frozenset[str],
    *,
    error: str | None = None,
) -> RunResult:
    """Score the run `log` recorded against the gold plan `demo`.

    Args:
        log: The endpoint's log of the run.
        demo: The gold plan.
        catalogue: The catalogue (a call of any other name is outside it).
        meta_tools: The contestant's meta-tools (left out of the scored calls).
        error: The agent's error, when it raised (not the step limit).
    """
    res = RunResult(log.contestant, log.plan, "scored", len(demo.calls), error=error)
    keys: list[tuple[str, str]] = []
    agent = log.agent_calls
    for i, call in enumerate(agent):
        message = ((call.response.get("choices") or [{}])[0] or {}).get("message") or {}
        if not message.get("tool_calls") and i < len(agent) - 1:
            res.reasks += 1  # answered without a call, and the agent asked again
        for tc in message.get("tool_calls") or []:
            fn = tc.get("function") or {}
            name = str(fn.get("name") or "")
            text, ok = _arguments_key(fn.get("arguments"))
            res.unparseable += not ok
            if name in meta_tools:
                res.meta_calls += 1
                continue
            if not catalogue.has(name):
                res.outside += 1
                res.outside_names.append(name)
                continue
            res.unbound += name not in call.tools
            res.called.append(name)
            keys.append((name, text))
    last = agent[-1].response if agent else {}
    last_message = ((last.get("choices") or [{}])[0] or {}).get("message") or {}
    res.stopped = bool(agent) and not log.limit_hit and error is None
    res.stopped = res.stopped and not last_message.get("tool_calls")
    res.matched = matched_calls(res.called, demo.calls)
    res.success = plan_success(
        res.called, demo.calls, demo.edges, stopped=res.stopped, outside=res.outside
    ) and not (error or res.unparseable)
    res.failure = failure_reason(
        success=res.success,
        error=error is not None,
        looped=loops(keys),
        step_limit=log.limit_hit,
        outside=res.outside,
        unparseable=res.unparseable,
        stopped=res.stopped,
    )
    res.model_calls = len(log.calls)
    res.agent_calls = len(agent)
    res.prompt_tokens = sum(c.prompt_tokens for c in log.calls)
    res.usage_reported = bool(log.calls) and all(c.usage_reported for c in log.calls)
    res.model_ms = sum(c.latency_ms for c in log.calls)
    return res


def all_tools_prompt(task: AgentTask, counter: TokenCounter) -> int:
    """Tokens of a first prompt that carries every tool: system prompt, request, all schemas."""
    schemas = catalogue_schema_tokens(task.tools, counter)
    return counter.count(task.system_prompt) + counter.count(task.query) + sum(schemas.values())


def run_agent_bench(
    test: Dataset,
    contestants: Sequence[Contestant],
    endpoint: BenchEndpoint,
    *,
    catalogue: Toolset | None = None,
    max_prompt_tokens: int | None = None,
    system_prompt: str = SYSTEM_PROMPT,
    log: Callable[[str], Any] | None = None,
) -> list[RunResult]:
    """Run every contestant on every test plan, plan by plan; the scored runs.

    Args:
        test: The test plans (API-safe names, `api_split`).
        contestants: The contestants, run in this order on each plan.
        endpoint: Where the model calls go.
        catalogue: The tools the agents work over (default: the test split's).
        max_prompt_tokens: The model's context: a contestant that binds every tool is not
            run on a plan whose all-tools prompt exceeds it (status ``does_not_fit``, its size
            counted in ``prompt_tokens``); None runs everything.
        system_prompt: The agents' system prompt.
        log: Called with a progress line per plan.

    Returns:
        One `RunResult` per (plan, contestant), in run order. A run whose endpoint still
        failed after the retries has status ``endpoint_error`` (nothing of it cached).

    Raises:
        StepNotCachedError: A replay met a model call missing from the cache.
    """
    tools = catalogue if catalogue is not None else test.tools
    for c in contestants:
        taken = sorted(n for n in c.meta_tools if tools.has(n))
        if taken:
            raise ValueError(f"contestant {c.name!r}: catalogue tools named like its {taken}")
    results: list[RunResult] = []
    for plan, demo in enumerate(test.demos):
        for contestant in contestants:
            task = AgentTask(plan, demo, tools, len(demo.calls) + EXTRA_STEPS, system_prompt)
            if contestant.binds_all and max_prompt_tokens is not None:
                size = all_tools_prompt(task, endpoint.counter)
                if size > max_prompt_tokens:
                    results.append(
                        RunResult(
                            contestant.name,
                            plan,
                            "does_not_fit",
                            len(demo.calls),
                            prompt_tokens=size,
                        )
                    )
                    continue
            results.append(_run_one(contestant, task, demo, tools, endpoint))
        if log is not None:
            log(f"plan {plan + 1}/{len(test.demos)} done")
    return results


def _run_one(
    contestant: Contestant,
    task: AgentTask,
    demo: Demonstration,
    tools: Toolset,
    endpoint: BenchEndpoint,
) -> RunResult:
    endpoint.begin(contestant.name, task.plan, task.step_limit)
    start = time.perf_counter()
    error: str | None = None
    try:
        contestant.run(task)
    except Exception as exc:  # scored as this run's failure, never a crash of the sweep
        error = f"{type(exc).__name__}: {exc}"[:300]
    wall = (time.perf_counter() - start) * 1000.0
    run_log = endpoint.end()
    if run_log.missing is not None:
        raise StepNotCachedError(
            f"replay: the answer to {run_log.missing} is not in the step cache "
            f"{endpoint.cache.path} (model {endpoint.model!r}); a replay sends no request"
        )
    if run_log.fault is not None:
        return RunResult(
            contestant.name,
            task.plan,
            "endpoint_error",
            len(demo.calls),
            error=f"{run_log.fault}: {error}" if error else run_log.fault,
            model_calls=len(run_log.calls),
            wall_ms=wall,
        )
    if run_log.limit_hit:
        error = None  # the limit is the endpoint's refusal, scored as step_limit
    res = score_log(run_log, demo, tools, contestant.meta_tools, error=error)
    res.wall_ms = wall
    return res


FIGURES = (
    "success",
    "precision",
    "recall",
    "outside_calls",
    "unbound_calls",
    "model_calls",
    "reasks",
    "prompt_tokens",
    "model_ms",
    "wall_ms",
)
"""Figures with an interval over plans (all but precision and recall are per run)."""

REPLAYED_FIGURES = tuple(f for f in FIGURES if f != "wall_ms")
"""Figures a replay rebuilds exactly (wall time is measured anew)."""


def plan_sums(runs: Sequence[RunResult], n_plans: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per plan, the (numerator, denominator) of every figure of one contestant's scored runs.

    Precision is matched calls over calls made and recall matched calls over gold calls,
    both summed over the plans a replicate draws; the others are totals over runs.
    """
    sums = {f: (np.zeros(n_plans), np.zeros(n_plans)) for f in FIGURES}
    for r in runs:
        if not r.scored:
            continue
        if not 0 <= r.plan < n_plans:
            raise ValueError(f"run of plan {r.plan} is outside the {n_plans} test plans")
        parts = {
            "success": (float(r.success), 1.0),
            "precision": (float(r.matched), float(len(r.called))),
            "recall": (float(r.matched), float(r.n_gold)),
            "outside_calls": (float(r.outside), 1.0),
            "unbound_calls": (float(r.unbound), 1.0),
            "model_calls": (float(r.model_calls), 1.0),
            "reasks": (float(r.reasks), 1.0),
            "prompt_tokens": (float(r.prompt_tokens), 1.0),
            "model_ms": (r.model_ms, 1.0),
            "wall_ms": (r.wall_ms, 1.0),
        }
        for figure, (num, den) in parts.items():
            sums[figure][0][r.plan] += num
            sums[figure][1][r.plan] += den
    return sums


COMPARED = (
    ("success_diff", "success", False),
    ("precision_diff", "precision", False),
    ("recall_diff", "recall", False),
    ("model_calls_diff", "model_calls", False),
    ("prompt_tokens_ratio", "prompt_tokens", True),
)
"""(name, figure, quotient) of a paired comparison: A - B, or A / B for a quotient."""


def summarize(
    runs: Sequence[RunResult],
    names: Sequence[str],
    n_plans: int,
    *,
    reference: str = REFERENCE,
    n_boot: int = N_BOOTSTRAP,
    seed: int = 0,
) -> dict[str, Any]:
    """Figures per contestant with 95% bootstrap intervals over plans, and paired comparisons.

    Args:
        runs: Every run.
        names: The contestants, in report order.
        n_plans: Test plans.
        reference: The contestant compared with every other (default `REFERENCE`; when it
            is not among `names`, the first contestant with a scored run).
        n_boot: Bootstrap replicates.
        seed: Seed of the resampling.

    Returns:
        ``{"contestants": {name: figures}, "comparisons": [...]}``. A comparison's
        ``success_diff`` carries a ``verdict`` (``beats``, ``loses to``, ``no clear
        difference``: whether its interval excludes 0).
    """
    by_name = {n: [r for r in runs if r.contestant == n] for n in names}
    sums = {n: plan_sums(rs, n_plans) for n, rs in by_name.items()}
    out: dict[str, Any] = {"level": LEVEL, "n_boot": n_boot, "contestants": {}}
    for name, rs in by_name.items():
        figures: dict[str, Any] = {}
        for figure, (num, den) in sums[name].items():
            est = unit_ratio_estimate(num, den, n_boot=n_boot, seed=seed)
            figures[figure] = estimate_json(est, int(np.count_nonzero(den)))
        unfit = [r for r in rs if r.status == "does_not_fit"]
        out["contestants"][name] = {
            "runs": len(rs),
            "scored": sum(r.scored for r in rs),
            "endpoint_errors": sum(r.status == "endpoint_error" for r in rs),
            "does_not_fit": len(unfit),
            "does_not_fit_prompt_tokens": max((r.prompt_tokens for r in unfit), default=None),
            "failures": {
                reason: sum(r.failure == reason for r in rs if r.scored)
                for reason in FAILURE_REASONS
            },
            "usage_reported": all(r.usage_reported for r in rs if r.scored and r.model_calls),
            "successes_after_reask": sum(r.success and r.reasks > 0 for r in rs if r.scored),
            **figures,
        }
    scored = [n for n in names if out["contestants"][n]["scored"]]
    ref = reference if reference in by_name else (scored or list(names) or [reference])[0]
    comparisons: list[dict[str, Any]] = []
    for other in names:
        if other == ref:
            continue
        comp: dict[str, Any] = {"a": ref, "b": other}
        a_info, b_info = out["contestants"][ref], out["contestants"][other]
        if not a_info["scored"] or not b_info["scored"]:
            who = other if not b_info["scored"] else ref
            comp["skipped"] = f"{who} has no scored run (does not fit, or endpoint errors)"
            comparisons.append(comp)
            continue
        for key, figure, quotient in COMPARED:
            a, b = sums[ref][figure], sums[other][figure]
            est = paired_unit_ratio(a, b, quotient=quotient, n_boot=n_boot, seed=seed)
            units = int(np.count_nonzero((a[1] > 0) & (b[1] > 0)))
            comp[key] = estimate_json(est, units)
            if not quotient and math.isfinite(est.mean):
                comp[key]["verdict"] = verdict(est)
        comparisons.append(comp)
    out["comparisons"] = comparisons
    return out


def results_json(
    runs: Sequence[RunResult],
    names: Sequence[str],
    n_plans: int,
    *,
    meta: Mapping[str, Any],
    n_boot: int = N_BOOTSTRAP,
    seed: int = 0,
) -> dict[str, Any]:
    """The results JSON: `meta` (dataset, model, provenance ...), the summary, every run."""
    return {
        "kind": REPORT_KIND,
        **meta,
        "n_plans": n_plans,
        "contestant_order": list(names),
        **summarize(runs, names, n_plans, n_boot=n_boot, seed=seed),
        "runs": [dataclasses.asdict(r) for r in runs],
    }


__all__ = [
    "COMPARED",
    "CONTESTANT_IDS",
    "DEFAULT_CONTESTANTS",
    "EXTRA_STEPS",
    "FIGURES",
    "META_TOOLS",
    "REFERENCE",
    "REPLAYED_FIGURES",
    "REPORT_KIND",
    "RETRIEVE_TOOL",
    "SEARCH_TOOL",
    "SYSTEM_PROMPT",
    "AgentTask",
    "Contestant",
    "RunResult",
    "all_tools_prompt",
    "api_dataset",
    "api_split",
    "plan_sums",
    "results_json",
    "run_agent_bench",
    "score_log",
    "simulated_result",
    "summarize",
]
