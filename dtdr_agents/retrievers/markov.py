"""N-order Markov chains over tool-call histories (DTDR paper, Appendix C and Algorithm 3)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from dtdr_agents.foundation.errors import ModelArrayError

START = -1
"""Label of the 'start' padding symbol."""
UNSEEN = -2
"""Label of a history tool the model never saw (added after fit): matches no key."""
_NO_TOKEN = -3  # fills unused key slots in the saved table

GLOBAL = -1
"""Group id of the chains built from all demonstrations."""

Key = tuple[int, ...]


def history_key(history: Sequence[int], order: int) -> Key:
    """The last `order` labels of `history`, left-padded with `START` (the paper's 'start')."""
    if order <= 0:
        return ()
    tail = tuple(history[-order:])
    return (START,) * (order - len(tail)) + tail


class MarkovTables:
    """Next-label counts keyed by (group, history key) for several orders at once.

    A group is a k-means cluster (or `GLOBAL`); the key's length is the chain's order.

    Args:
        n_labels: Size of the label space (tools + end-of-plan).
        orders: The orders to count (e.g. (3,) for the paper, (1, 2, 3) for backoff).
    """

    def __init__(self, n_labels: int, orders: Iterable[int]) -> None:
        self.n_labels = n_labels
        self.orders = tuple(sorted(set(orders), reverse=True))
        if not self.orders or min(self.orders) < 0:
            raise ValueError(f"orders must be integers >= 0, got {orders}")
        self._counts: dict[tuple[int, Key], dict[int, float]] = defaultdict(dict)
        self._frozen: dict[tuple[int, Key], tuple[np.ndarray, np.ndarray]] = {}

    def add_sequence(self, group: int, labels: Sequence[int], end_label: int) -> None:
        """Count every transition of one plan (its calls, then end-of-plan) in `group`."""
        seq = [*labels, end_label]
        for t, target in enumerate(seq):
            hist = seq[:t]
            for order in self.orders:
                bucket = self._counts[(group, history_key(hist, order))]
                bucket[target] = bucket.get(target, 0.0) + 1.0

    def freeze(self) -> MarkovTables:
        """Turn the counts into arrays for fast lookup; returns self."""
        self._frozen = {
            key: (
                np.fromiter(bucket.keys(), dtype=np.int64, count=len(bucket)),
                np.fromiter(bucket.values(), dtype=np.float64, count=len(bucket)),
            )
            for key, bucket in self._counts.items()
        }
        return self

    def lookup(self, group: int, key: Key) -> tuple[np.ndarray, np.ndarray] | None:
        """(next labels, counts) seen after `key` in `group`, or None if the key is unseen."""
        return self._frozen.get((group, key))

    def distribution(self, group: int, key: Key, *, weighted: bool = True) -> np.ndarray | None:
        """P(next | key) over all labels (weighted: empirical; else uniform over successors)."""
        hit = self._frozen.get((group, key))
        if hit is None:
            return None
        labels, counts = hit
        out = np.zeros(self.n_labels, dtype=np.float64)
        if weighted:
            out[labels] = counts / counts.sum()
        else:
            out[labels] = 1.0 / len(labels)
        return out

    def __len__(self) -> int:
        return len(self._frozen)

    # --------------------------------------------------------------------------- persistence
    def to_arrays(self) -> dict[str, np.ndarray]:
        """Flat arrays: rows of (group, order, key..., next) and their counts."""
        width = max(max(self.orders), 1)
        rows: list[list[int]] = []
        counts: list[float] = []
        for (group, key), (labels, cnt) in self._frozen.items():
            padded = list(key) + [_NO_TOKEN] * (width - len(key))
            for label, c in zip(labels.tolist(), cnt.tolist(), strict=True):
                rows.append([group, len(key), *padded, label])
                counts.append(c)
        table = np.array(rows, dtype=np.int64).reshape(len(rows), width + 3)
        return {"markov_rows": table, "markov_counts": np.array(counts, dtype=np.float64)}

    @classmethod
    def from_arrays(
        cls,
        n_labels: int,
        orders: Iterable[int],
        arrays: dict[str, np.ndarray],
        *,
        n_groups: int | None = None,
    ) -> MarkovTables:
        """Rebuild tables saved by `to_arrays`, checking every row and count.

        Args:
            n_labels: Size of the label space (tools + end-of-plan).
            orders: The orders the tables were counted for.
            arrays: The saved "markov_rows" and "markov_counts".
            n_groups: The number of clusters (groups 0..n_groups-1, and `GLOBAL`); None
                leaves the groups unchecked.

        Raises:
            ModelArrayError: Naming the array when a row or a count is out of range.
        """
        tables = cls(n_labels, orders)
        try:
            rows, counts = arrays["markov_rows"], arrays["markov_counts"]
        except KeyError as exc:
            raise ModelArrayError(str(exc.args[0]), "is missing") from None
        width = max(max(tables.orders), 1)
        if rows.ndim != 2 or rows.shape[1] != width + 3:
            raise ModelArrayError(
                "markov_rows",
                f"has shape {list(rows.shape)}, not (rows, {width + 3}) for the orders "
                f"{list(tables.orders)}",
            )
        if counts.shape != (len(rows),):
            raise ModelArrayError(
                "markov_counts", f"has shape {list(counts.shape)}, not ({len(rows)},)"
            )
        _check_rows(rows, n_labels, tables.orders, n_groups)
        bad = np.flatnonzero(~(np.isfinite(counts) & (counts > 0)))
        if len(bad):
            raise ModelArrayError(
                "markov_counts",
                f"must hold finite counts > 0 (each counts a transition seen in the "
                f"demonstrations); entry {int(bad[0])} is {counts[bad[0]]!r}",
            )
        for row, c in zip(rows.tolist(), counts.tolist(), strict=True):
            group, order = row[0], row[1]
            key = tuple(row[2 : 2 + order])
            tables._counts[(group, key)][row[-1]] = c
        return tables.freeze()


def _check_rows(
    rows: np.ndarray, n_labels: int, orders: tuple[int, ...], n_groups: int | None
) -> None:
    """Each saved row is (group, order, key padded with `_NO_TOKEN`, next label), all in range."""
    if rows.dtype.kind not in "iu":
        raise ModelArrayError("markov_rows", f"has dtype {rows.dtype}, not integers")
    if not len(rows):
        return
    width = rows.shape[1] - 3
    group, order, keys, target = rows[:, 0], rows[:, 1], rows[:, 2:-1], rows[:, -1]
    slot = np.arange(width)[None, :]
    in_key = slot < order[:, None]
    upper = n_groups if n_groups is not None else np.iinfo(np.int64).max
    label_ok = (keys == START) | ((keys >= 0) & (keys < n_labels - 1))  # end-of-plan ends keys
    problems = (
        (~np.isin(order, orders), "an order the model does not count"),
        ((group < GLOBAL) | (group >= upper), "a cluster out of range"),
        (np.where(in_key, ~label_ok, keys != _NO_TOKEN).any(axis=1), "a history key out of range"),
        ((target < 0) | (target >= n_labels), "a next label out of range"),
    )
    for bad, what in problems:
        where = np.flatnonzero(bad)
        if len(where):
            raise ModelArrayError(
                "markov_rows", f"row {int(where[0])} ({rows[where[0]].tolist()}) has {what}"
            )
    if len(np.unique(rows, axis=0)) != len(rows):
        raise ModelArrayError("markov_rows", "holds the same transition twice")
