"""RecTools and MetaTool in the PTR format (GHupppp/PTR ``src/Datasets/``).

- ``<Name>_QT.json``: a JSON array of ``{"query", "tool": [names]}``: the *set* of tools that
  exactly solves the query (RecTools: 1,000 queries with 1-10 tools, 100 per size; MetaTool:
  497 queries with 2 tools).
- ``<Name>_tool.json``: a JSON object ``{name: description}`` (47 tools from MetaTool's
  merged OpenAI plugin list).

The MetaTool repository (HowieHwong/MetaTool ``dataset/``) holds the same 497 multi-tool
queries as ``multi_tool_query_golden.json`` with the descriptions in ``big_tool_des.json``;
its folder is accepted too.

Tool sets have no order, so the dataset is ``set_valued=True`` and each demonstration lists
the tools in file order with ``edges=()`` (all independent). Reported as problems: a tool
listed twice in one set (kept once), a query with no letters or digits (two RecTools queries
are just ``"**"``; kept), tools missing from the descriptions file (``unknown_tools``), exact
duplicate samples (skipped unless ``keep_duplicates``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Protocol, Unpack

from pydantic import Field

from dtdr_agents.datasets._intake import Intake, SampleAt
from dtdr_agents.datasets._io import (
    Catalogue,
    DatasetNotFoundError,
    LoadOptions,
    Report,
    add_tool,
    check_options,
    make_demo,
    require_exists,
    require_file,
    start_load,
)
from dtdr_agents.datasets._json import (
    iter_json_object,
    iter_records,
)
from dtdr_agents.datasets._raw import Name, RawRecord
from dtdr_agents.datasets.base import Dataset

PtrVariant = Literal["rectools", "metatool"]

_FILES: Mapping[str, tuple[tuple[str, str], ...]] = {
    # (queries file, tools file) candidates in a folder, first match wins
    "rectools": (("RecTools_QT.json", "RecTools_tool.json"),),
    "metatool": (
        ("MetaTool_QT.json", "MetaTool_tool.json"),
        ("multi_tool_query_golden.json", "big_tool_des.json"),
    ),
}
_WORD = re.compile(r"\w")


class Sample(RawRecord):
    """One query of a ``*_QT.json`` file: its text and its (unordered) tool set."""

    query: Any = None
    tool: list[Name] = Field(description="a list of tool names")


class VariantLoader(Protocol):
    """The type of `load_rectools` and `load_metatool`: `load_ptr` with a fixed variant."""

    def __call__(
        self,
        path: str | Path,
        *,
        tools_path: str | Path | None = None,
        **options: Unpack[LoadOptions],
    ) -> Dataset:
        """Load the variant's queries file (see `load_ptr`)."""
        ...


def _variant_loader(variant: PtrVariant, summary: str, path_doc: str) -> VariantLoader:
    """`load_ptr` for one `variant`, with its own docstring (`load_rectools`, `load_metatool`)."""

    def load(
        path: str | Path, *, tools_path: str | Path | None = None, **options: Unpack[LoadOptions]
    ) -> Dataset:
        check_options(f"load_{variant}", options)
        return load_ptr(path, variant=variant, tools_path=tools_path, **options)

    load.__name__ = load.__qualname__ = f"load_{variant}"
    load.__doc__ = f"""{summary}

    Args:
        path: {path_doc}
        tools_path: The descriptions file, if not the one next to the queries.
        **options: ``skip_bad``, ``limit``, ``keep_duplicates`` (see `dtdr_agents.datasets`) and
            ``unknown_tools``: tools missing from the descriptions: ``"skip"`` the sample
            (default), ``"add"`` placeholders, or ``"error"``.

    Returns:
        A set-valued dataset (name ``"{variant}"``).
    """
    return load


load_rectools = _variant_loader(
    "rectools",
    "Load RecTools (PTR): 1,000 queries with their exact tool sets.",
    "The PTR ``Datasets`` folder or ``RecTools_QT.json``.",
)
load_metatool = _variant_loader(
    "metatool",
    "Load MetaTool's 497 two-tool queries (PTR's ``MetaTool_QT.json`` or MetaTool's own).",
    "The PTR ``Datasets`` folder, the MetaTool ``dataset`` folder, or the queries\n"
    "            file (``MetaTool_QT.json`` / ``multi_tool_query_golden.json``).",
)


