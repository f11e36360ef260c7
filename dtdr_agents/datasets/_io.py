"""Shared reading helpers for the dataset loaders (internal).

Everything here is format-agnostic: the problem log that decides between raising and
skipping, the collector that applies `limit` and drops exact duplicates, the tool catalogue,
and the JSON-schema conversion used for the published tool specs. Reading the files
themselves is in `dtdr_agents.datasets._json`.

Problem messages written through `Report` start with what the loader did, so they can be
counted: ``"skipped: ..."`` (the record is not in the dataset), ``"repaired: ..."`` (kept
after a documented fix) or ``"kept: ..."`` (kept as published, with a remark).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypedDict, cast

from dtdr_agents.datasets._json import first_char, iter_json_array, iter_jsonl, read_text
from dtdr_agents.datasets.base import Problem
from dtdr_agents.foundation.errors import (
    DatasetFormatError,
    InvalidDemonstrationError,
    InvalidToolError,
)
from dtdr_agents.foundation.folder_read import special_kind
from dtdr_agents.foundation.types import CallArguments, Demonstration, Tool, Toolset

UnknownTools = Literal["skip", "add", "error"]
"""What a loader does with a call to a tool missing from the published catalogue.

- ``"skip"``: leave the sample out and record a `Problem` (the catalogue stays as published).
- ``"add"``: keep the sample, add the name to the catalogue with no description, record a
  `Problem`.
- ``"error"``: treat the sample as malformed (raise, or skip it when ``skip_bad=True``).
"""

_UNKNOWN_TOOLS_CHOICES = ("skip", "add", "error")


class DatasetNotFoundError(DatasetFormatError, FileNotFoundError):
    """A dataset file or folder is missing; the message names it and says what was expected."""


def where(path: Path | str, line: int | None = None) -> str:
    """The ``path:line`` label used in problems and errors."""
    return f"{path}:{line}" if line is not None else str(path)


def check_unknown_tools(value: str) -> UnknownTools:
    """Validate an ``unknown_tools`` option."""
    if value not in _UNKNOWN_TOOLS_CHOICES:
        raise ValueError(f"unknown_tools must be one of {_UNKNOWN_TOOLS_CHOICES}, got {value!r}")
    return cast(UnknownTools, value)


def check_limit(limit: int | None) -> int | None:
    """Validate a ``limit`` option (None or a non-negative integer)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be None or a non-negative integer, got {limit!r}")
    return limit


class LoadOptions(TypedDict, total=False):
    """The options every loader takes (``**options``); see `dtdr_agents.datasets`."""

    unknown_tools: UnknownTools
    """Calls to tools missing from the catalogue: ``"skip"``, ``"add"`` or ``"error"``."""
    skip_bad: bool
    """Skip malformed records (recording a `Problem`) instead of raising."""
    limit: int | None
    """Keep at most this many demonstrations."""
    keep_duplicates: bool
    """Keep exact duplicate samples instead of skipping them."""


@dataclasses.dataclass(frozen=True)
class Load:
    """One load call's options, checked: the unknown-tools policy and the problem report."""

    policy: UnknownTools
    report: Report
    limit: int | None
    keep_duplicates: bool

    def collector(self) -> Collector:
        """The collector of this call's demonstrations (checks ``limit``)."""
        return Collector(self.report, limit=self.limit, keep_duplicates=self.keep_duplicates)


def check_options(loader: str, options: LoadOptions) -> None:
    """Raise TypeError, as Python does, for a keyword `loader` does not take."""
    for key in options:
        if key not in LoadOptions.__annotations__:
            raise TypeError(f"{loader}() got an unexpected keyword argument {key!r}")


def start_load(loader: str, options: LoadOptions, unknown_tools: UnknownTools = "skip") -> Load:
    """Check a loader's `options` (an unknown one is a TypeError, as for any keyword)."""
    check_options(loader, options)
    return Load(
        policy=check_unknown_tools(options.get("unknown_tools", unknown_tools)),
        report=Report(options.get("skip_bad", False)),
        limit=options.get("limit"),
        keep_duplicates=options.get("keep_duplicates", False),
    )


