"""What the command modules share: the error type and argument parsers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from dtdr_agents.errors import DTDRError


class CLIError(DTDRError):
    """A bad command-line input; `main` prints `error: ...` and exits with status 2."""


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
