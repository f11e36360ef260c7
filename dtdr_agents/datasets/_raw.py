"""The published record formats as pydantic models, and how a bad record is reported (internal).

Each loader declares its raw format as `RawRecord` subclasses next to its reading code;
`parse` validates one record and sends a malformed one to `Report.malformed` with the file,
the line and the field (``calling[2].api``) in the message. Models are strict (a number is not
a string) and ignore fields they do not name; fields a loader reads leniently are typed `Any`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, StringConstraints, ValidationError

from dtdr_agents.datasets._io import Report

Name = Annotated[str, StringConstraints(min_length=1)]
"""A non-empty string."""


def _or_empty_dict(value: Any) -> Any:
    return value or {}


def _or_empty_list(value: Any) -> Any:
    return value or []


OrEmptyDict = BeforeValidator(_or_empty_dict)
"""A missing or empty (false) value reads as ``{}``."""
OrEmptyList = BeforeValidator(_or_empty_list)
"""A missing or empty (false) value reads as ``[]``."""


class RawRecord(BaseModel):
    """Base of the raw record models: strict types, other fields ignored, read-only."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    named_by: ClassVar[tuple[str, str] | None] = None
    """``(kind, field)``: errors start with ``kind 'value': `` when the record has that field."""


M = TypeVar("M", bound=RawRecord)

_TAG = re.compile(r"^(str|int|float|bool|none|\w+\[.*\]|[\w-]+\[.*)$")
"""What pydantic adds to an error's location for the member of a union (not a field)."""


def field_path(loc: tuple[int | str, ...]) -> str:
    """``('calling', 2, 'api')`` as ``calling[2].api``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def describe(exc: ValidationError, model: type[RawRecord], at: str = "") -> str:
    """The first validation error as a sentence naming the field and what it should be.

    `at` is where the record sits in its file (``nodes[3]``), before the field's path.
    """
    err = exc.errors(include_url=False)[0]
    loc, hint = _field(model, tuple(err["loc"]))
    name = field_path(loc)
    name = f"{at}.{name}" if at and name else at or name
    if err["type"] == "missing":
        return f"missing field {name!r}{hint}"
    msg = str(err["msg"])
    got = "null" if err["input"] is None else type(err["input"]).__name__
    return f"field {name!r}{hint}: {msg[:1].lower()}{msg[1:]}, got {got}"


def _field(model: type[RawRecord], loc: tuple[int | str, ...]) -> tuple[tuple[int | str, ...], str]:
    """`loc` without pydantic's union tags, and `` (description)`` of the field it names."""
    current: Any = model
    info = None
    kept: list[int | str] = []
    for part in loc:
        fields = getattr(current, "model_fields", None)
        if isinstance(part, int) or (part in fields if fields else not _TAG.match(part)):
            kept.append(part)
        if isinstance(part, str) and fields is not None and part in fields:
            info = fields[part]
            current = _inner_model(info.annotation)
    hint = f" ({info.description})" if info is not None and info.description else ""
    return tuple(kept), hint


def _inner_model(annotation: Any) -> Any:
    """The model inside ``list[Model]`` / ``Model | None`` annotations, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def parse(
    model: type[M],
    record: Any,
    report: Report,
    path: Path | str,
    line: int | None,
    at: str = "",
    prefix: str = "",
) -> M | None:
    """`record` as a `model`, or None after reporting it as malformed (raise or skip).

    `at` names the record inside its file or sample (``nodes[3]``), before the field's path;
    `prefix` starts the message (``"sample 'a1': "``).
    """
    if not isinstance(record, Mapping):
        where = f"{at}: " if at else ""
        got = type(record).__name__
        report.malformed(f"{prefix}{where}expected a JSON object, got {got}", path, line)
        return None
    try:
        return model.model_validate(record)
    except ValidationError as exc:
        if model.named_by is not None and not prefix:
            kind, key = model.named_by
            value = record.get(key)
            if isinstance(value, str) and value:
                prefix = f"{kind} {value!r}: "
        report.malformed(prefix + describe(exc, model, at), path, line)
        return None