class Report:
    """The problems of one load call, and the skip-or-raise policy for malformed records.

    Args:
        skip_bad: False: the first malformed record raises `DatasetFormatError` naming the
            file and line. True: it is skipped and recorded as a problem.
    """

    def __init__(self, skip_bad: bool) -> None:
        self.skip_bad = skip_bad
        self._problems: list[Problem] = []

    @property
    def problems(self) -> tuple[Problem, ...]:
        """The problems recorded so far, in the order they were found."""
        return tuple(self._problems)

    def malformed(self, message: str, path: Path | str, line: int | None) -> None:
        """A record that does not follow the format: raise, or skip it and record why."""
        if not self.skip_bad:
            raise DatasetFormatError(message, str(path), line)
        self._problems.append(Problem(where(path, line), f"skipped: {message}"))

    def skipped(self, message: str, path: Path | str, line: int | None = None) -> None:
        """Record a well-formed sample left out on purpose (e.g. unknown tools, a cycle)."""
        self._problems.append(Problem(where(path, line), f"skipped: {message}"))

    def repaired(self, message: str, path: Path | str, line: int | None = None) -> None:
        """Record a sample kept after a documented repair."""
        self._problems.append(Problem(where(path, line), f"repaired: {message}"))

    def kept(self, message: str, path: Path | str, line: int | None = None) -> None:
        """Record a sample kept as published, with a remark."""
        self._problems.append(Problem(where(path, line), f"kept: {message}"))


class Collector:
    """Gathers demonstrations: applies ``limit``, drops exact duplicates, keeps ids unique.

    An exact duplicate (same query, calls and edges as an earlier sample) is skipped unless
    ``keep_duplicates`` is True, because a copy on both sides of a train/test split inflates
    the scores. A sample whose id is already taken by a *different* sample is kept and its id
    gets a ``#2``, ``#3``... suffix. Both are recorded as problems.
    """

    def __init__(self, report: Report, *, limit: int | None, keep_duplicates: bool) -> None:
        self.report = report
        self.limit = check_limit(limit)
        self.keep_duplicates = keep_duplicates
        self.demos: list[Demonstration] = []
        self._seen: dict[tuple[Any, ...], str] = {}
        self._ids: dict[str, str] = {}

    @property
    def full(self) -> bool:
        """True once ``limit`` demonstrations have been kept."""
        return self.limit is not None and len(self.demos) >= self.limit

    def add(self, demo: Demonstration, path: Path | str, line: int | None) -> bool:
        """Keep `demo` (returns True) unless it is an exact duplicate (returns False)."""
        here = where(path, line)
        key = (demo.query, demo.calls, demo.edges)
        first = self._seen.get(key)
        if first is not None and not self.keep_duplicates:
            label = f"sample {demo.id!r}" if demo.id is not None else "this sample"
            self.report.skipped(
                f"{label} is an exact duplicate of the sample at {first}", path, line
            )
            return False
        self._seen.setdefault(key, here)
        if demo.id is not None:
            if demo.id in self._ids:
                n = 2
                while f"{demo.id}#{n}" in self._ids:
                    n += 1
                new_id = f"{demo.id}#{n}"
                self.report.repaired(
                    f"id {demo.id!r} is already used at {self._ids[demo.id]}; "
                    f"renamed to {new_id!r}",
                    path,
                    line,
                )
                demo = dataclasses.replace(demo, id=new_id)
            self._ids[demo.id] = here  # type: ignore[index]
        self.demos.append(demo)
        return True


def make_demo(
    report: Report,
    path: Path | str,
    line: int | None,
    query: Any,
    calls: Sequence[str],
    edges: Iterable[tuple[int, int]] | None,
    demo_id: str | None,
    arguments: Sequence[CallArguments] | None = None,
) -> Demonstration | None:
    """Build a `Demonstration`; a malformed one is reported (raise or skip) and gives None."""
    try:
        return Demonstration(
            query=query,
            calls=tuple(calls),
            edges=None if edges is None else tuple(edges),
            id=demo_id,
            arguments=None if arguments is None else tuple(arguments),
        )
    except InvalidDemonstrationError as exc:
        report.malformed(str(exc), path, line)
        return None


