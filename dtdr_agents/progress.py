"""Progress bars (tqdm) for long loops of the library, off unless asked for."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

Progress = Callable[[Iterable[Any], str, int], Iterable[Any]]
"""Wraps an iterable with a description and a total: `progress(items, desc, total)`."""


def no_progress(items: Iterable[Any], desc: str, total: int) -> Iterable[Any]:
    """The iterable unchanged (no bar)."""
    return items


def progress_bar(enabled: bool) -> Progress | None:
    """A tqdm bar on standard error when `enabled`, else None."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    def wrap(items: Iterable[Any], desc: str, total: int) -> Iterable[Any]:
        bar: Iterable[Any] = tqdm(
            items, desc=f"{desc:>10}", total=total, file=sys.stderr, leave=False, mininterval=0.5
        )
        return bar

    return wrap
