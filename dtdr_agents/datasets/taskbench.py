"""TaskBench (microsoft/JARVIS ``taskbench/data_<domain>/``) in its published format.

A domain folder holds:

- ``tool_desc.json``: ``{"nodes": [{"id", "desc", ...}]}``, the tool catalogue. DailyLife APIs
  tools carry ``parameters: [{"name", "type", "desc"}]`` (turned into a JSON schema);
  HuggingFace / Multimedia tools carry ``input-type`` / ``output-type`` lists of resource
  types: the schema has one required string argument per input, named by its type
  (``image``; a second image is ``image_2``), whose value is a file name, a text, or
  ``<node-j>`` for the output of the plan's node ``j``.
- ``graph_desc.json``: the published tool graph, ``{"nodes": [...], "links": [{"source",
  "target", "type"}]}``, returned as `Dataset.tool_graph`.
- ``user_requests.json``: JSON lines ``{"id", "user_request"}``.
- ``data.json``: JSON lines ``{"id", "type", "n_tools", "task_nodes": [{"task", ...}],
  "task_links": [{"source", "target"}], ...}``, the labelled plans. Only some copies of the
  benchmark ship it; `load_taskbench_catalogue` reads a folder without it. A node's
  ``arguments`` (where published) are its gold arguments: a list of values, matched in order
  to the tool's inputs (HuggingFace / Multimedia), or a list of ``{"name", "value"}``
  (DailyLife APIs). Copies without them (the HF subset here) load with no gold arguments.

A sample's query is its ``user_request`` in ``user_requests.json`` when that file exists and
has the id, else the sample's own ``user_request``, else its ``instruction``. Its calls are its
``task_nodes`` (a task named twice is called twice) and its edges are its ``task_links``
(resource dependencies: the target consumes the source's output). The nodes are put in a
dependency order (`order_plan`): many published plans list them alphabetically.

Published quirks and what the loader does (each one is recorded as a `Problem`):

- **Tasks outside tool_desc.json** (about 1 in 8 samples: "Audio Enhancement",
  "ObjectDetection", ...). TaskBench's own evaluation maps such names to a "negative" class,
  and DTDR evaluates over the fixed catalogue (its Table 5 counts 23 + 1 tools for
  TaskBench-HF), so by default the sample is **skipped** (``unknown_tools="skip"``).
  ``unknown_tools="add"`` keeps it and adds the names to the catalogue without a description;
  ``"error"`` treats it as malformed.
- **n_tools differs from the number of nodes**: kept; the nodes are the label.
- **Links by node index** (``{"source": 0, "target": 1}``): repaired, read as positions in
  ``task_nodes``.
- **A link to a name that is not a node** (``"Conversations"`` for the node
  ``"Conversational"``): the link is dropped (no guessing), the sample kept.
- **A task named twice**: a link naming it goes to the nearest pair of occurrences in the
  listed order (source before target), which is reported.
- **A link from a node to itself, or links forming a cycle**: the self-link is dropped; a
  cycle skips the sample.
- **The same sample twice** (id 32742251 in the HF data): the exact copy is skipped
  (``keep_duplicates=True`` keeps it); a different sample reusing an id is kept under
  ``<id>#2``.

Malformed records (a line that is not JSON, a missing ``task_nodes``...) raise
`DatasetFormatError` with the file and line, or are skipped with ``skip_bad=True``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Unpack

from pydantic import Field

from dtdr_agents.datasets._intake import Intake, SampleAt
from dtdr_agents.datasets._io import (
    Catalogue,
    DatasetNotFoundError,
    LoadOptions,
    Report,
    json_type,
    require_exists,
    require_file,
    start_load,
)
from dtdr_agents.datasets._json import (
    iter_jsonl,
    read_json,
)
from dtdr_agents.datasets._raw import Name, RawRecord, parse
from dtdr_agents.datasets.base import Dataset
from dtdr_agents.foundation.errors import DatasetFormatError
from dtdr_agents.foundation.types import CallArguments, Tool

DOMAINS = ("dailylifeapis", "huggingface", "multimedia")
"""The domain folders of the published benchmark (``data_<domain>``)."""

_ALIASES = {
    "dl": "dailylifeapis",
    "dailylife": "dailylifeapis",
    "hf": "huggingface",
    "mm": "multimedia",
}


def load_taskbench(
    path: str | Path,
    *,
    split: str | None = None,
    **options: Unpack[LoadOptions],
) -> Dataset:
    """Load a TaskBench domain: labelled plans, tool catalogue and published tool graph.

    Args:
        path: A domain folder (``data_huggingface/``), its ``data.json``, or the ``taskbench``
            folder holding the domain folders (then give `split`).
        split: The domain (``"huggingface"``, ``"dailylifeapis"``, ``"multimedia"``, or
            ``"hf"``, ``"dl"``, ``"mm"``) when `path` holds several domain folders.
        **options: ``skip_bad``, ``limit``, ``keep_duplicates`` (see `dtdr_agents.datasets`) and
            ``unknown_tools``: Samples naming tasks outside ``tool_desc.json``: ``"skip"``
            (default), ``"add"`` or ``"error"`` (see the module docstring).

    Returns:
        The dataset (name ``"taskbench"``) with `Dataset.tool_graph` set.

    Raises:
        DatasetNotFoundError: The folder, ``tool_desc.json`` or ``data.json`` is missing
            (the message points to `load_taskbench_catalogue` for folders without labels).
        DatasetFormatError: A malformed record, with ``skip_bad=False``.
    """
    load = start_load("load_taskbench", options)
    folder, data_path = _locate(path, split)
    if not data_path.is_file():
        raise DatasetNotFoundError(
            "data.json (the labelled plans) not found: this TaskBench folder has only the "
            "tool catalogue and tool graph. Load those with load_taskbench_catalogue(path) "
            "or load_dataset('taskbench', path, catalogue_only=True)",
            str(data_path),
        )
    report = load.report
    catalogue = _read_tool_desc(folder / "tool_desc.json", report)
    graph = _read_graph(folder / "graph_desc.json", catalogue, report)
    requests = _read_user_requests(folder / "user_requests.json", report)
    intake = Intake.start(load, catalogue)
    for line, record in intake.take(iter_jsonl(data_path, report)):
        _add_sample(record, intake.at(data_path, line), requests)
    return intake.dataset("taskbench", folder / "tool_desc.json", str(data_path), tool_graph=graph)


def load_taskbench_catalogue(
    path: str | Path, *, split: str | None = None, skip_bad: bool = False
) -> Dataset:
    """Load only a TaskBench domain's tool catalogue and published tool graph.

    For folders without ``data.json`` (e.g. to build a Tool Graph Retriever from the
    published graph). The returned dataset has no demonstrations.

    Args:
        path: A domain folder, or the folder holding the domain folders (then give `split`).
        split: The domain, as in `load_taskbench`.
        skip_bad: Skip malformed tools / links instead of raising.

    Returns:
        A dataset with ``tools`` and ``tool_graph`` and no demonstrations.
    """
    folder, _ = _locate(path, split)
    report = Report(skip_bad)
    catalogue = _read_tool_desc(folder / "tool_desc.json", report)
    graph = _read_graph(folder / "graph_desc.json", catalogue, report)
    return Dataset(
        name="taskbench",
        tools=catalogue.toolset(folder / "tool_desc.json"),
        demos=(),
        tool_graph=graph,
        problems=report.problems,
        source=str(folder),
    )


# ----------------------------------------------------------------------------- raw formats


class ToolNode(RawRecord):
    """A ``tool_desc.json`` node (``desc``, ``parameters``, ``input-type`` read leniently)."""

    id: Name = Field(description="the tool's name")


class GraphLink(RawRecord):
    """A ``graph_desc.json`` link between two tools, by name."""

    source: str
    target: str


class UserRequest(RawRecord):
    """A line of ``user_requests.json``."""

    id: str | int | bool
    user_request: str


class Node(RawRecord):
    """A sample's task node: the called tool and, where published, its arguments."""

    task: Name = Field(description="the called tool's name")
    arguments: Any = None


