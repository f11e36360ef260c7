"""Seal-Tools (fairyshine/Seal-Tools ``Seal-Tools_Dataset/``) in its published format.

- ``tool.jsonl``: one tool per line, ``{"api_name", "api_description", "parameters":
  {name: {"type", "description"}}, "required": [...], "responses": {...}, "field"}``. All of
  them (4,076) form the catalogue, whether or not a sample calls them: Seal-Tools is a
  retrieval-from-a-large-library benchmark.
- Split files (``dev.jsonl``, ``test_in_domain.jsonl``, ``test_out_domain.jsonl``, and
  ``train.jsonl`` where present): ``{"id", "query", "calling": [{"api", "parameters",
  "responses"}]}``, 1-6 calls in the recorded order.

Dependencies. Seal-Tools marks a nested call explicitly: each call lists the labels of its
outputs in ``responses`` (``"API_call_0"``, ``"API_call_1"``, ...) and a later call whose
argument is such a label (``"location": "API_call_1"``, or ``"API_call_0 response"``) takes
that output as input: 34 of the 1,804 dev calls do (in 28 of 700 plans). With
``order="dependencies"`` (default) these references are the edges and calls with no reference
between them are independent (the order of independent calls is not a label: Seal-Tools
scores tool selection by precision / recall / F1 over the calls); with ``order="recorded"``
the edges are None and the recorded order is the only acceptable one. A reference to a label
no call produces is reported and ignored.

The splits: ``split=None`` on a folder reads every split file present (train, dev,
test_in_domain, test_out_domain, then any other, in that order). For the published split,
``load_train_test("sealtools", path, train_split="dev", test_split="test_in_domain")``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Unpack

from pydantic import Field

from dtdr_agents.datasets._intake import Intake, SampleAt
from dtdr_agents.datasets._io import (
    Catalogue,
    DatasetNotFoundError,
    LoadOptions,
    Report,
    add_tool,
    object_schema,
    require_exists,
    require_file,
    start_load,
    text_of,
)
from dtdr_agents.datasets._json import (
    iter_jsonl,
)
from dtdr_agents.datasets._raw import Name, OrEmptyDict, OrEmptyList, RawRecord, parse
from dtdr_agents.datasets.base import Dataset

PlanOrder = Literal["dependencies", "recorded"]
"""How a loader turns a recorded call sequence into a plan (see the module docstrings)."""

TOOLS_FILE = "tool.jsonl"
_NOT_SPLITS = {"tool", "field"}
_SPLIT_ORDER = ("train", "dev", "test_in_domain", "test_out_domain")
_LABEL = re.compile(r"API_call_\d+")


def load_sealtools(
    path: str | Path,
    *,
    split: str | None = None,
    tools_path: str | Path | None = None,
    order: PlanOrder = "dependencies",
    **options: Unpack[LoadOptions],
) -> Dataset:
    """Load Seal-Tools: all 4,076 tools and the samples of one or all split files.

    Args:
        path: The ``Seal-Tools_Dataset`` folder, or one split file (then ``tool.jsonl`` is
            taken from the same folder unless `tools_path` is given).
        split: A split name (``"dev"``, ``"test_in_domain"``, ...: the file stem) when `path`
            is a folder; None reads every split file present.
        tools_path: The tools file, if not ``tool.jsonl`` next to the data.
        order: ``"dependencies"`` (edges from output references) or ``"recorded"``.
        **options: ``skip_bad``, ``limit``, ``keep_duplicates`` (see `dtdr_agents.datasets`) and
            ``unknown_tools``: Calls to an ``api`` missing from the tools file: ``"skip"`` the
            sample (default), ``"add"`` a placeholder tool, or ``"error"``.

    Returns:
        The dataset (name ``"sealtools"``).

    Raises:
        DatasetNotFoundError: A file or the split is missing.
        DatasetFormatError: A malformed line, with ``skip_bad=False``.
    """
    if order not in ("dependencies", "recorded"):
        raise ValueError(f"order must be 'dependencies' or 'recorded', got {order!r}")
    load = start_load("load_sealtools", options)
    files, folder = _split_files(path, split)
    tools_file = Path(tools_path) if tools_path is not None else folder / TOOLS_FILE
    report = load.report
    catalogue = read_sealtools_tools(tools_file, report)
    intake = Intake.start(load, catalogue)
    for data_path in files:
        for line, record in intake.take(iter_jsonl(data_path, report)):
            _add_sample(record, intake.at(data_path, line), order)
    return intake.dataset("sealtools", tools_file, ", ".join(str(f) for f in files))


class ToolRecord(RawRecord):
    """One line of ``tool.jsonl`` (other fields, such as ``field``, are not read)."""

    api_name: str = Field(description="the tool's name")
    api_description: Any = None
    parameters: Annotated[dict[str, dict[str, Any]], OrEmptyDict] = Field(
        default={}, description="parameter name -> {type, description}"
    )
    responses: Annotated[dict[str, Any], OrEmptyDict] = Field(
        default={}, description="output name -> {type, description}"
    )
    required: Annotated[list[Any], OrEmptyList] = Field(
        default=[], description="a list of parameter names"
    )


class Call(RawRecord):
    """One entry of a sample's ``calling``."""

    api: Name = Field(description="the called tool's name")
    parameters: Any = Field(default_factory=dict)
    responses: list[str] = Field(default=[], description="a list of output labels")