def call_arguments(
    values: Sequence[Any],
    labels: Sequence[str | None],
    field: str,
    report: Report,
    path: Path | str,
    line: int | None,
    order: Sequence[int] | None = None,
) -> list[CallArguments] | None:
    """The recorded arguments of a sample's calls, or None when one is not a JSON object.

    A sample whose arguments cannot be read keeps its calls (retrieval does not need the
    arguments); its parameter filling is not scored, which is reported.

    Args:
        values: Each call's arguments as published.
        labels: Each call's result label (or None).
        field: The field's name for the report, with ``{k}`` for the call's position.
        report: Where the remark goes.
        path: The sample's file.
        line: The sample's line.
        order: The plan's order (`OrderedPlan.order`): the result follows the reordered calls.
    """
    out: list[CallArguments] = []
    for k, (value, label) in enumerate(zip(values, labels, strict=True)):
        try:
            out.append(CallArguments.of(value, label))
        except InvalidDemonstrationError as exc:
            report.kept(
                f"{field.format(k=k)}: {exc}; the sample's parameter filling is not scored",
                path,
                line,
            )
            return None
    return out if order is None else [out[k] for k in order]


# ----------------------------------------------------------------------------- files


def require_file(path: Path, what: str) -> Path:
    """Return `path` if it is a file, else raise `DatasetNotFoundError` saying what it is."""
    if not path.is_file():
        if path.is_dir():
            raise DatasetNotFoundError(f"expected {what} here, found a folder", str(path))
        kind = special_kind(path)
        if kind is not None:
            raise DatasetNotFoundError(
                f"expected {what} here, found {kind}, not a regular file", str(path)
            )
        raise DatasetNotFoundError(f"{what} not found", str(path))
    return path


def require_dir(path: Path, what: str) -> Path:
    """Return `path` if it is a folder, else raise `DatasetNotFoundError`."""
    if not path.is_dir():
        raise DatasetNotFoundError(f"{what} not found (expected a folder)", str(path))
    return path


def require_exists(path: Path | str, what: str) -> Path:
    """Return `path` as a Path if it exists (file or folder), else raise."""
    p = Path(path)
    if not p.exists():
        raise DatasetNotFoundError(f"{what} not found", str(p))
    return p


# ----------------------------------------------------------------------------- tools

_JSON_TYPES: Mapping[str, Mapping[str, str]] = {
    "str": {"type": "string"},
    "string": {"type": "string"},
    "text": {"type": "string"},
    "int": {"type": "integer"},
    "integer": {"type": "integer"},
    "float": {"type": "number"},
    "number": {"type": "number"},
    "double": {"type": "number"},
    "bool": {"type": "boolean"},
    "boolean": {"type": "boolean"},
    "list": {"type": "array"},
    "array": {"type": "array"},
    "tuple": {"type": "array"},
    "dict": {"type": "object"},
    "object": {"type": "object"},
    "date": {"type": "string", "format": "date"},
    "datetime": {"type": "string", "format": "date-time"},
    "time": {"type": "string", "format": "time"},
}


def json_type(name: Any) -> dict[str, Any]:
    """JSON-schema type keywords for a type name as written in a published spec.

    Python-style names (``str``, ``int``, ``list[str]``) and JSON-schema names are both
    understood; an unknown name gives ``{}`` (any value) rather than a guess.
    """
    if not isinstance(name, str):
        return {}
    key = name.strip().lower()
    inner = ""
    if "[" in key and key.endswith("]"):
        key, inner = key[:-1].split("[", 1)
    out: dict[str, Any] = dict(_JSON_TYPES.get(key.strip(), {}))
    if out.get("type") == "array" and inner and "," not in inner:
        items = json_type(inner)
        if items:
            out["items"] = items
    return out


def object_schema(
    properties: Mapping[str, Mapping[str, Any]], required: Iterable[str] = ()
) -> dict[str, Any]:
    """An object schema from ``name -> {type?, description?, enum?, default?}`` entries."""
    props: dict[str, Any] = {}
    for pname, spec in properties.items():
        entry: dict[str, Any] = json_type(spec.get("type"))
        desc = spec.get("description", spec.get("desc"))
        if isinstance(desc, str) and desc:
            entry["description"] = desc
        enum = spec.get("enum", spec.get("allowed_values"))
        if isinstance(enum, list) and enum:
            entry["enum"] = list(enum)
        if "default" in spec:
            entry["default"] = spec["default"]
        elif "default_value" in spec:
            entry["default"] = spec["default_value"]
        props[str(pname)] = entry
    schema: dict[str, Any] = {"type": "object", "properties": props}
    req = [r for r in required if r in props]
    if req:
        schema["required"] = req
    return schema