class Link(RawRecord):
    """A sample's task link: two task names, or (in a few samples) two node positions."""

    source: Any
    target: Any


class Sample(RawRecord):
    """A line of ``data.json``."""

    id: str | int
    task_nodes: list[Node] = Field(description="a list of {task}")
    task_links: list[Link] = Field(default=[], description="a list of {source, target}")
    n_tools: Any = None
    user_request: Any = None
    instruction: Any = None


# ----------------------------------------------------------------------------- locating


def _locate(path: str | Path, split: str | None) -> tuple[Path, Path]:
    """(domain folder, data.json path) for a path and an optional domain."""
    p = require_exists(path, "TaskBench path")
    if p.is_file():
        return p.parent, p
    if split is not None:
        domain = _ALIASES.get(split.lower(), split.lower())
        if domain.startswith("data_"):
            domain = domain[len("data_") :]
        for candidate in (p / f"data_{domain}", p / domain):
            if candidate.is_dir():
                return candidate, candidate / "data.json"
        if (p / "tool_desc.json").is_file() and p.name in (domain, f"data_{domain}"):
            return p, p / "data.json"
        raise DatasetNotFoundError(
            f"TaskBench domain {split!r} not found (expected a folder data_{domain}/)", str(p)
        )
    if (p / "tool_desc.json").is_file():
        return p, p / "data.json"
    domains = sorted(d.name for d in p.glob("data_*") if d.is_dir())
    if domains:
        raise DatasetNotFoundError(
            f"this folder holds several TaskBench domains ({', '.join(domains)}); "
            "give split='huggingface' (or 'dailylifeapis', 'multimedia') or a domain folder",
            str(p),
        )
    raise DatasetNotFoundError(
        "not a TaskBench domain folder: tool_desc.json not found", str(p / "tool_desc.json")
    )