class Sample(RawRecord):
    """One line of a split file."""

    id: Any = None
    query: Any = None
    calling: list[Call] = Field(description="a list of calls")


def read_sealtools_tools(path: Path, report: Report) -> Catalogue:
    """Read ``tool.jsonl`` into a catalogue (JSON-schema parameters, in file order)."""
    require_file(path, f"{TOOLS_FILE} (the Seal-Tools tool catalogue)")
    catalogue = Catalogue()
    for line, record in iter_jsonl(path, report):
        tool = parse(ToolRecord, record, report, path, line)
        if tool is None:
            continue
        desc = tool.api_description
        add_tool(
            catalogue,
            report,
            {
                "name": tool.api_name,
                "description": desc if isinstance(desc, str) else "",
                "parameters": object_schema(tool.parameters, tool.required),
                "outputs": [k for k in tool.responses if k.strip()],
            },
            path,
            line,
        )
    return catalogue


def _split_files(path: str | Path, split: str | None) -> tuple[list[Path], Path]:
    p = require_exists(path, "Seal-Tools path")
    if p.is_file():
        if split is not None and p.stem != split:
            raise ValueError(f"split={split!r} given but path is the split file {p.name!r}")
        return [p], p.parent
    if split is not None:
        return [require_file(p / f"{split}.jsonl", f"Seal-Tools split {split!r}")], p
    found = {f.stem: f for f in p.glob("*.jsonl") if f.stem not in _NOT_SPLITS}
    if not found:
        if not (p / TOOLS_FILE).is_file():
            raise DatasetNotFoundError(
                f"not a Seal-Tools folder: {TOOLS_FILE} and split files (dev.jsonl, ...) not found",
                str(p),
            )
        raise DatasetNotFoundError("no split files (dev.jsonl, ...) in this folder", str(p))
    ordered = [found.pop(s) for s in _SPLIT_ORDER if s in found]
    return ordered + [found[k] for k in sorted(found)], p


def _add_sample(record: Any, at: SampleAt, order: PlanOrder) -> None:
    sample = at.parse(Sample, record)
    if sample is None:
        return
    calling = sample.calling
    calls = [c.api for c in calling]
    if not at.known(calls, TOOLS_FILE):
        return
    edges = None if order == "recorded" else _reference_edges(calling, at)
    at.add(
        sample.query,
        calls,
        edges,
        None if sample.id is None else str(sample.id),
        cycle="output references",
        arguments=at.arguments(
            [c.parameters for c in calling],
            [", ".join(c.responses) or None for c in calling],
            "calling[{k}].parameters",
        ),
    )


def _reference_edges(calling: Sequence[Call], at: SampleAt) -> list[tuple[int, int]]:
    """Edges (producer, consumer) from response labels used as arguments."""
    owner: dict[str, int] = {}
    for k, call in enumerate(calling):
        for label in call.responses:
            owner.setdefault(label, k)
    edges: set[tuple[int, int]] = set()
    for j, call in enumerate(calling):
        for text in text_of(call.parameters):
            for label in _LABEL.findall(text):
                i = owner.get(label)
                if i is None:
                    at.kept(
                        f"calling[{j}] refers to {label!r}, which no call returns; "
                        "ignored the reference"
                    )
                elif i == j:
                    at.kept(
                        f"calling[{j}] refers to its own output {label!r}; ignored the reference"
                    )
                else:
                    edges.add((i, j))
    return sorted(edges)
