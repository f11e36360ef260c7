"""Put a plan's calls in a dependency order.

`Demonstration` needs its calls listed so that every dependency edge ``(i, j)`` has ``i < j``.
Published files do not always list them that way (TaskBench lists the nodes of many plans in
alphabetical order, and a link may point backwards), so the loaders pass every plan through
`order_plan`, which returns a *stable* topological order: the recorded order is kept wherever
the edges allow it, and the edges are renumbered to the new positions.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from dtdr_agents.foundation.errors import InvalidDemonstrationError


class PlanCycleError(InvalidDemonstrationError):
    """The dependency edges of a plan form a cycle, so no call order satisfies them.

    Attributes:
        cycle: Positions (in the input order) of the calls on one cycle, first one repeated
            at the end.
    """

    def __init__(self, message: str, cycle: tuple[int, ...]) -> None:
        super().__init__(message)
        self.cycle = cycle


class OrderedPlan(NamedTuple):
    """A plan in dependency order.

    Attributes:
        calls: The calls, reordered.
        edges: The edges as ``(i, j)`` positions in `calls` with ``i < j``, sorted and without
            duplicates; None when the input had no edges (recorded order only).
        order: ``order[k]`` is the input position of ``calls[k]``.
    """

    calls: tuple[str, ...]
    edges: tuple[tuple[int, int], ...] | None
    order: tuple[int, ...]

    @property
    def reordered(self) -> bool:
        """True when the calls had to move."""
        return self.order != tuple(range(len(self.order)))


def order_plan(calls: Sequence[str], edges: Iterable[tuple[int, int]] | None) -> OrderedPlan:
    """Order `calls` so that every edge goes forward, moving as little as possible.

    Kahn's algorithm that always takes the ready call with the smallest input position, so
    the result is deterministic, equals the input when the input is already in a dependency
    order, and otherwise keeps independent calls in their recorded order.

    Args:
        calls: Tool names in the recorded order (repeats allowed: a tool called twice).
        edges: ``(i, j)`` input positions meaning call ``j`` needs call ``i``; ``i > j`` is
            allowed (that is what gets fixed). None means "recorded order only" and is
            returned unchanged.

    Returns:
        The reordered plan with renumbered edges.

    Raises:
        InvalidDemonstrationError: An edge points outside the calls or from a call to itself.
        PlanCycleError: The edges form a cycle; the message names the calls on it.
    """
    names = tuple(calls)
    n = len(names)
    if edges is None:
        return OrderedPlan(names, None, tuple(range(n)))
    pairs: set[tuple[int, int]] = set()
    for edge in edges:
        i, j = (int(x) for x in edge)
        if not (0 <= i < n and 0 <= j < n):
            raise InvalidDemonstrationError(f"edge ({i}, {j}) is outside the {n} calls")
        if i == j:
            raise InvalidDemonstrationError(f"edge ({i}, {j}) links call {i} to itself")
        pairs.add((i, j))
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for i, j in sorted(pairs):
        succ[i].append(j)
        indeg[j] += 1
    ready = [k for k in range(n) if indeg[k] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for j in succ[k]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, j)
    if len(order) < n:
        cycle = _find_cycle(n, pairs, set(order))
        shown = " -> ".join(f"{k} ({names[k]!r})" for k in cycle)
        raise PlanCycleError(f"the dependency edges form a cycle: {shown}", cycle)
    position = {old: new for new, old in enumerate(order)}
    new_edges = tuple(sorted({(position[i], position[j]) for i, j in pairs}))
    return OrderedPlan(tuple(names[k] for k in order), new_edges, tuple(order))


def _find_cycle(n: int, pairs: set[tuple[int, int]], done: set[int]) -> tuple[int, ...]:
    """One cycle among the calls Kahn's algorithm could not place (smallest start first)."""
    preds: dict[int, list[int]] = {k: [] for k in range(n) if k not in done}
    for i, j in sorted(pairs):
        if i not in done and j not in done:
            preds[j].append(i)
    # Every remaining call has a remaining predecessor: walk backwards until a call repeats.
    start = min(preds)
    path = [start]
    seen = {start: 0}
    while True:
        prev = preds[path[-1]][0]
        if prev in seen:
            loop = path[seen[prev] :]
            loop.reverse()  # walked against the edges: turn it around
            return (*loop, loop[0])
        seen[prev] = len(path)
        path.append(prev)