# ----------------------------------------------------------------------------- catalogue


def _input_schema(types: Sequence[Any]) -> dict[str, Any]:
    """One required string argument per resource input, named by its type."""
    props: dict[str, Any] = {}
    for kind in types:
        base = str(kind).strip().replace(" ", "_") or "input"
        name, n = base, 1
        while name in props:
            n += 1
            name = f"{base}_{n}"
        props[name] = {
            "type": "string",
            "description": f"the input {kind}: a file name or text, or <node-j> for the output "
            "of the plan's node j",
        }
    return {"type": "object", "properties": props, "required": list(props)}


def _tool_from_node(node: Mapping[str, Any]) -> Tool:
    """A `Tool` from a ``tool_desc.json`` node."""
    params = node.get("parameters")
    schema: dict[str, Any] = {"type": "object", "properties": {}}
    inputs = node.get("input-type")
    if not isinstance(params, list) and isinstance(inputs, list):
        schema = _input_schema(inputs)
    if isinstance(params, list):
        props: dict[str, Any] = {}
        for p in params:
            if isinstance(p, Mapping) and isinstance(p.get("name"), str):
                entry: dict[str, Any] = json_type(p.get("type"))
                if isinstance(p.get("desc"), str) and p["desc"]:
                    entry["description"] = p["desc"]
                props[p["name"]] = entry
        schema["properties"] = props
    desc = node.get("desc", node.get("description", ""))
    kinds = node.get("output-type")
    outputs = (
        [k for k in kinds if isinstance(k, str) and k.strip()] if isinstance(kinds, list) else []
    )
    return Tool(
        name=node["id"],
        description=desc if isinstance(desc, str) else "",
        parameters=schema,
        outputs=tuple(outputs),
    )


def _read_tool_desc(path: Path, report: Report) -> Catalogue:
    require_file(path, "tool_desc.json (the TaskBench tool catalogue)")
    data = read_json(path)
    nodes = data.get("nodes") if isinstance(data, Mapping) else None
    if not isinstance(nodes, list):
        raise DatasetFormatError("expected an object with a 'nodes' list of tools", str(path), 1)
    catalogue = Catalogue()
    for k, node in enumerate(nodes):
        if parse(ToolNode, node, report, path, None, at=f"nodes[{k}]") is None:
            continue
        if node["id"] in catalogue:
            report.malformed(f"nodes[{k}]: duplicate tool id {node['id']!r}", path, None)
            continue
        catalogue.add(_tool_from_node(node), f"{path} nodes[{k}]")
    return catalogue


def _read_graph(
    path: Path, catalogue: Catalogue, report: Report
) -> tuple[tuple[str, str], ...] | None:
    """The published tool graph as (source, target) names; None without graph_desc.json."""
    if not path.is_file():
        return None
    data = read_json(path)
    links = data.get("links") if isinstance(data, Mapping) else None
    if not isinstance(links, list):
        raise DatasetFormatError("expected an object with a 'links' list", str(path), 1)
    pairs: dict[tuple[str, str], None] = {}
    for k, record in enumerate(links):
        link = parse(GraphLink, record, report, path, None, at=f"links[{k}]")
        if link is None:
            continue
        s, t = link.source, link.target
        bad = [x for x in (s, t) if x not in catalogue]
        if bad:
            report.repaired(
                f"links[{k}] names {', '.join(map(repr, bad))}, not in tool_desc.json; "
                "dropped the link from the tool graph",
                path,
            )
            continue
        pairs[(s, t)] = None
    return tuple(pairs)


def _read_user_requests(path: Path, report: Report) -> dict[str, list[str]]:
    """Map each id to its user requests (usually one) in user_requests.json."""
    out: dict[str, list[str]] = {}
    if not path.is_file():
        return out
    for line, record in iter_jsonl(path, report):
        request = parse(UserRequest, record, report, path, line)
        if request is None:
            continue
        texts = out.setdefault(str(request.id), [])
        if request.user_request not in texts:
            texts.append(request.user_request)
    return out


# ----------------------------------------------------------------------------- samples


