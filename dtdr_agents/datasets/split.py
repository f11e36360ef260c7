"""A seeded train/test split that keeps every tool's occurrences about 70/30.

The DTDR paper sets aside about 30% of each dataset for testing "ensuring that the number of
occurrences in train and test data for each tool follows the 70/30 ratio". A plain random
split does not: a tool used 10 times can easily land 10/0. `split_demonstrations` uses
*iterative stratification* (Sechidis, Tsoumakas and Vlahavas, 2011), the standard algorithm
for multi-label data, with the tools of a plan as its labels and call counts as weights,
followed by a local refinement:

1. Shuffle the demonstrations with `seed` (this fixes every tie-break).
2. Desired counts: the test side should receive ``test_size`` of the demonstrations and
   ``test_size`` of every tool's calls; the train side the rest.
3. Repeat until every tool is placed: take the tool with the fewest unassigned calls (ties:
   the one seen first in the shuffled order) and give each unassigned demonstration that calls
   it, in shuffled order, to the side that still wants most of that tool *relative to the
   side's share* (ties: the side that wants most demonstrations, relatively; then train);
   subtract its calls from that side's wants. Rare tools are placed first, while both sides
   still have room for them.
4. Demonstrations without calls go to the side that wants most demonstrations.
5. Refine: move single demonstrations (in shuffled order, at most 20 passes) to the other
   side while that lowers ``sum_t (test_t - r * n_t)^2 / n_t + (L / N) * (test - r * N)^2``
   (``n_t`` calls of tool ``t``, ``L`` tools, ``N`` demonstrations, ``r = test_size``), and
   never beyond 1% of ``N`` (or the greedy pass's own deviation) from the overall target.
   The greedy pass can leave a tool that co-occurs with many rarer tools off the ratio, or,
   on a library of tools used once or twice (Seal-Tools), the overall size off; this fixes
   both.

A tool used once cannot be split: it lands on either side. The result depends only on the
demonstrations (order and content) and the seed.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from dtdr_agents.datasets.base import Dataset
from dtdr_agents.foundation.types import Demonstration


def split_demonstrations(
    demos: Sequence[Demonstration], test_size: float = 0.3, seed: int = 0
) -> tuple[list[Demonstration], list[Demonstration]]:
    """Split demonstrations into train and test, keeping each tool's calls near the ratio.

    Args:
        demos: The demonstrations.
        test_size: The fraction of demonstrations (and of each tool's calls) for testing,
            strictly between 0 and 1.
        seed: Seed of the shuffle that breaks ties; the same inputs and seed give the same
            split.

    Returns:
        ``(train, test)``, each in the input order.

    Raises:
        ValueError: `test_size` is not strictly between 0 and 1.
    """
    if not isinstance(test_size, int | float) or not 0.0 < float(test_size) < 1.0:
        raise ValueError(f"test_size must be strictly between 0 and 1, got {test_size!r}")
    n = len(demos)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    counts = [Counter(d.calls) for d in demos]

    # Desired counts per side: index 0 = train, 1 = test.
    frac = (1.0 - float(test_size), float(test_size))
    want_n = [n * (1.0 - test_size), n * float(test_size)]
    total: Counter[str] = Counter()
    for c in counts:
        total.update(c)
    want: dict[str, list[float]] = {
        t: [k * (1.0 - test_size), k * float(test_size)] for t, k in total.items()
    }

    # Unassigned demonstrations per tool, in shuffled order; tool ties by first appearance.
    by_tool: dict[str, list[int]] = {}
    for d in order:
        for t in counts[d]:
            by_tool.setdefault(t, []).append(d)
    remaining = {t: float(total[t]) for t in by_tool}
    tool_rank = {t: r for r, t in enumerate(by_tool)}
    side: list[int | None] = [None] * n

    def assign(d: int, s: int) -> None:
        side[d] = s
        want_n[s] -= 1
        for t, k in counts[d].items():
            want[t][s] -= k
            remaining[t] -= k

    while remaining:
        tool = min(remaining, key=lambda t: (remaining[t], tool_rank[t]))
        for d in by_tool[tool]:
            if side[d] is not None:
                continue
            assign(d, _pick(want[tool], want_n, frac))
        del remaining[tool]
        for t in [t for t, r in remaining.items() if r <= 0]:
            del remaining[t]
    for d in order:
        if side[d] is None:
            assign(d, _pick(want_n, want_n, frac))
    final = [s for s in side if s is not None]
    assert len(final) == n  # every demonstration has a side by now
    _refine(order, counts, final, total, n, float(test_size))
    train = [demos[d] for d in range(n) if final[d] == 0]
    test = [demos[d] for d in range(n) if final[d] == 1]
    return train, test


def split_dataset(
    dataset: Dataset, test_size: float = 0.3, seed: int = 0
) -> tuple[Dataset, Dataset]:
    """`split_demonstrations` on a dataset: two datasets sharing its catalogue and problems.

    Args:
        dataset: The dataset to split.
        test_size: The test fraction (see `split_demonstrations`).
        seed: The seed (see `split_demonstrations`).

    Returns:
        ``(train, test)`` datasets with the same tools, tool graph, problems and source.
    """
    train, test = split_demonstrations(dataset.demos, test_size=test_size, seed=seed)
    return replace(dataset, demos=tuple(train)), replace(dataset, demos=tuple(test))


def _pick(want: Sequence[float], want_n: Sequence[float], frac: Sequence[float]) -> int:
    """The side that wants most, relative to its share: this tool first, then overall."""
    rel = (want[0] / frac[0], want[1] / frac[1])
    if abs(rel[0] - rel[1]) > 1e-9:
        return 0 if rel[0] > rel[1] else 1
    rel_n = (want_n[0] / frac[0], want_n[1] / frac[1])
    return 1 if rel_n[1] > rel_n[0] + 1e-9 else 0


_MAX_PASSES = 20
_SIZE_TOLERANCE = 0.01


def _refine(
    order: Sequence[int],
    counts: Sequence[Counter[str]],
    side: list[int],
    total: Counter[str],
    n: int,
    test_size: float,
) -> None:
    """Move single demonstrations across while that lowers the deviation from the ratio.

    The deviation is ``sum_t (test_t - r * total_t)^2 / total_t + (L / n) (n_test - r n)^2``
    (``L`` tools): each tool's test calls relative to its count, plus the number of test
    demonstrations, weighted as much as all tools together. A move may not take the number of
    test demonstrations further than `_SIZE_TOLERANCE` of `n` (or the starting deviation)
    from its target. Demonstrations are tried in the shuffled order, for at most
    `_MAX_PASSES` passes (or until a pass moves nothing), so the result is deterministic.
    """
    dev: dict[str, float] = {t: -test_size * k for t, k in total.items()}
    dev_n = -test_size * n
    for d in range(n):
        if side[d] == 1:
            dev_n += 1
            for t, k in counts[d].items():
                dev[t] += k
    band = max(1.0, _SIZE_TOLERANCE * n, abs(dev_n))
    size_weight = max(1, len(total)) / max(1, n)
    for _ in range(_MAX_PASSES):
        moved = False
        for d in order:
            sign = 1.0 if side[d] == 0 else -1.0
            if abs(dev_n + sign) > band:
                continue
            delta = ((dev_n + sign) ** 2 - dev_n**2) * size_weight
            for t, k in counts[d].items():
                x = dev[t]
                delta += ((x + sign * k) ** 2 - x * x) / total[t]
            if delta < -1e-12:
                side[d] = 1 - side[d]
                dev_n += sign
                for t, k in counts[d].items():
                    dev[t] += sign * k
                moved = True
        if not moved:
            break
