"""A dependency graph over the tool catalogue: "B can take what A produced".

Derived without demonstrations from what the catalogue says (`ToolGraph.from_catalogue`), or
given by the user (`ToolGraph.from_given`). Every edge A -> B records the evidence that
produced it; its weight is the sum of the weights of its kinds of evidence (each kind counts
once, whatever the number of matches):

* ``param:X`` (`WEIGHTS["param"]` = 1.0): A outputs X and B has a parameter named X
  (names compared lower-case, camelCase and separators folded; a parameter's numeric suffix
  such as TaskBench's ``image_2`` may be dropped).
* ``param-desc:X`` (0.5): a description of one of B's parameters mentions A's output X.
* ``desc-tool`` (0.5): B's description names A.
* ``desc-output:X`` (0.25): B's description mentions A's output X.

An output term found in more than `MAX_TERM_SHARE` of the parameter descriptions (or of the
tool descriptions) is no evidence there: a template such as "a file name or text" would link
everything. A term that more than `MAX_TERM_TOOLS` tools would take is no evidence either: it
cannot tell which of them comes next, and it would make a catalogue that repeats its schemas
a graph that grows with its square. Derived graphs have no self-loops (a tool feeding itself
is no dependency); given graphs keep whatever they say. Outputs are `Tool.outputs` (the
TaskBench, Seal-Tools and MCP loaders fill them from ``output-type``, ``responses`` and
``outputSchema``); `read_outputs` reads them from such files for tools built without them.
"""

from __future__ import annotations

import json
import re
import warnings
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np

from dtdr_agents.foundation.clauses import words
from dtdr_agents.foundation.errors import UnknownToolError
from dtdr_agents.foundation.types import Tool, Toolset, output_names

WEIGHTS: Mapping[str, float] = {
    "param": 1.0,
    "param-desc": 0.5,
    "desc-tool": 0.5,
    "desc-output": 0.25,
    "given": 1.0,
}
"""Weight of each kind of evidence; an edge's weight sums its kinds."""

_KIND_ORDER = {kind: i for i, kind in enumerate(WEIGHTS)}

MAX_TERM_SHARE = 0.5
"""An output term in more than this share of descriptions is no evidence in descriptions."""

MAX_TERM_TOOLS = 64
"""A term that would link a tool to more tools than this is no evidence (it cannot tell which
of them comes next); it also bounds a derived graph's size, which would otherwise grow with
the square of a catalogue that repeats its schemas."""

MAX_PHRASE_WORDS = 6
"""Longest tool name or output name (in words) looked for in descriptions."""

FORMAT = "dtdr-tool-graph"
"""The `format` field of `ToolGraph.to_dict`."""

_SUFFIX = re.compile(r"_\d+$")


def norm(name: str) -> str:
    """A name as compared: lower-case words joined by "_" (camelCase and separators folded)."""
    return "_".join(words(str(name)))


def param_terms(name: str) -> set[str]:
    """A parameter name's terms: `norm(name)`, and without a numeric suffix (``image_2``)."""
    term = norm(name)
    return {term, _SUFFIX.sub("", term)} - {""}


def _phrases(text: str) -> set[str]:
    """Every run of 1..`MAX_PHRASE_WORDS` words of `text`, normalised like `norm`."""
    found = words(text)
    out: set[str] = set()
    for i in range(len(found)):
        for n in range(1, min(MAX_PHRASE_WORDS, len(found) - i) + 1):
            out.add("_".join(found[i : i + n]))
    return out


def _as_toolset(tools: Toolset | Iterable[Tool]) -> Toolset:
    return tools if isinstance(tools, Toolset) else Toolset(tools)


