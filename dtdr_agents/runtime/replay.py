"""Replay recorded plans through the integration runtime with a scripted plan-following model.

No chat model is involved: at every step the "model" calls the next planned tool (teacher
forcing), so the figures describe the binding itself. For each plan, the runtime selects and
binds the tools of every model call (one per planned call, then the final answer), exactly as
an agent would with the same `SelectionPolicy`. This is how the ``hard``
and ``cache="append"`` bindings are compared: bound-schema tokens against prefix reuse (the
share of model calls whose tools array starts with the previous call's, what provider prompt
caches need) against bound-tool recall (the share of plan steps where a tool the plan allows
next was bound).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dtdr_agents.foundation.types import END_OF_PLAN, Demonstration
from dtdr_agents.runtime import StepRecord, StepSelector

__all__ = ["ReplaySummary", "replay_plans"]


@dataclass(frozen=True)
class ReplaySummary:
    """Binding figures over replayed plans (pooled over every model call or plan step).

    Attributes:
        runs: Plans replayed (one turn each).
        model_calls: Model calls (planned calls plus one final answer per plan).
        prefix_reuse: Share of the calls after the first of a turn whose tools array starts
            with the previous call's.
        bound_tokens_per_call: Mean bound-schema tokens per model call.
        uncached_tokens_per_call: Mean bound-schema tokens per call outside the previous
            call's tools array when the array starts with it (all of them otherwise): the
            tool tokens a provider prefix cache would not cover.
        tools_per_call: Mean number of tools bound per model call.
        recall: Share of plan steps (final answers excluded) where a tool the plan allows
            next was bound.
        prefix_breaks: Calls after the first of a turn whose tools array does not start with
            the previous call's (prompt-cache misses of the tools prefix).
    """

    runs: int
    model_calls: int
    prefix_reuse: float | None
    bound_tokens_per_call: float
    uncached_tokens_per_call: float
    tools_per_call: float
    recall: float | None
    prefix_breaks: int


def replay_plans(selector: StepSelector, demos: Iterable[Demonstration]) -> ReplaySummary:
    """Replay `demos` through `selector` (teacher-forced history, no LLM).

    Args:
        selector: The runtime's step selector (catalogue, retriever, policies).
        demos: Plans to replay; their calls must be tools of the selector's catalogue.
    """
    runs = calls = pairs = kept = tokens = uncached = n_tools = steps = hits = 0
    for demo in demos:
        runs += 1
        previous: StepRecord | None = None
        for plan_step in demo.steps():
            step = selector.select(demo.query, plan_step.history, previous=previous)
            calls += 1
            tokens += step.bound_tokens
            n_tools += len(step.bound)
            reused = previous is not None and step.bound[: len(previous.bound)] == previous.bound
            if previous is not None:
                pairs += 1
                kept += reused
            uncached += step.bound_tokens - (previous.bound_tokens if reused and previous else 0)
            if plan_step.target != END_OF_PLAN:
                steps += 1
                hits += bool(plan_step.acceptable.intersection(step.bound))
            previous = step
    return ReplaySummary(
        runs=runs,
        model_calls=calls,
        prefix_reuse=kept / pairs if pairs else None,
        bound_tokens_per_call=tokens / calls if calls else 0.0,
        uncached_tokens_per_call=uncached / calls if calls else 0.0,
        tools_per_call=n_tools / calls if calls else 0.0,
        recall=hits / steps if steps else None,
        prefix_breaks=pairs - kept,
    )
