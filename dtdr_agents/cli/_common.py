"""What the command modules share: the error type and argument parsers."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from dtdr_agents.errors import DTDRError


class CLIError(DTDRError):
    """A bad command-line input; `main` prints `error: ...` and exits with status 2."""


BAD_INPUT: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    KeyError,
    OSError,
    MemoryError,
    OverflowError,
    RecursionError,
)
"""Exceptions `main` reports as `error: ...` (exit 2) besides `DTDRError`: bad values and
files reach library code as these."""


def describe_error(exc: BaseException) -> str:
    """A one-line message for a bad-input exception (with the file for OS errors)."""
    if isinstance(exc, OSError) and exc.filename is not None:
        reason = exc.strerror or type(exc).__name__
        return f"{exc.filename}: {reason}"
    if isinstance(exc, KeyError) and exc.args:
        return f"{type(exc).__name__}: {exc.args[0]}"
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, ValueError | TypeError) else f"{type(exc).__name__}: {text}"


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def non_empty(text: str) -> str:
    """An argparse type: a string that is not blank."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def parse_value(text: str) -> Any:
    """A `--param` value: JSON when it parses (numbers, booleans, lists), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_params(pairs: Sequence[str] | None, option: str = "--param") -> dict[str, Any]:
    """`key=value` pairs as a dict (dashes in keys become underscores)."""
    out: dict[str, Any] = {}
    for pair in pairs or ():
        if "=" not in pair:
            raise CLIError(f"{option} expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        key = key.strip().replace("-", "_")
        if not key:
            raise CLIError(f"{option} expects key=value, got {pair!r}")
        out[key] = parse_value(value)
    return out


def split_ids(text: str | None, default: Sequence[str]) -> list[str]:
    """A comma-separated id list, or `default` when empty."""
    if not text:
        return list(default)
    ids = [t.strip() for t in text.split(",") if t.strip()]
    if not ids:
        raise CLIError(f"no ids in {text!r}")
    return ids