class ToolGraph:
    """Weighted directed edges between tools, each with the evidence that produced it.

    Attributes:
        tools: The tool names, in catalogue order.
    """

    def __init__(self, tools: Sequence[str]) -> None:
        """An empty graph over the tool names `tools`."""
        self.tools: tuple[str, ...] = tuple(tools)
        self._known = set(self.tools)
        self._evidence: dict[str, dict[str, list[str]]] = {}
        self._weights: dict[str, dict[str, float]] = {}

    # ------------------------------------------------------------------------ building
    def add(self, source: str, target: str, evidence: str, weight: float | None = None) -> None:
        """Add `evidence` (e.g. "param:text") to the edge source -> target.

        Its weight is `weight`, else `WEIGHTS` of its kind (the part before ":"); each kind
        counts once per edge.

        Raises:
            UnknownToolError: If either name is not in the graph's tools.
        """
        missing = [n for n in (source, target) if n not in self._known]
        if missing:
            raise UnknownToolError(f"tool graph: {missing} not in the catalogue", tuple(missing))
        found = self._evidence.setdefault(source, {}).setdefault(target, [])
        if evidence in found:
            return
        kind = evidence.split(":", 1)[0]
        kinds = {e.split(":", 1)[0] for e in found}
        found.append(evidence)
        if kind not in kinds or weight is not None:
            add = WEIGHTS.get(kind, 1.0) if weight is None else float(weight)
            row = self._weights.setdefault(source, {})
            row[target] = row.get(target, 0.0) + add

    def _link(self, source: str, target: str, evidence: str) -> None:
        """`add` without checks or weights, for names known to be in the catalogue."""
        row = self._evidence.get(source)
        if row is None:
            row = self._evidence[source] = {}
        found = row.get(target)
        if found is None:
            row[target] = [evidence]
        elif evidence not in found:
            found.append(evidence)

    def _link_many(self, source: str, targets: Iterable[str], evidence: str) -> None:
        """`_link` from `source` to each of `targets` but itself (no derived self-loops)."""
        row = self._evidence.get(source)
        if row is None:
            row = self._evidence[source] = {}
        for target in targets:
            found = row.get(target)
            if found is None:
                if target != source:
                    row[target] = [evidence]
            elif evidence not in found:
                found.append(evidence)

    def _weigh(self) -> None:
        """Every edge's weight: the `WEIGHTS` of its kinds of evidence, each kind once."""
        cache: dict[tuple[str, ...], float] = {}
        for source, row in self._evidence.items():
            weights = self._weights.setdefault(source, {})
            for target, found in row.items():
                key = tuple(found)
                weight = cache.get(key)
                if weight is None:
                    kinds = {e.split(":", 1)[0] for e in found}
                    weight = cache[key] = sum(WEIGHTS.get(k, 1.0) for k in kinds)
                weights[target] = weight

    @classmethod
    def from_catalogue(
        cls,
        tools: Toolset | Iterable[Tool],
        outputs: Mapping[str, Sequence[str]] | None = None,
    ) -> Self:
        """Derive the graph from the catalogue's schemas and descriptions (no demonstrations).

        Args:
            tools: The catalogue; each tool's `Tool.outputs` are its declared outputs.
            outputs: More declared outputs: tool name -> output names or types
                (`read_outputs`); names not in the catalogue are ignored. Without any
                outputs, only descriptions naming other tools give edges.
        """
        toolset = _as_toolset(tools)
        graph = cls(toolset.names)
        produced: dict[str, set[str]] = defaultdict(set)  # output term -> producers
        declared = [(t.name, t.outputs) for t in toolset if t.outputs]
        for name, outs in [*declared, *(outputs or {}).items()]:
            if name in graph._known:
                for out in outs:
                    term = norm(out)
                    if term:
                        produced[term].add(name)
        by_name: dict[str, set[str]] = defaultdict(set)  # normalised tool name -> tools
        for tool in toolset:
            key = norm(tool.name)
            if key:
                by_name[key].add(tool.name)
        # only the phrases that could be evidence are kept (not every n-gram of every text)
        wanted = produced.keys() | by_name.keys()
        param_desc: dict[str, set[str]] = {}
        tool_desc: dict[str, set[str]] = {}
        consumers: dict[str, set[str]] = defaultdict(set)
        for tool in toolset:
            props = tool.parameters.get("properties")
            props = props if isinstance(props, Mapping) else {}
            texts = []
            for pname, spec in props.items():
                for term in param_terms(pname) & produced.keys():
                    consumers[term].add(tool.name)
                if isinstance(spec, Mapping) and isinstance(spec.get("description"), str):
                    texts.append(spec["description"])
            param_desc[tool.name] = _phrases(" ".join(texts)) & wanted if texts else set()
            tool_desc[tool.name] = _phrases(tool.description) & wanted
        n = max(1, len(toolset))
        common_param = _common(param_desc.values(), produced, n)
        common_desc = _common(tool_desc.values(), produced, n)
        for term, targets in consumers.items():
            if len(targets) <= MAX_TERM_TOOLS:
                for source in produced[term]:
                    graph._link_many(source, targets, f"param:{term}")
        # description evidence, gathered by (term, source) so each is one pass over targets
        by_desc: dict[tuple[str, str], list[str]] = defaultdict(list)
        for target in toolset.names:
            for term in param_desc[target] & produced.keys():
                if term not in common_param:
                    by_desc[(f"param-desc:{term}", term)].append(target)
            phrases = tool_desc[target]
            for key in phrases & by_name.keys():
                by_desc[("desc-tool", key)].append(target)
            for term in phrases & produced.keys():
                if term not in common_desc:
                    by_desc[(f"desc-output:{term}", term)].append(target)
        for (evidence, term), named in by_desc.items():
            if len(named) > MAX_TERM_TOOLS:
                continue
            sources = by_name[term] if evidence == "desc-tool" else produced[term]
            for source in sources:
                graph._link_many(source, named, evidence)
        graph._weigh()
        return graph

    @classmethod
    def from_given(
        cls, graph: Any, tools: Toolset | Iterable[Tool], *, strict: bool = True
    ) -> Self:
        """A user-given graph over the catalogue `tools`.

        Args:
            graph: TaskBench ``graph_desc.json`` data (``{"nodes", "links": [{"source",
                "target"}]}``) or its path; a networkx-like graph (``.edges(data=True)``,
                an edge's ``weight`` kept); or an edge list of (source, target[, weight])
                or {"source", "target"[, "weight"]} items.
            tools: The catalogue.
            strict: Unknown tool names raise; False skips their edges with a warning.

        Raises:
            UnknownToolError: Naming the tools not in the catalogue (with `strict`).
            ValueError: If `graph` is none of the accepted shapes.
        """
        out = cls(_as_toolset(tools).names)
        edges = list(_given_edges(graph))
        unknown = sorted({n for s, t, _ in edges for n in (s, t) if n not in out._known})
        if unknown:
            message = f"the given tool graph names tools not in the catalogue: {unknown}"
            if strict:
                raise UnknownToolError(
                    message + " (pass strict=False to skip them)", tuple(unknown)
                )
            warnings.warn(message + "; their edges are skipped", UserWarning, stacklevel=2)
        for source, target, weight in edges:
            if source in out._known and target in out._known:
                out.add(source, target, "given", weight)
        return out

    # ------------------------------------------------------------------------- reading
    def has(self, name: str) -> bool:
        """Whether `name` is a tool of this graph's catalogue."""
        return name in self._known

    def successors(self, name: str) -> dict[str, float]:
        """The tools that can take what `name` produced, with their edge weights."""
        self._check(name)
        return dict(self._weights.get(name, {}))

    def predecessors(self, name: str) -> dict[str, float]:
        """The tools whose outputs `name` can take, with their edge weights."""
        self._check(name)
        return {s: row[name] for s, row in self._weights.items() if name in row}

    def evidence(self, source: str, target: str) -> list[str]:
        """What produced the edge source -> target, strongest kind first (empty: no edge)."""
        self._check(source)
        self._check(target)
        found = self._evidence.get(source, {}).get(target, [])
        return sorted(found, key=lambda e: (_KIND_ORDER.get(e.split(":", 1)[0], 99), e))

    def adjacency(self, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The edges among `names` as CSR arrays (indptr, indices, weights) in that order.

        Row ``i`` holds the edges out of ``names[i]`` (``indices[indptr[i]:indptr[i + 1]]``
        index `names`); names outside the graph have none.
        """
        position = {n: i for i, n in enumerate(names)}
        indptr = np.zeros(len(names) + 1, dtype=np.int64)
        cols: list[int] = []
        vals: list[float] = []
        for i, name in enumerate(names):
            for target, weight in self._weights.get(name, {}).items():
                j = position.get(target)
                if j is not None:
                    cols.append(j)
                    vals.append(weight)
            indptr[i + 1] = len(cols)
        return indptr, np.array(cols, dtype=np.int64), np.array(vals, dtype=np.float64)

    def edges(self) -> list[tuple[str, str, float]]:
        """Every edge as (source, target, weight)."""
        return [(s, t, w) for s, row in self._weights.items() for t, w in row.items()]

    def __len__(self) -> int:
        """The number of edges."""
        return sum(len(row) for row in self._weights.values())

    def _check(self, name: str) -> None:
        if name not in self._known:
            raise UnknownToolError(f"{name!r} is not in the tool graph's catalogue", (name,))

    # ---------------------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (never pickle): tools and edges with weight and evidence."""
        return {
            "format": FORMAT,
            "version": 1,
            "tools": list(self.tools),
            "edges": [
                {"source": s, "target": t, "weight": w, "evidence": self.evidence(s, t)}
                for s, t, w in self.edges()
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The graph `to_dict` wrote.

        Raises:
            ValueError: Naming the field that is missing or malformed.
        """
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise ValueError(f"tool graph: field 'format' must be {FORMAT!r}")
        tools, edges = data.get("tools"), data.get("edges")
        if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
            raise ValueError("tool graph: field 'tools' must be a list of names")
        if not isinstance(edges, list):
            raise ValueError("tool graph: field 'edges' must be a list")
        graph = cls(tools)
        for pos, edge in enumerate(edges):
            try:
                source, target = str(edge["source"]), str(edge["target"])
                weight, evidence = float(edge["weight"]), list(edge["evidence"])
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"tool graph: field 'edges[{pos}]' is malformed: {exc}") from None
            missing = [n for n in (source, target) if n not in graph._known]
            if missing:
                raise ValueError(f"tool graph: field 'edges[{pos}]' names unknown {missing}")
            for item in evidence:
                graph._link(source, target, str(item))
            graph._weights.setdefault(source, {})[target] = weight
        return graph


def _common(docs: Iterable[set[str]], terms: Iterable[str], n: int) -> set[str]:
    """Terms found in more than `MAX_TERM_SHARE` of the documents."""
    count: dict[str, int] = defaultdict(int)
    wanted = set(terms)
    for doc in docs:
        for term in doc & wanted:
            count[term] += 1
    return {t for t, c in count.items() if c > MAX_TERM_SHARE * n}


def _given_edges(graph: Any) -> Iterable[tuple[str, str, float | None]]:
    if isinstance(graph, str | Path):
        graph = json.loads(Path(graph).read_text(encoding="utf-8"))
    if isinstance(graph, Mapping):
        links = graph.get("links", graph.get("edges"))
        if not isinstance(links, list):
            raise ValueError("tool graph: a mapping needs a list field 'links' (graph_desc.json)")
        graph = links
    elif hasattr(graph, "edges") and callable(graph.edges):
        return [
            (str(s), str(t), _weight(d.get("weight") if isinstance(d, Mapping) else None))
            for s, t, d in graph.edges(data=True)
        ]
    out: list[tuple[str, str, float | None]] = []
    for pos, item in enumerate(graph):
        if isinstance(item, Mapping) and "source" in item and "target" in item:
            out.append((str(item["source"]), str(item["target"]), _weight(item.get("weight"))))
        elif isinstance(item, Sequence) and not isinstance(item, str) and len(item) in (2, 3):
            w = _weight(item[2]) if len(item) == 3 else None
            out.append((str(item[0]), str(item[1]), w))
        else:
            raise ValueError(
                f"tool graph: edge {pos} must be (source, target[, weight]) or "
                f"{{'source', 'target'}}, got {item!r}"
            )
    return out


def given_edges(graph: Any) -> list[list[Any]]:
    """A given graph (any shape `ToolGraph.from_given` accepts) as a plain JSON edge list.

    Each edge is ``[source, target]`` or ``[source, target, weight]``; what a model folder
    stores for a graph passed as a networkx-like object or a path.

    Raises:
        ValueError: If `graph` is none of the accepted shapes.
    """
    return [[s, t] if w is None else [s, t, w] for s, t, w in _given_edges(graph)]


def _weight(value: Any) -> float | None:
    return None if value is None else float(value)


def read_outputs(source: Any) -> dict[str, tuple[str, ...]]:
    """Each tool's declared outputs: tool name -> output names or types.

    Reads TaskBench ``tool_desc.json`` (``output-type``), Seal-Tools ``tool.jsonl``
    (``responses`` keys), MCP tool lists (``outputSchema`` property names), as a path or as
    loaded data (a mapping with ``nodes`` or ``tools``, or a list of tool objects). Tools
    declaring nothing are left out.
    """
    if isinstance(source, str | Path):
        path = Path(source)
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".jsonl":
            source = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            source = json.loads(text)
    if isinstance(source, Mapping):
        source = source.get("nodes", source.get("tools", []))
    out: dict[str, tuple[str, ...]] = {}
    for item in source:
        if not isinstance(item, Mapping):
            continue
        name = item.get("id", item.get("api_name", item.get("name")))
        if not isinstance(name, str):
            continue
        found: list[str] = []
        kinds = item.get("output-type")
        if isinstance(kinds, list):
            found += [str(k) for k in kinds]
        responses = item.get("responses")
        if isinstance(responses, Mapping):
            found += [str(k) for k in responses]
        elif isinstance(responses, list):
            found += [str(k) for k in responses if isinstance(k, str)]
        found += output_names(item.get("outputSchema"))
        if found:
            out[name] = tuple(dict.fromkeys(found))
    return out