def _add_sample(record: Any, at: SampleAt, requests: Mapping[str, Sequence[str]]) -> None:
    """Check, repair and add one data.json sample (or report why not)."""
    sample = at.parse(Sample, record)
    if sample is None:
        return
    sample_id = str(sample.id)
    nodes, links = sample.task_nodes, sample.task_links
    calls = [node.task for node in nodes]
    query = _query_of(sample, requests, at)
    if query is None:
        return
    if not calls:
        at.skipped(f"sample {sample_id!r} has no task nodes")
        return
    if not at.known(calls, "tool_desc.json"):
        return
    n_tools = sample.n_tools
    if isinstance(n_tools, int) and n_tools != len(calls):
        at.kept(f"n_tools is {n_tools} but there are {len(calls)} task nodes; used the task nodes")
    at.add(
        query,
        calls,
        _resolve_links(links, calls, at),
        sample_id,
        cycle="task_links",
        arguments=lambda plan_order: _node_arguments(nodes, calls, at, plan_order),
    )


def _node_arguments(
    nodes: Sequence[Node], calls: Sequence[str], at: SampleAt, order: Sequence[int]
) -> Sequence[CallArguments] | None:
    """The nodes' published arguments by name (in the plan's `order`), or None."""
    raw = [node.arguments for node in nodes]
    if all(a is None for a in raw):
        return None
    values: list[Any] = []
    for k, (arg, name) in enumerate(zip(raw, calls, strict=True)):
        tool = at.intake.catalogue.get(name)
        props = list((tool.parameters.get("properties") or {}) if tool else {})
        if isinstance(arg, list) and all(
            isinstance(a, Mapping) and isinstance(a.get("name"), str) for a in arg
        ):
            values.append({a["name"]: a.get("value") for a in arg})
        elif isinstance(arg, list) and len(arg) == len(props):
            values.append(dict(zip(props, arg, strict=True)))
        else:
            at.kept(
                f"task_nodes[{k}].arguments is not a list of the {len(props)} inputs of "
                f"{name!r}; the sample's parameter filling is not scored"
            )
            return None
    labels = [f"<node-{k}>" for k in range(len(calls))]
    return at.arguments(values, labels, "task_nodes[{k}].arguments")(order)


def _query_of(sample: Sample, requests: Mapping[str, Sequence[str]], at: SampleAt) -> str | None:
    sample_id = str(sample.id)
    texts = requests.get(sample_id)
    if texts:
        if len(texts) > 1:
            at.kept(
                f"user_requests.json gives {len(texts)} different requests for id "
                f"{sample_id!r}; used the first"
            )
        return texts[0]
    for value in (sample.user_request, sample.instruction):
        if isinstance(value, str) and value.strip():
            return value
    at.malformed(
        f"no query for id {sample_id!r}: not in user_requests.json and no 'user_request' or "
        "'instruction' field"
    )
    return None


def _resolve_links(
    links: Sequence[Link], calls: Sequence[str], at: SampleAt
) -> list[tuple[int, int]]:
    """task_links as (i, j) node positions, repairing / dropping links as documented."""
    positions: dict[str, list[int]] = {}
    for k, name in enumerate(calls):
        positions.setdefault(name, []).append(k)
    edges: list[tuple[int, int]] = []
    by_index: list[str] = []
    ambiguous: set[str] = set()
    for link in links:
        ends: list[list[int]] = []
        for role in ("source", "target"):
            ref = getattr(link, role)
            if isinstance(ref, int) and not isinstance(ref, bool):
                by_index.append(f"{role} {ref}")
                if not 0 <= ref < len(calls):
                    at.repaired(
                        f"link {role} {ref} is not a node position (0-{len(calls) - 1}); "
                        "dropped the link"
                    )
                    break
                ends.append([ref])
            elif isinstance(ref, str) and ref in positions:
                if len(positions[ref]) > 1:
                    ambiguous.add(ref)
                ends.append(positions[ref])
            else:
                at.repaired(f"link {role} {ref!r} is not one of the task nodes; dropped the link")
                break
        if len(ends) != 2:
            continue
        pair = _nearest_pair(ends[0], ends[1])
        if pair is None:
            at.repaired(
                f"link {link.source!r} -> {link.target!r} joins a node to itself; dropped the link"
            )
            continue
        edges.append(pair)
    if by_index:
        at.repaired(
            "task_links refer to nodes by index, not by name; read them as positions in task_nodes"
        )
    if ambiguous:
        at.repaired(
            f"task(s) {', '.join(map(repr, sorted(ambiguous)))} occur more than once; links "
            "naming them join the nearest occurrences (source listed before target)"
        )
    return edges


def _nearest_pair(sources: Sequence[int], targets: Sequence[int]) -> tuple[int, int] | None:
    """The (source, target) positions a name-based link means: nearest forward pair first."""
    forward = [(j - i, i, j) for i in sources for j in targets if i < j]
    if forward:
        _, i, j = min(forward)
        return i, j
    backward = [(i - j, i, j) for i in sources for j in targets if i > j]
    if backward:
        _, i, j = min(backward)
        return i, j
    return None
