"""ToolRet tasks (mangopy/tool-retrieval-benchmark; the copies in LittleDinoC/MFTR).

A task folder holds two JSON arrays:

- ``tools.json``: ``{"id", "documentation": {"name", "description", ...}, "type"}``; the
  documentation fields differ by task (``parameters`` as a list of OpenAPI-style parameters or
  a JSON schema, ``func_description``, ``expressions``, ...).
- ``queries.json``: ``{"id", "query", "instruction", "labels": [{"id", "doc", "relevance"}],
  "category"}``: the labels are the *set* of tools the query needs (tool ids of
  ``tools.json``), and ``instruction`` is an LLM-written retrieval instruction shipped with
  the query.

Labels have no order, so the dataset is ``set_valued=True`` (like RecTools) and each
demonstration lists its tools in label order with ``edges=()``. Tools are named by their
documentation ``name``; a name already taken by another tool falls back to the tool's id
(recorded as a problem). Labels with ``relevance <= 0`` are not relevant and are left out.
The instructions are kept in `ToolRetDataset.instructions` (demonstration id -> text); they
survive `split_dataset`, which copies the dataset with `dataclasses.replace`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Unpack

from pydantic import Field

from dtdr_agents.datasets._io import (
    Catalogue,
    Collector,
    LoadOptions,
    Report,
    UnknownTools,
    add_tool,
    make_demo,
    object_schema,
    require_exists,
    require_file,
    resolve_unknown,
    start_load,
)
from dtdr_agents.datasets._json import (
    iter_json_array,
)
from dtdr_agents.datasets._raw import Name, RawRecord, parse
from dtdr_agents.datasets.base import Dataset
from dtdr_agents.foundation.types import Demonstration

QUERIES_FILE = "queries.json"
"""The queries file of a ToolRet task folder."""
TOOLS_FILE = "tools.json"
"""The tools file of a ToolRet task folder."""


@dataclass(frozen=True)
class ToolRetDataset(Dataset):
    """A ToolRet task: a set-valued `Dataset` that also keeps each query's instruction.

    Attributes:
        instructions: Demonstration id -> the query's ``instruction`` (queries without one
            are absent).
    """

    instructions: Mapping[str, str] = field(default_factory=dict)

    def instruction(self, demo: Demonstration) -> str | None:
        """The instruction shipped with `demo`'s query, or None."""
        return self.instructions.get(demo.id) if demo.id is not None else None


def load_toolret(
    path: str | Path,
    *,
    tools_path: str | Path | None = None,
    **options: Unpack[LoadOptions],
) -> ToolRetDataset:
    """Load one ToolRet task.

    Args:
        path: The task folder (``queries.json`` + ``tools.json``) or its ``queries.json``.
        tools_path: The tools file, if not ``tools.json`` next to the queries.
        **options: ``skip_bad``, ``limit``, ``keep_duplicates`` (see `dtdr_agents.datasets`) and
            ``unknown_tools``: Labels naming a tool id missing from the tools file: ``"skip"``
            the query (default), ``"add"`` a placeholder tool, or ``"error"``.

    Returns:
        A set-valued `ToolRetDataset` named ``"toolret"``.

    Raises:
        DatasetNotFoundError: A file is missing (named).
        DatasetFormatError: A malformed record (file and line), with ``skip_bad=False``.
    """
    load = start_load("load_toolret", options)
    policy = load.policy
    p = require_exists(path, "ToolRet task path")
    queries = p / QUERIES_FILE if p.is_dir() else p
    require_file(queries, f"ToolRet {QUERIES_FILE}")
    tools_file = Path(tools_path) if tools_path is not None else queries.with_name(TOOLS_FILE)
    require_file(tools_file, f"ToolRet {TOOLS_FILE} for {queries}")
    report = load.report
    catalogue = Catalogue()
    names_by_id: dict[str, str] = {}
    for _, line, record in iter_json_array(tools_file):
        _add_tool(record, tools_file, line, catalogue, names_by_id, report)
    out = load.collector()
    instructions: dict[str, str] = {}
    task = queries.parent.name or "toolret"
    for index, line, record in iter_json_array(queries):
        if out.full:
            break
        _add_query(
            record,
            f"{task}-{index}",
            queries,
            line,
            catalogue,
            names_by_id,
            policy,
            report,
            out,
            instructions,
        )
    return ToolRetDataset(
        name="toolret",
        tools=catalogue.toolset(tools_file),
        demos=tuple(out.demos),
        set_valued=True,
        problems=report.problems,
        source=str(queries),
        instructions=instructions,
    )


