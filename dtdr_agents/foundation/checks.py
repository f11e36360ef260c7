"""One check for numeric parameters and options: a finite number in range, named in errors.

Estimators call it where they validate (`ToolRetriever._check_params`, which `fit` and
`load` run); `SelectionPolicy` calls it when it is built. NaN, infinity, a bool or a string
is never a number here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _describe(
    low: float | None, high: float | None, low_open: bool, high_open: bool, integer: bool
) -> str:
    kind = "an integer" if integer else "a number"
    if low is not None and high is not None:
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        return f"{kind} in {left}{low:g}, {high:g}{right}"
    if low is not None:
        return f"{kind} {'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"{kind} {'<' if high_open else '<='} {high:g}"
    return kind if integer else "a finite number"


def check_number(
    value: Any,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    integer: bool = False,
    optional: bool = False,
) -> None:
    """Refuse `value` unless it is a finite number in the given range.

    Args:
        value: The value given.
        name: The parameter's name for the message (e.g. "prior_weight").
        low: Smallest value allowed (None: no lower bound).
        high: Largest value allowed (None: no upper bound).
        low_open: Exclude `low` itself.
        high_open: Exclude `high` itself.
        integer: Require an integer (a float such as 2.0 is refused).
        optional: Allow None.

    Raises:
        ValueError: Naming the parameter, the range and the value given.
    """
    if value is None and optional:
        return
    kinds: tuple[type, ...] = (
        (int, np.integer) if integer else (int, float, np.integer, np.floating)
    )
    ok = isinstance(value, kinds) and not isinstance(value, bool | np.bool_)
    if ok:
        number = float(value)
        ok = (
            math.isfinite(number)
            and (low is None or (number > low if low_open else number >= low))
            and (high is None or (number < high if high_open else number <= high))
        )
    if not ok:
        expected = _describe(low, high, low_open, high_open, integer)
        raise ValueError(
            f"{name} must be {expected}{' or None' if optional else ''}, got {value!r}"
        )


def check_probability(value: Any, name: str, *, optional: bool = False) -> None:
    """Refuse `value` unless it is a number in [0, 1] (a probability or a fraction)."""
    check_number(value, name, low=0.0, high=1.0, optional=optional)
