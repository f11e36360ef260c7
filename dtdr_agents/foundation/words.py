"""Words of user-facing messages: counts with the right plural, and "did you mean" hints."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

SUGGEST_CUTOFF = 0.6
"""Similarity (difflib's ratio) a known name needs to be suggested for a mistyped one."""


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``"1 problem"``, ``"2 problems"``, ``"0 problems"``; `plural_form` for irregular nouns."""
    return f"{count:,} {noun if count == 1 else plural_form or noun + 's'}"


def did_you_mean(names: Iterable[str], known: Iterable[str]) -> str:
    """A hint for mistyped names, e.g. ``" (did you mean 'search_flights'?)"``; "" if none is close.

    Each name gets its closest known name (`difflib.get_close_matches`, case-insensitive);
    names with none are left out of the hint. With several names each suggestion says which
    name it is for: ``" (did you mean 'search_flights' for 'serch_flights'?)"``.
    """
    by_lower: dict[str, str] = {}
    for name in known:
        by_lower.setdefault(name.lower(), name)
    asked = list(dict.fromkeys(names))
    pairs: list[tuple[str, str]] = []
    for name in asked:
        match = difflib.get_close_matches(name.lower(), by_lower, n=1, cutoff=SUGGEST_CUTOFF)
        if match and by_lower[match[0]] != name:
            pairs.append((name, by_lower[match[0]]))
    if not pairs:
        return ""
    if len(asked) == 1:
        return f" (did you mean {pairs[0][1]!r}?)"
    return " (did you mean " + ", ".join(f"{good!r} for {bad!r}" for bad, good in pairs) + "?)"


__all__ = ["SUGGEST_CUTOFF", "did_you_mean", "plural"]
