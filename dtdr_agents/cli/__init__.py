"""The `dtdr-agents` command line. All argparse code lives in this package.

Each command group is a module here with `add_commands(subparsers)`; its commands call library
code (`dtdr_agents.evaluation.bench`, `dtdr_agents.evaluation.report`, ...). A new group is one
module plus one entry in `GROUPS`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import TextIO

from dtdr_agents._version import __version__
from dtdr_agents.cli._common import BAD_INPUT, CLIError, describe_error
from dtdr_agents.foundation.errors import DTDRError

GROUPS = (
    "dtdr_agents.cli.core",  # demo, fit, rank, speed
    "dtdr_agents.cli.bench",  # bench, stats, report
    "dtdr_agents.cli.e2e",  # e2e (end-to-end function calling)
    "dtdr_agents.cli.agent_bench",  # agent-bench (live agents against other tool selections)
    "dtdr_agents.cli.mcp",  # mcp-proxy (history-aware MCP proxy)
    "dtdr_agents.cli.planning",  # toolqp-speed (ToolQP planning overhead)
    "dtdr_agents.cli.recommend",  # recommend-bench (tool sets: TRACC, size, calibration)
    "dtdr_agents.cli.store",  # store import, store stats (the run store)
    "dtdr_agents.cli.encoder",  # export-encoder (MiniLM on ONNX Runtime, serving without torch)
)
"""Modules that add commands, in help order."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `dtdr-agents`."""
    parser = argparse.ArgumentParser(
        prog="dtdr-agents",
        description="Dynamic tool retrieval for tool-calling agents (DTDR-C, DTDR-L, baselines).",
    )
    parser.add_argument("--version", action="version", version=f"dtdr-agents {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in GROUPS:
        importlib.import_module(name).add_commands(sub)
    return parser


PROCESS_GC_THRESHOLD = (10_000, 10, 10)
"""Collector thresholds of a process that runs one command (Python's default: 700, 10, 10)."""


@contextlib.contextmanager
def process_gc() -> Iterator[None]:
    """Tune the cyclic garbage collector for a process that runs one command, then exits.

    Importing torch, transformers and sentence-transformers builds a graph of objects that
    lives until exit. With the default thresholds the collector walks it again and again
    while the encoder loads, and once more at exit (together over 1 s of CPU in a `rank` of
    about 5 s). Inside this block it collects less often; on leaving, `gc.freeze()` leaves
    the surviving objects to the operating system. Use it only where the process ends next.
    """
    previous = gc.get_threshold()
    gc.set_threshold(*PROCESS_GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*previous)
        gc.freeze()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `dtdr-agents` console script.

    With `argv` None (the console script, ``python -m dtdr_agents``) this process runs one
    command and exits, so the collector is tuned for that (`process_gc`).
    """
    if argv is not None:
        return _run(argv)
    with process_gc():
        return _run(None)


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """Print a warning as one line `warning: ...` (no source file and line of the library)."""
    print(f"warning: {message}", file=sys.stderr if file is None else file)


def _run(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (None: this process's arguments), run the command, return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # reports record the command line
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            code: int = args.func(args)
    except DTDRError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BAD_INPUT as exc:
        # Bad values reach library code as these; say what was wrong, never a traceback
        # (DTDR_AGENTS_DEBUG=1 shows it).
        if os.environ.get("DTDR_AGENTS_DEBUG"):
            raise
        print(f"error: {describe_error(exc)}", file=sys.stderr)
        return 2
    return code


__all__ = ["GROUPS", "PROCESS_GC_THRESHOLD", "CLIError", "build_parser", "main", "process_gc"]
