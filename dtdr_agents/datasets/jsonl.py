"""The generic JSON-lines format: one demonstration per line, plus an optional tools file.

Demonstrations file, one JSON object per line::

    {"query": "...", "calls": ["a", {"name": "b"}], "edges": [[0, 1]], "id": "x-1"}

- ``calls``: tool names, or objects with a ``"name"`` (other keys, such as arguments, are
  ignored).
- ``edges``: ``[i, j]`` pairs meaning call ``j`` needs call ``i``; calls may be listed in any
  order (they are put in a dependency order, see `order_plan`). Missing or null: the recorded
  order is the only acceptable order. ``[]``: the calls are independent.
- ``id``: optional; strings and numbers are accepted.

This is what `Demonstration.to_dict` writes, so ``load_jsonl`` reads files written by the
package back.

Tools file (optional): a JSON list of tool dicts or OpenAI tool schemas, JSON lines of them,
an object with a ``"tools"`` list, or a name -> description object (see `Tool.from_any`).
Without one, the catalogue is built from the call names (no descriptions) and a `Problem`
says so. A call to a tool missing from a given tools file is malformed by default
(``unknown_tools="error"``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Unpack

from pydantic import Field

from dtdr_agents.datasets._io import (
    Catalogue,
    LoadOptions,
    Report,
    make_demo,
    read_tools_file,
    require_file,
    resolve_unknown,
    start_load,
    where,
)
from dtdr_agents.datasets._json import (
    iter_jsonl,
)
from dtdr_agents.datasets._raw import Name, RawRecord, parse
from dtdr_agents.datasets.base import Dataset, Problem
from dtdr_agents.datasets.plans import order_plan
from dtdr_agents.foundation.errors import DatasetFormatError, InvalidDemonstrationError
from dtdr_agents.foundation.types import Toolset
from dtdr_agents.foundation.words import did_you_mean


def load_jsonl(
    path: str | Path,
    tools_path: str | Path | None = None,
    *,
    name: str = "jsonl",
    **options: Unpack[LoadOptions],
) -> Dataset:
    """Load demonstrations from a JSON-lines file (and tools from a tools file).

    Args:
        path: The demonstrations file (``.jsonl``).
        tools_path: The tools file; None builds the catalogue from the call names.
        name: The dataset name to report.
        **options: ``skip_bad``, ``limit``, ``keep_duplicates`` (see `dtdr_agents.datasets`) and
            ``unknown_tools``: What to do with calls to tools missing from `tools_path`
            (``"error"``: malformed line; ``"skip"``; ``"add"``). Ignored without a tools file.

    Returns:
        The dataset, demonstrations in file order.

    Raises:
        DatasetFormatError: A line is malformed (with ``skip_bad=False``); the message names
            the file and line.
        DatasetNotFoundError: A file is missing.
    """
    path = require_file(Path(path), "demonstrations file")
    load = start_load("load_jsonl", options, unknown_tools="error")
    policy = load.policy
    report = load.report
    if tools_path is not None:
        catalogue = read_tools_file(Path(tools_path), report)
        from_names = False
        known = catalogue.toolset(Path(tools_path)).names if len(catalogue) else ()
    else:
        catalogue = Catalogue()
        from_names = True
        known = ()
    out = load.collector()
    records = 0
    problems_before = len(report.problems)
    for line, record in iter_jsonl(path, report):
        records += 1
        if out.full:
            break
        demo_parts = _parse_record(record, report, path, line)
        if demo_parts is None:
            continue
        query, calls, edges, demo_id = demo_parts
        label = f"the tools file {tools_path}"
        if not from_names and policy == "error":
            unknown = _unknown_calls(calls, catalogue)
            if unknown:
                hint = did_you_mean(_missing(calls, catalogue), known)
                report.malformed(f"{unknown} not in the tool catalogue ({label}){hint}", path, line)
                continue
        elif not from_names and not resolve_unknown(
            calls, catalogue, policy, report, path, line, label
        ):
            continue
        try:
            plan = order_plan(calls, edges)
        except InvalidDemonstrationError as exc:
            report.malformed(f"field 'edges': {exc}", path, line)
            continue
        demo = make_demo(report, path, line, query, plan.calls, plan.edges, demo_id)
        if demo is not None and out.add(demo, path, line) and from_names:
            for call in demo.calls:
                catalogue.add_placeholder(call, where(path, line))
    if records == 0 and len(report.problems) == problems_before:
        error = DatasetFormatError(
            f"no demonstrations in {path}: the file is empty or holds only blank lines "
            "(one JSON object per line expected)"
        )
        error.path = str(path)
        raise error
    problems = list(report.problems)
    if from_names:
        problems.insert(
            0,
            Problem(
                str(path),
                f"kept: no tools file given; built the catalogue of {len(catalogue)} tools "
                "from the call names (no descriptions)",
            ),
        )
    return Dataset(
        name=name,
        tools=catalogue.toolset(path),
        demos=tuple(out.demos),
        problems=tuple(problems),
        source=str(path),
    )


def _missing(calls: list[str], catalogue: Catalogue) -> list[str]:
    """The call names missing from `catalogue` (or only placeholders in it), in call order."""
    return [name for name in calls if catalogue.is_placeholder_or_missing(name)]


def _unknown_calls(calls: list[str], catalogue: Catalogue) -> str:
    """The calls missing from `catalogue` with their verb (``"calls[1] = 'foo' is"``), or ""."""
    missing = [
        f"calls[{k}] = {name!r}"
        for k, name in enumerate(calls)
        if catalogue.is_placeholder_or_missing(name)
    ]
    if not missing:
        return ""
    shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    return f"{shown} {'is' if len(missing) == 1 else 'are'}"


class CallName(RawRecord):
    """A call given as an object: its ``name`` (other keys, such as arguments, are ignored)."""

    name: Name = Field(description="the called tool's name")


class Line(RawRecord):
    """One line of a demonstrations file (what `Demonstration.to_dict` writes)."""

    query: Any = Field(description="the request")
    calls: list[Name | CallName] = Field(description="tool names or {name} objects")
    edges: list[Annotated[list[int], Field(min_length=2, max_length=2)]] | None = Field(
        default=None, description="[i, j] integer pairs"
    )
    id: str | int | bool | None = None


def _parse_record(
    record: Any, report: Report, path: Path, line: int
) -> tuple[Any, list[str], list[tuple[int, int]] | None, str | None] | None:
    """Check one line's fields; a malformed line is reported and gives None."""
    parsed = parse(Line, record, report, path, line)
    if parsed is None:
        return None
    calls = [c if isinstance(c, str) else c.name for c in parsed.calls]
    edges = None if parsed.edges is None else [(i, j) for i, j in parsed.edges]
    return parsed.query, calls, edges, None if parsed.id is None else str(parsed.id)


def load_tools(path: str | Path, *, skip_bad: bool = False) -> Toolset:
    """Read a tools file (the formats `load_jsonl`'s `tools_path` accepts) as a catalogue.

    Raises:
        DatasetFormatError: A tool is malformed (with ``skip_bad=False``); the message names
            the file and line.
        DatasetNotFoundError: The file is missing.
    """
    file = Path(path)
    return read_tools_file(file, Report(skip_bad)).toolset(file)
