"""Parameter filling: read a model's arguments, check them against the signature, match gold.

The DTDR paper's success rate (Appendix D, Algorithm 2) needs, at every step, the right
function *and* the right arguments. After the model selects a function, the same model fills
its arguments (`dtdr_agents.evaluation.e2e.protocol.ProtocolBuilder.argument_request`); this module
scores that answer. Pure functions, no network.

Normalisation (the comparison is made on normalised values):

* an argument whose value is null counts as absent, on both sides;
* strings: surrounding whitespace removed, inner runs of whitespace made one space, case
  folded; a string that reads as a JSON number (``"85"``, ``" 40.7 "``) is that number, and
  ``"true"`` / ``"false"`` are booleans (published gold values are often quoted numbers);
* numbers: integers and floats compare by value (``85 == 85.0``); booleans are never numbers;
* lists compare element by element in order, objects key by key (both normalised).

The signature check: an argument the signature does not declare, a missing required
argument, or a value that does not parse as the declared JSON-schema type (``string``
accepts any scalar, ``integer`` an integral number or a string of one, ``number`` a number
or a numeric string, ``boolean`` a boolean or ``"true"`` / ``"false"``, ``array`` a list,
``object`` an object; an undeclared type accepts anything) fails the step. A string that
names an earlier call's result label (``"$var1.distance$"``, ``"API_call_0"``,
``"<node-0>"``) is a reference to that output and fits any type. The gold answer is the
reference for the signature too: where the dataset's own gold value breaks its signature
(Seal-Tools, NESTFUL have a few), an answer equal to it passes. A failure is a reason
string, never an exception.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_SPACE = re.compile(r"\s+")
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class ArgumentScore:
    """The outcome of one parameter-filling answer.

    Attributes:
        match: True when the arguments parse, fit the signature and equal a gold answer.
        reason: Why not (``"not a JSON object"``, ``"type: ..."``, ``"mismatch: ..."``), or
            None on a match.
    """

    match: bool
    reason: str | None = None

    @property
    def kind(self) -> str | None:
        """The failure's class: ``json``, ``unknown``, ``missing``, ``type`` or ``mismatch``."""
        if self.reason is None:
            return None
        first = self.reason.split(maxsplit=1)[0].rstrip(":")
        return "json" if first == "not" else first


def parse_arguments(raw: Any) -> dict[str, Any] | None:
    """The arguments of a tool call as a dict (a JSON text or a mapping), or None if not one."""
    if isinstance(raw, Mapping):
        return dict(raw)
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _number(value: Any) -> float | None:
    """`value` as a number (a JSON number or a string of one), or None; never a boolean."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return float(value.strip())
    return None


def _boolean(value: Any) -> bool | None:
    """`value` as a boolean (a JSON boolean, ``"true"`` or ``"false"``), or None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().casefold() in ("true", "false"):
        return value.strip().casefold() == "true"
    return None


def normalise(value: Any) -> Any:
    """The comparable form of an argument value (see the module docstring).

    Numbers and booleans are tagged (``("num", 85.0)``, ``("bool", True)``) so that they
    never compare equal to each other, as Python's ``1 == True`` would.
    """
    if value is None:
        return None
    number, boolean = _number(value), _boolean(value)
    if number is not None:
        return ("num", number)
    if boolean is not None:
        return ("bool", boolean)
    if isinstance(value, str):
        return _SPACE.sub(" ", value.strip()).casefold()
    if isinstance(value, Mapping):
        return {str(k): normalise(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [normalise(v) for v in value]
    return value


def _fits(value: Any, kind: Any) -> bool:
    """Whether `value` parses as the JSON-schema type `kind` (a name or a list of names)."""
    if isinstance(kind, list):
        return any(_fits(value, k) for k in kind)
    if kind == "string":
        return isinstance(value, str | int | float) and not isinstance(value, bool)
    if kind == "integer":
        number = _number(value)
        return number is not None and math.isfinite(number) and number.is_integer()
    if kind == "number":
        return _number(value) is not None
    if kind == "boolean":
        return _boolean(value) is not None
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, Mapping)
    if kind == "null":
        return value is None
    return True  # no type, or one this check does not know: any value


def _is_reference(value: Any, labels: Sequence[str]) -> bool:
    """Whether `value` is a string naming one of `labels` (an earlier call's output)."""
    return isinstance(value, str) and any(
        re.search(rf"(?<![A-Za-z0-9_]){re.escape(label)}(?![A-Za-z0-9_])", value)
        for label in labels
    )


def check_signature(
    arguments: Mapping[str, Any], schema: Mapping[str, Any], labels: Sequence[str] = ()
) -> str | None:
    """Why `arguments` do not fit the tool's JSON schema, or None when they do.

    Args:
        arguments: The arguments.
        schema: The tool's JSON schema.
        labels: Result labels of the calls so far (a value naming one is a reference).
    """
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    given = {k: v for k, v in arguments.items() if v is not None}
    if props:
        unknown = sorted(set(given) - set(props))
        if unknown:
            return f"unknown argument(s) {', '.join(map(repr, unknown))}"
    required = schema.get("required")
    if isinstance(required, list):
        missing = [r for r in required if r not in given]
        if missing:
            return f"missing required argument(s) {', '.join(map(repr, missing))}"
    for name, value in given.items():
        spec = props.get(name)
        if _is_reference(value, labels):
            continue
        if isinstance(spec, Mapping) and not _fits(value, spec.get("type")):
            return f"type: {name!r} should be {spec.get('type')}, got {json.dumps(value)[:80]}"
    return None


def score_arguments(
    raw: Any,
    gold: Sequence[Mapping[str, Any]],
    schema: Mapping[str, Any],
    labels: Sequence[str] = (),
) -> ArgumentScore:
    """Score a model's arguments against the gold arguments of the acceptable calls.

    Args:
        raw: The model's arguments (JSON text or a mapping; anything else fails).
        gold: The gold arguments of every acceptable call of the selected function (several
            when the function may come next more than once); a match with any one counts.
        schema: The function's JSON schema (its ``parameters``).
        labels: Result labels of the calls so far.

    Returns:
        The `ArgumentScore`.
    """
    arguments = parse_arguments(raw)
    if arguments is None:
        return ArgumentScore(False, "not a JSON object")
    problem = check_signature(arguments, schema, labels)
    mine = normalise(arguments)
    for g in gold:
        if mine == normalise(g) and (
            problem is None or check_signature(g, schema, labels) is not None
        ):
            return ArgumentScore(True)
    if problem is not None:
        return ArgumentScore(False, problem)
    if not gold:
        return ArgumentScore(False, "mismatch: no gold arguments for this function here")
    differs = sorted(
        k for k in set(mine) | set(normalise(gold[0])) if mine.get(k) != normalise(gold[0]).get(k)
    )
    return ArgumentScore(False, f"mismatch: {', '.join(map(repr, differs))}")


__all__ = [
    "ArgumentScore",
    "check_signature",
    "normalise",
    "parse_arguments",
    "score_arguments",
]