class ToolRecord(RawRecord):
    """One tool of ``tools.json`` (``type`` and other fields are not read)."""

    named_by = ("tool", "id")

    id: Name = Field(description="the tool's id")
    documentation: dict[str, Any] = Field(
        description="an object: name, description, parameters, ..."
    )


class Label(RawRecord):
    """One relevance label of a query: a tool id and how relevant it is (> 0: needed)."""

    id: str = Field(description="a tool id")
    relevance: float = 1


class Query(RawRecord):
    """One query of ``queries.json``; a query without ``id`` is named by its position."""

    query: Any = None
    labels: list[Label] = Field(min_length=1, description="a non-empty list of tool labels")
    instruction: str | None = None
    id: Name = ""


def _parameters(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """A JSON schema from the documentation's ``parameters`` (list or schema), if any."""
    params = doc.get("parameters")
    if isinstance(params, Mapping) and isinstance(params.get("properties"), Mapping):
        return dict(params)
    if isinstance(params, list) and all(isinstance(x, Mapping) for x in params):
        props: dict[str, Mapping[str, Any]] = {}
        required: list[str] = []
        for item in params:
            name = item.get("name")
            if not isinstance(name, str) or not name:
                continue
            schema = item.get("schema")
            spec = dict(schema) if isinstance(schema, Mapping) else {}
            if isinstance(item.get("description"), str):
                spec["description"] = item["description"]
            props[name] = spec
            if item.get("required") is True:
                required.append(name)
        return object_schema(props, required)
    return None


def _description(doc: Mapping[str, Any]) -> str:
    for key in ("description", "func_description", "expressions"):
        value = doc.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def _add_tool(
    record: Any,
    path: Path,
    line: int,
    catalogue: Catalogue,
    names_by_id: dict[str, str],
    report: Report,
) -> None:
    tool = parse(ToolRecord, record, report, path, line)
    if tool is None:
        return
    tool_id, doc = tool.id, tool.documentation
    if tool_id in names_by_id:
        report.malformed(f"duplicate tool id {tool_id!r}", path, line)
        return
    name = doc.get("name")
    if not isinstance(name, str) or not name.strip():
        report.repaired(
            f"tool {tool_id!r} has no documentation name; named it by its id", path, line
        )
        name = tool_id
    elif name in catalogue:
        report.repaired(
            f"tool {tool_id!r}: the name {name!r} is taken (at {catalogue.first_seen(name)}); "
            "named it by its id",
            path,
            line,
        )
        name = tool_id
    raw: dict[str, Any] = {"name": name, "description": _description(doc)}
    schema = _parameters(doc)
    if schema is not None:
        raw["parameters"] = schema
    before = len(catalogue)
    add_tool(catalogue, report, raw, path, line)
    if len(catalogue) > before:
        names_by_id[tool_id] = name


def _add_query(
    record: Any,
    default_id: str,
    path: Path,
    line: int,
    catalogue: Catalogue,
    names_by_id: dict[str, str],
    policy: UnknownTools,
    report: Report,
    out: Collector,
    instructions: dict[str, str],
) -> None:
    query = parse(Query, record, report, path, line)
    if query is None:
        return
    instruction = query.instruction
    sample_id = query.id if "id" in query.model_fields_set else default_id
    names = [names_by_id.get(x.id, x.id) for x in query.labels if x.relevance > 0]
    unique = list(dict.fromkeys(names))
    if not unique:
        report.skipped("no label has a positive relevance", path, line)
        return
    if len(unique) < len(names):
        report.repaired("a tool is labelled twice; kept it once", path, line)
    if not resolve_unknown(unique, catalogue, policy, report, path, line, "tools.json"):
        return
    demo = make_demo(report, path, line, query.query, unique, (), sample_id)
    if demo is None or not out.add(demo, path, line):
        return
    kept = out.demos[-1]
    if isinstance(instruction, str) and instruction.strip() and kept.id is not None:
        instructions[kept.id] = instruction.strip()
    elif instruction is None or not instruction.strip():
        report.kept(f"query {kept.id!r} has no instruction", path, line)


__all__ = ["QUERIES_FILE", "TOOLS_FILE", "ToolRetDataset", "load_toolret"]
