"""Progress bars (tqdm) for long loops of the library, off unless asked for.

On a terminal a bar redraws itself in place (with carriage returns). When standard error is
not a terminal (a log file, CI) the same tqdm bar prints plain lines instead, one every
`PLAIN_INTERVAL_S` seconds at most and one when it ends, so a log reads as a few complete
lines rather than one long line of carriage returns.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any

PLAIN_INTERVAL_S = 15.0
"""Seconds between two progress lines when standard error is not a terminal."""

Progress = Callable[[Iterable[Any], str, int], Iterable[Any]]
"""Wraps an iterable with a description and a total: `progress(items, desc, total)`."""


def no_progress(items: Iterable[Any], desc: str, total: int) -> Iterable[Any]:
    """The iterable unchanged (no bar)."""
    return items


class PlainLines:
    """A text stream for tqdm that turns each redraw into one plain line (for log files).

    tqdm redraws with a carriage return and the text; this writes the text, stripped, and a
    newline, and drops the blank redraws that erase a bar.
    """

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        """Write the last non-blank redraw of `text` as a line; returns len(text)."""
        shown = [part.strip() for part in text.split("\r") if part.strip()]
        if shown:
            self.stream.write(shown[-1] + "\n")
        return len(text)

    def flush(self) -> None:
        """Flush the underlying stream."""
        self.stream.flush()


def is_terminal(stream: IO[str]) -> bool:
    """Whether `stream` is an interactive terminal (False when it cannot tell)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except ValueError:  # a closed stream
        return False


def bar_options(stream: IO[str] | None = None) -> dict[str, Any]:
    """The tqdm options for `stream` (default standard error): a bar, or plain lines."""
    stream = sys.stderr if stream is None else stream
    if is_terminal(stream):
        return {"file": stream, "leave": False, "mininterval": 0.5}
    return {
        "file": PlainLines(stream),
        "leave": True,  # the last line says where it ended
        "mininterval": PLAIN_INTERVAL_S,
        "maxinterval": PLAIN_INTERVAL_S,
        "ncols": 80,
        "ascii": True,
    }


def progress_bar(enabled: bool) -> Progress | None:
    """A tqdm bar on standard error when `enabled` (plain lines off a terminal), else None."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    def wrap(items: Iterable[Any], desc: str, total: int) -> Iterable[Any]:
        bar: Iterable[Any] = tqdm(items, desc=f"{desc:>10}", total=total, **bar_options())
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
        delay=TICK_DELAY_S,
        bar_format="{desc}: {n:.0f} s",
        **bar_options(),
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