def load_ptr(
    path: str | Path,
    *,
    variant: PtrVariant | None = None,
    tools_path: str | Path | None = None,
    **options: Unpack[LoadOptions],
) -> Dataset:
    """Load a query -> tool-set file in the PTR format.

    Args:
        path: A queries file (``*_QT.json`` or ``multi_tool_query_golden.json``), or a folder
            holding the files of `variant`.
        variant: ``"rectools"`` or ``"metatool"``; needed for a folder, and names the
            dataset (for a file it is guessed from the file name, else ``"ptr"``).
        tools_path: The ``name -> description`` file; by default ``<Name>_tool.json`` next to
            ``<Name>_QT.json`` (``big_tool_des.json`` next to
            ``multi_tool_query_golden.json``).
        **options: ``skip_bad``, ``limit``, ``keep_duplicates`` (see `dtdr_agents.datasets`) and
            ``unknown_tools``: Tools missing from the descriptions: ``"skip"`` (default),
            ``"add"``, ``"error"``.

    Returns:
        A set-valued dataset.

    Raises:
        DatasetNotFoundError: The queries or descriptions file is missing (named).
        DatasetFormatError: A malformed sample, with ``skip_bad=False``.
    """
    load = start_load("load_ptr", options)
    queries, tools_file, name = _locate(path, variant, tools_path)
    report = load.report
    catalogue = _read_descriptions(tools_file, report)
    intake = Intake.start(load, catalogue)
    stem = queries.stem.removesuffix("_QT")
    for index, line, record in intake.take(iter_records(queries, report)):
        _add_sample(record, f"{stem}-{index}", intake.at(queries, line))
    return intake.dataset(name, tools_file, str(queries), set_valued=True)


def _locate(
    path: str | Path, variant: PtrVariant | None, tools_path: str | Path | None
) -> tuple[Path, Path, str]:
    if variant is not None and variant not in _FILES:
        raise ValueError(f"variant must be 'rectools' or 'metatool', got {variant!r}")
    p = require_exists(path, "PTR dataset path")
    if p.is_dir():
        if variant is None:
            raise ValueError("path is a folder: give variant='rectools' or 'metatool'")
        candidates = _FILES[variant]
        for qname, tname in candidates:
            if (p / qname).is_file():
                queries, default_tools = p / qname, p / tname
                break
        else:
            expected = " or ".join(q for q, _ in candidates)
            raise DatasetNotFoundError(
                f"{expected} not found in this folder (the {variant} queries)", str(p)
            )
        name: str = variant
    else:
        queries = p
        default_tools = _default_tools_file(p)
        lowered = p.name.lower()
        if variant is not None:
            name = variant
        elif lowered.startswith("rectools"):
            name = "rectools"
        elif lowered.startswith("metatool") or lowered.startswith("multi_tool_query"):
            name = "metatool"
        else:
            name = "ptr"
    tools_file = Path(tools_path) if tools_path is not None else default_tools
    require_file(tools_file, f"tool descriptions file for {queries.name}")
    return queries, tools_file, name


def _default_tools_file(queries: Path) -> Path:
    if queries.stem.endswith("_QT"):
        return queries.with_name(queries.stem[: -len("_QT")] + "_tool.json")
    if queries.name == "multi_tool_query_golden.json":
        return queries.with_name("big_tool_des.json")
    return queries.with_name(queries.stem + "_tool.json")


def _read_descriptions(path: Path, report: Report) -> Catalogue:
    catalogue = Catalogue()
    for name, line, desc in iter_json_object(path):
        if not isinstance(desc, str):
            report.malformed(f"the description of {name!r} must be a string", path, line)
            continue
        add_tool(catalogue, report, {"name": name, "description": desc}, path, line)
    return catalogue


def _add_sample(record: Any, sample_id: str, at: SampleAt) -> None:
    sample = at.parse(Sample, record)
    if sample is None:
        return
    tools = sample.tool
    query = sample.query
    unique = list(dict.fromkeys(tools))
    if len(unique) < len(tools):
        at.repaired("a tool is listed twice in the set; kept it once")
    if isinstance(query, str) and query.strip() and not _WORD.search(query):
        at.kept(f"the query {query!r} has no words")
    if not at.known(unique, "the tool descriptions file"):
        return
    demo = make_demo(at.report, at.path, at.line, query, unique, (), sample_id)
    if demo is not None:
        at.intake.out.add(demo, at.path, at.line)