class Catalogue:
    """An ordered, growing tool catalogue with placeholder tools for unknown names."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._where: dict[str, str] = {}
        self.placeholders: list[str] = []
        self._placeholder_set: set[str] = set()

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def is_placeholder_or_missing(self, name: str) -> bool:
        """True for a name not in the catalogue, or added only as a placeholder."""
        return name not in self._tools or name in self._placeholder_set

    def get(self, name: str) -> Tool | None:
        """The tool called `name`, or None."""
        return self._tools.get(name)

    def first_seen(self, name: str) -> str:
        """Where the tool called `name` was defined."""
        return self._where[name]

    def add(self, tool: Tool, here: str) -> None:
        """Add `tool` (the caller checks for duplicates first)."""
        self._tools[tool.name] = tool
        self._where[tool.name] = here

    def add_placeholder(self, name: str, here: str) -> None:
        """Add a tool known only by name (no description, empty schema)."""
        if name not in self._tools:
            self.add(Tool(name=name), here)
            self.placeholders.append(name)
            self._placeholder_set.add(name)

    def toolset(self, path: Path | str) -> Toolset:
        """The catalogue as a `Toolset`; an empty catalogue is a format error."""
        if not self._tools:
            raise DatasetFormatError("no tools found: the tool catalogue is empty", str(path))
        return Toolset(self._tools.values())


def add_tool(catalogue: Catalogue, report: Report, raw: Any, path: Path, line: int | None) -> None:
    """Parse one tool record with `Tool.from_any` and add it, reporting bad or duplicate ones."""
    try:
        tool = Tool.from_any(raw)
    except InvalidToolError as exc:
        report.malformed(f"bad tool definition: {exc}", path, line)
        return
    if tool.name in catalogue:
        report.malformed(
            f"duplicate tool name {tool.name!r} "
            f"(first defined at {catalogue.first_seen(tool.name)})",
            path,
            line,
        )
        return
    catalogue.add(tool, where(path, line))


def read_tools_file(path: Path, report: Report) -> Catalogue:
    """Read a tools file for the generic loaders.

    Accepted: a JSON list of tool dicts / OpenAI tool schemas, a JSON object with a ``"tools"``
    list, a JSON object mapping names to descriptions, a single tool object, or JSON lines of
    tool dicts / OpenAI schemas.
    """
    require_file(path, "tools file")
    catalogue = Catalogue()
    head = first_char(path)
    if head == "[":
        for _, line, item in iter_json_array(path):
            add_tool(catalogue, report, item, path, line)
        return catalogue
    try:
        whole = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise DatasetFormatError(f"invalid JSON: {exc.msg}", str(path), exc.lineno) from None
        for line, item in iter_jsonl(path, report):
            add_tool(catalogue, report, item, path, line)
        return catalogue
    if isinstance(whole, Mapping) and isinstance(whole.get("tools"), list):
        for item in whole["tools"]:
            add_tool(catalogue, report, item, path, None)
    elif isinstance(whole, Mapping) and ("name" in whole or "function" in whole):
        add_tool(catalogue, report, whole, path, 1)
    elif isinstance(whole, Mapping) and all(isinstance(v, str) for v in whole.values()):
        for name, desc in whole.items():
            add_tool(catalogue, report, {"name": name, "description": desc}, path, None)
    else:
        raise DatasetFormatError(
            "a tools file must be a JSON list of tools, an object with a 'tools' list, a "
            "name -> description object, or JSON lines of tools",
            str(path),
            1,
        )
    return catalogue


def resolve_unknown(
    names: Sequence[str],
    catalogue: Catalogue,
    policy: UnknownTools,
    report: Report,
    path: Path,
    line: int | None,
    catalogue_label: str,
) -> bool:
    """Apply the ``unknown_tools`` policy to a sample's call names; True if it is kept."""
    unknown = list(dict.fromkeys(n for n in names if catalogue.is_placeholder_or_missing(n)))
    if not unknown:
        return True
    shown = ", ".join(repr(n) for n in unknown)
    message = f"calls tools not in {catalogue_label}: {shown}"
    if policy == "error":
        report.malformed(message, path, line)
        return False
    if policy == "skip":
        report.skipped(message, path, line)
        return False
    for name in unknown:
        catalogue.add_placeholder(name, where(path, line))
    report.kept(message + "; added them to the catalogue without a description", path, line)
    return True


def text_of(value: Any) -> Iterator[str]:
    """Every string inside a JSON value (recursively, keys excluded)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from text_of(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from text_of(v)
