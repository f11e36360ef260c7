"""Pure scoring of one live agent run against its gold plan.

A run is the ordered list of catalogue tools the model called (meta-tools such as a search
tool left out), whether it stopped on its own (a final answer with no tool call) and what
went wrong. Nothing here rounds, mutates its inputs or touches a model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

FAILURE_REASONS = (
    "agent_error",
    "loop",
    "step_limit",
    "unknown_tool",
    "unparseable",
    "no_stop",
    "wrong_plan",
)
"""Why a run failed, in the order a run's single reason is chosen (first that applies)."""

LOOP_REPEATS = 3
"""A run loops when one call (same tool, same arguments) is made this many times."""


def matched_calls(called: Sequence[str], gold: Sequence[str]) -> int:
    """Calls that match a gold call, each gold call matched at most once (multiset overlap)."""
    have, want = Counter(called), Counter(gold)
    return sum(min(n, want[name]) for name, n in have.items())


def order_allowed(
    called: Sequence[str],
    gold: Sequence[str],
    edges: Sequence[tuple[int, int]] | None,
) -> bool:
    """Whether `called` performs exactly the gold calls in an order the edges allow.

    Each called tool is matched to one gold call of the same name whose predecessors (edges
    ``(i, j)``: call ``j`` needs call ``i`` first) are already matched; with a repeated tool
    every assignment is tried. `edges` None means the recorded order is the only one;
    ``()`` means any order.

    Args:
        called: Tool names in the order the agent called them.
        gold: The gold plan's tool names.
        edges: The gold plan's dependency edges (indices into `gold`).
    """
    if Counter(called) != Counter(gold):
        return False
    if edges is None:
        return list(called) == list(gold)
    needs: dict[int, set[int]] = {j: set() for j in range(len(gold))}
    for i, j in edges:
        needs[j].add(i)

    def place(pos: int, done: frozenset[int]) -> bool:
        if pos == len(called):
            return True
        for j, name in enumerate(gold):
            free = j not in done and name == called[pos] and needs[j] <= done
            if free and place(pos + 1, done | {j}):
                return True
        return False

    return place(0, frozenset())


def plan_success(
    called: Sequence[str],
    gold: Sequence[str],
    edges: Sequence[tuple[int, int]] | None,
    *,
    stopped: bool,
    outside: int = 0,
) -> bool:
    """The right tools, each as often as the plan calls it, in an allowed order, then a stop.

    Args:
        called: Catalogue tools called, in order.
        gold: The gold plan's tools.
        edges: The gold plan's dependency edges (see `order_allowed`).
        stopped: The model ended the run itself (a final answer with no tool call).
        outside: Calls of tools outside the catalogue (any fails the plan).
    """
    return stopped and outside == 0 and order_allowed(called, gold, edges)


def call_precision(called: Sequence[str], gold: Sequence[str]) -> float | None:
    """Share of the run's calls that match a gold call; None when it made no call."""
    return matched_calls(called, gold) / len(called) if called else None


def call_recall(called: Sequence[str], gold: Sequence[str]) -> float | None:
    """Share of the gold calls the run made; None for an empty gold plan."""
    return matched_calls(called, gold) / len(gold) if gold else None


def loops(calls: Sequence[tuple[str, str]], repeats: int = LOOP_REPEATS) -> bool:
    """Whether one (tool, arguments) call occurs at least `repeats` times."""
    return any(n >= repeats for n in Counter(calls).values())


def failure_reason(
    *,
    success: bool,
    error: bool = False,
    looped: bool = False,
    step_limit: bool = False,
    outside: int = 0,
    unparseable: int = 0,
    stopped: bool = True,
) -> str | None:
    """The one reason a run failed (the first of `FAILURE_REASONS` that applies), or None."""
    if success:
        return None
    flags = (
        ("agent_error", error),
        ("loop", looped),
        ("step_limit", step_limit),
        ("unknown_tool", outside > 0),
        ("unparseable", unparseable > 0),
        ("no_stop", not stopped),
    )
    return next((name for name, on in flags if on), "wrong_plan")


__all__ = [
    "FAILURE_REASONS",
    "LOOP_REPEATS",
    "call_precision",
    "call_recall",
    "failure_reason",
    "loops",
    "matched_calls",
    "order_allowed",
    "plan_success",
]
