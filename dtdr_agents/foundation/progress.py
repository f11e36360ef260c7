"""Progress bars (tqdm) for long loops of the library, off unless asked for."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
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


TICK_DELAY_S = 2.0
"""A `ticking` bar appears only once its block has run this long."""


@contextmanager
def ticking(progress: Progress | None, desc: str) -> Iterator[None]:
    """While the block runs, a bar counting its seconds, shown after `TICK_DELAY_S`.

    For work with no steps to count (a retriever's `fit`); nothing when `progress` is None or
    `no_progress`.
    """
    if progress is None or progress is no_progress:
        yield
        return
    from tqdm.auto import tqdm

    bar = tqdm(
        desc=f"{desc:>10}",
        unit="s",
        file=sys.stderr,
        leave=False,
        delay=TICK_DELAY_S,
        bar_format="{desc}: {n:.0f} s",
    )
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(1.0):
            bar.update(1)

    thread = threading.Thread(target=tick, name="dtdr-ticking", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        bar.close()
