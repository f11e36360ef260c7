"""Framework-free data model: tools, catalogues, demonstrations and rankings."""

from __future__ import annotations

import hashlib
import inspect
import json
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, overload

import numpy as np

from dtdr_agents.foundation.errors import (
    InvalidDemonstrationError,
    InvalidToolError,
    UnknownToolError,
)

END_OF_PLAN = "<end_of_plan>"
"""The end-of-plan token: ranked like a tool, never bound to a model."""

_EMPTY_SCHEMA: Mapping[str, Any] = {"type": "object", "properties": {}}


def _tool_metadata(obj: Any) -> Any | None:
    """The tool-metadata object of a LlamaIndex-style tool (duck-typed), or None.

    LlamaIndex tools keep their name, description and schema on ``.metadata`` (a
    `ToolMetadata`); LangChain tools have a ``metadata`` dict, which is not this.
    """
    meta = getattr(obj, "metadata", None)
    if meta is None or isinstance(meta, Mapping):
        return None
    if not isinstance(getattr(meta, "name", None), str) or not hasattr(meta, "description"):
        return None
    return meta


def _schema_of(obj: Any) -> Mapping[str, Any]:
    """Best-effort JSON schema of a tool-like object's arguments."""
    schema = getattr(obj, "args_schema", None)
    if isinstance(schema, Mapping):
        return dict(schema)
    if schema is not None and hasattr(schema, "model_json_schema"):
        return dict(schema.model_json_schema())
    args = getattr(obj, "args", None)
    if isinstance(args, Mapping):
        return {"type": "object", "properties": dict(args)}
    meta = _tool_metadata(obj)
    if meta is not None:
        get_parameters = getattr(meta, "get_parameters_dict", None)
        params = get_parameters() if callable(get_parameters) else None
        if isinstance(params, Mapping):
            return dict(params)
        fn_schema = getattr(meta, "fn_schema", None)
        if fn_schema is not None and hasattr(fn_schema, "model_json_schema"):
            return dict(fn_schema.model_json_schema())
        return dict(_EMPTY_SCHEMA)
    if callable(obj):
        props: dict[str, Any] = {}
        required: list[str] = []
        names = {int: "integer", float: "number", str: "string", bool: "boolean"}
        try:
            hints = typing.get_type_hints(obj)
        except Exception:  # unresolvable annotations: fall back to strings
            hints = {}
        for pname, param in inspect.signature(obj).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            props[pname] = {"type": names.get(hints.get(pname, param.annotation), "string")}
            if param.default is param.empty:
                required.append(pname)
        return {"type": "object", "properties": props, "required": required}
    return dict(_EMPTY_SCHEMA)


def output_names(schema: Any) -> tuple[str, ...]:
    """The property names of an output JSON schema (MCP ``outputSchema``); () for anything else."""
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return tuple(str(k) for k in props) if isinstance(props, Mapping) else ()


@dataclass(frozen=True)
class Tool:
    """One tool of a catalogue.

    Attributes:
        name: Unique name the model calls the tool by.
        description: What the tool does, in natural language.
        parameters: JSON schema (an object schema) of the tool's arguments.
        outputs: Names or types of what the tool returns, where the catalogue declares them
            (TaskBench ``output-type``, Seal-Tools ``responses``, an MCP ``outputSchema``'s
            properties). The tool dependency graph links a tool to the ones whose parameters
            take them; the model never sees them (`to_openai` leaves them out).
    """

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: dict(_EMPTY_SCHEMA))
    outputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise InvalidToolError(
                f"tool field 'name' must be a non-empty string, got {self.name!r}"
            )
        if self.name == END_OF_PLAN:
            raise InvalidToolError(
                f"tool name {END_OF_PLAN!r} is reserved for the end-of-plan token"
            )
        if not isinstance(self.description, str):
            raise InvalidToolError(
                f"tool {self.name!r}: field 'description' must be a string, "
                f"got {type(self.description).__name__}"
            )
        if not isinstance(self.parameters, Mapping):
            raise InvalidToolError(
                f"tool {self.name!r}: field 'parameters' must be a JSON-schema object, "
                f"got {type(self.parameters).__name__}"
            )
        outputs: Any = self.outputs  # a list or any other sequence is accepted too
        if isinstance(outputs, str) or not isinstance(outputs, Sequence):
            raise InvalidToolError(
                f"tool {self.name!r}: field 'outputs' must be a list of strings, "
                f"got {type(outputs).__name__}"
            )
        bad = [o for o in outputs if not isinstance(o, str) or not o.strip()]
        if bad:
            raise InvalidToolError(
                f"tool {self.name!r}: field 'outputs' must hold non-empty strings, got {bad[0]!r}"
            )
        object.__setattr__(self, "outputs", tuple(dict.fromkeys(outputs)))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Tool:
        """Build a tool from a plain dict or an OpenAI tool / function schema.

        Accepts `{"name", "description", "parameters", "outputs"}`, the OpenAI tool form
        `{"type": "function", "function": {...}}`, `input_schema` for `parameters`, and an
        `output_schema` (or MCP `outputSchema`) whose property names are the `outputs`.
        """
        if not isinstance(data, Mapping):
            raise InvalidToolError(f"a tool must be a mapping, got {type(data).__name__}")
        if data.get("type") == "function" and isinstance(data.get("function"), Mapping):
            data = data["function"]
        if "name" not in data:
            raise InvalidToolError(f"tool is missing the field 'name': {dict(data)!r:.200}")
        params = data.get("parameters", data.get("input_schema"))
        outputs = data.get("outputs")
        if outputs is None:
            outputs = output_names(data.get("output_schema", data.get("outputSchema")))
        return cls(
            name=data["name"],
            description=data.get("description") or "",
            parameters=dict(params) if isinstance(params, Mapping) else dict(_EMPTY_SCHEMA),
            outputs=outputs,
        )

    @classmethod
    def from_any(cls, obj: Any) -> Tool:
        """Build a tool from a dict, an OpenAI schema, or any object with a name and description.

        Objects are duck-typed: `name`, `description` and an `args_schema` (pydantic model or
        dict) or `args` mapping, as LangChain tools have; LlamaIndex tools (no `name`, a
        ``metadata`` with `name`, `description` and `get_parameters_dict()` or `fn_schema`);
        plain functions use their name, docstring and signature.
        """
        if isinstance(obj, Tool):
            return obj
        if isinstance(obj, Mapping):
            return cls.from_dict(obj)
        meta = None if getattr(obj, "name", None) else _tool_metadata(obj)
        if meta is not None:
            return cls(
                name=meta.name, description=str(meta.description or ""), parameters=_schema_of(obj)
            )
        name = getattr(obj, "name", None) or getattr(obj, "__name__", None)
        if name is None:
            raise InvalidToolError(f"cannot read a tool name from {type(obj).__name__} object")
        description = getattr(obj, "description", None)
        if description is None:
            description = inspect.getdoc(obj) or ""
        return cls(name=str(name), description=str(description), parameters=_schema_of(obj))

    def text(self) -> str:
        """The text embedded for this tool: its name and description."""
        return f"{self.name}: {self.description}" if self.description else self.name

    def _function(self) -> dict[str, Any]:
        """What the model sees of the tool: `name`, `description`, `parameters`."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": dict(self.parameters),
        }

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (`name`, `description`, `parameters`, and `outputs` if any)."""
        out = self._function()
        if self.outputs:
            out["outputs"] = list(self.outputs)
        return out

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI chat-completions tool schema (what the model sees: no `outputs`)."""
        return {"type": "function", "function": self._function()}


class Toolset(Sequence[Tool]):
    """An ordered catalogue of tools with unique names.

    Args:
        tools: Tools, or anything `Tool.from_any` accepts.
        allow_empty: Accept an empty catalogue (only useful for intermediate steps).
    """

    def __init__(self, tools: Iterable[Any], *, allow_empty: bool = False) -> None:
        items = [Tool.from_any(t) for t in tools]
        if not items and not allow_empty:
            raise InvalidToolError("the tool catalogue is empty: give at least one tool")
        index: dict[str, int] = {}
        for i, tool in enumerate(items):
            if tool.name in index:
                raise InvalidToolError(
                    f"duplicate tool name {tool.name!r} at positions {index[tool.name]} and {i}"
                )
            index[tool.name] = i
        self._tools = tuple(items)
        self._index = index

    @overload
    def __getitem__(self, i: int) -> Tool: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Tool]: ...
    def __getitem__(self, i: int | slice) -> Tool | Sequence[Tool]:
        return self._tools[i]

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools)

    def __contains__(self, item: object) -> bool:
        if isinstance(item, Tool):
            return self._index.get(item.name) is not None and self[self._index[item.name]] == item
        return item in self._index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Toolset) and self._tools == other._tools

    def __hash__(self) -> int:
        return hash(self._tools)

    def __repr__(self) -> str:
        shown = ", ".join(self.names[:5]) + (", ..." if len(self) > 5 else "")
        return f"Toolset({len(self)} tools: {shown})"

    @property
    def names(self) -> tuple[str, ...]:
        """Tool names in catalogue order."""
        return tuple(t.name for t in self._tools)

    def index(self, name: Any, start: int = 0, stop: int | None = None) -> int:
        """Position of the tool called `name`; raises `UnknownToolError` if absent."""
        try:
            i = self._index[name]
        except KeyError:
            raise UnknownToolError(
                f"unknown tool {name!r}: not in the catalogue", (name,)
            ) from None
        if i < start or (stop is not None and i >= stop):
            raise UnknownToolError(f"tool {name!r} is not in the requested range", (name,))
        return i

    def has(self, name: str) -> bool:
        """Whether a tool called `name` is in the catalogue."""
        return name in self._index

    def get(self, name: str) -> Tool | None:
        """The tool called `name`, or None."""
        i = self._index.get(name)
        return None if i is None else self._tools[i]

    @cached_property
    def catalogue_hash(self) -> str:
        """A stable hash of the catalogue's content (names, descriptions, schemas), order-free."""
        canon = sorted(
            json.dumps(t.to_dict(), sort_keys=True, ensure_ascii=False) for t in self._tools
        )
        return hashlib.sha256("\n".join(canon).encode("utf-8")).hexdigest()[:16]

    def to_list(self) -> list[dict[str, Any]]:
        """Plain-JSON list of tool dicts."""
        return [t.to_dict() for t in self._tools]

    def subset(self, names: Iterable[str]) -> Toolset:
        """A catalogue of the named tools, in this catalogue's order."""
        wanted = set(names)
        missing = wanted.difference(self._index)
        if missing:
            raise UnknownToolError(f"unknown tools: {sorted(missing)}", tuple(sorted(missing)))
        return Toolset([t for t in self._tools if t.name in wanted], allow_empty=True)


@dataclass(frozen=True)
class Step:
    """One teacher-forced step of a plan.

    Attributes:
        history: The calls made before this step, in order.
        acceptable: Tools that may come next (all calls whose predecessors are done), or
            `{END_OF_PLAN}` at the last step.
        target: The call recorded next in the demonstration (or `END_OF_PLAN`).
    """

    history: tuple[str, ...]
    acceptable: frozenset[str]
    target: str


@dataclass(frozen=True)
class CallArguments:
    """The recorded arguments of one call (the gold answer of parameter filling).

    Attributes:
        json: The arguments as canonical JSON text of an object (sorted keys), so the record
            stays immutable and hashable.
        label: The name later calls use for this call's result (Seal-Tools ``API_call_0``,
            NESTFUL ``var1``), or None.
    """

    json: str
    label: str | None = None

    def __post_init__(self) -> None:
        try:
            value = json.loads(self.json)
        except (TypeError, ValueError) as exc:
            raise InvalidDemonstrationError(f"arguments must be JSON text: {exc}") from None
        if not isinstance(value, dict):
            raise InvalidDemonstrationError(
                f"arguments must be a JSON object, got {type(value).__name__}"
            )
        if self.label is not None and (not isinstance(self.label, str) or not self.label):
            raise InvalidDemonstrationError("an arguments label must be a non-empty string")

    @classmethod
    def of(cls, values: Mapping[str, Any], label: str | None = None) -> CallArguments:
        """Record `values` (a JSON-serialisable mapping) in canonical form."""
        if not isinstance(values, Mapping):
            raise InvalidDemonstrationError(
                f"arguments must be an object, got {type(values).__name__}"
            )
        try:
            text = json.dumps(dict(values), sort_keys=True, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidDemonstrationError(f"arguments are not plain JSON: {exc}") from None
        return cls(text, label)

    def values(self) -> dict[str, Any]:
        """The arguments as a fresh dict."""
        out: dict[str, Any] = json.loads(self.json)
        return out


@dataclass(frozen=True)
class Demonstration:
    """A solved request: the query and the ordered tool calls that answered it.

    Attributes:
        query: The user's request.
        calls: Tool names in the order they were called (a topological order of `edges`).
        edges: Dependencies `(i, j)`: call `j` needs call `i` first (so `i < j`). `None`
            means the recorded order is the only acceptable order; `()` means the calls are
            independent and may come in any order.
        id: Optional identifier, used in error messages and reports.
        arguments: The recorded arguments of each call (one per call, same order), when the
            dataset has them; None otherwise. Retrieval ignores them; the end-to-end
            evaluation scores parameter filling against them.
    """

    query: str
    calls: tuple[str, ...]
    edges: tuple[tuple[int, int], ...] | None = None
    id: str | None = None
    arguments: tuple[CallArguments, ...] | None = None

    def __post_init__(self) -> None:
        where = f"demonstration {self.id!r}" if self.id is not None else "demonstration"
        if not isinstance(self.query, str) or not self.query.strip():
            raise InvalidDemonstrationError(f"{where}: field 'query' must be a non-empty string")
        calls: Any = self.calls
        if isinstance(calls, str) or not all(isinstance(c, str) and c for c in calls):
            raise InvalidDemonstrationError(
                f"{where}: field 'calls' must be a list of non-empty tool names"
            )
        if END_OF_PLAN in self.calls:
            raise InvalidDemonstrationError(
                f"{where}: field 'calls' must not contain the end-of-plan token {END_OF_PLAN!r}"
            )
        object.__setattr__(self, "calls", tuple(self.calls))
        if self.edges is not None:
            edges = _edge_pairs(self.edges, where)
            n = len(self.calls)
            for i, j in edges:
                if not (0 <= i < n and 0 <= j < n):
                    raise InvalidDemonstrationError(
                        f"{where}: field 'edges' has ({i}, {j}) outside the {n} calls"
                    )
                if i >= j:
                    raise InvalidDemonstrationError(
                        f"{where}: field 'edges' has ({i}, {j}); the calls must be listed in a "
                        "dependency order (every edge i -> j with i < j)"
                    )
            object.__setattr__(self, "edges", tuple(sorted(set(edges))))
        if self.arguments is not None:
            args: Any = self.arguments
            if isinstance(args, str | Mapping) or not all(
                isinstance(a, CallArguments) for a in args
            ):
                raise InvalidDemonstrationError(
                    f"{where}: field 'arguments' must be a list of CallArguments, one per call"
                )
            if len(args) != len(self.calls):
                raise InvalidDemonstrationError(
                    f"{where}: field 'arguments' has {len(args)} entries for "
                    f"{len(self.calls)} calls"
                )
            object.__setattr__(self, "arguments", tuple(args))

    @cached_property
    def _predecessors(self) -> tuple[frozenset[int], ...]:
        preds: list[set[int]] = [set() for _ in self.calls]
        for i, j in self.edges or ():
            preds[j].add(i)
        return tuple(frozenset(p) for p in preds)

    def acceptable_next(self, done: int) -> frozenset[str]:
        """Tools acceptable after the first `done` recorded calls.

        Without edges that is the next recorded call; with edges, every remaining call whose
        predecessors are all among the first `done`; after the last call, `{END_OF_PLAN}`.
        """
        ready = self.ready(done)
        return frozenset(self.calls[j] for j in ready) if ready else frozenset({END_OF_PLAN})

    def ready(self, done: int) -> tuple[int, ...]:
        """Positions of the calls that may come after the first `done` (empty at the end)."""
        n = len(self.calls)
        if not 0 <= done <= n:
            raise ValueError(f"done must be in [0, {n}], got {done}")
        if done == n:
            return ()
        if self.edges is None:
            return (done,)
        preds = self._predecessors
        return tuple(j for j in range(done, n) if all(p < done for p in preds[j]))

    def steps(self) -> list[Step]:
        """The teacher-forced steps of this plan, ending with the end-of-plan step."""
        out = []
        for t in range(len(self.calls) + 1):
            target = self.calls[t] if t < len(self.calls) else END_OF_PLAN
            out.append(Step(self.calls[:t], self.acceptable_next(t), target))
        return out

    def check_tools(self, tools: Toolset) -> None:
        """Raise `InvalidDemonstrationError` if a call names a tool missing from `tools`."""
        for pos, name in enumerate(self.calls):
            if not tools.has(name):
                where = f"demonstration {self.id!r}" if self.id is not None else "demonstration"
                raise InvalidDemonstrationError(
                    f"{where}: calls[{pos}] = {name!r} is not in the tool catalogue"
                )

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form, as read by the generic JSONL loader."""
        out: dict[str, Any] = {"query": self.query, "calls": list(self.calls)}
        if self.edges is not None:
            out["edges"] = [list(e) for e in self.edges]
        if self.id is not None:
            out["id"] = self.id
        if self.arguments is not None:
            out["calls"] = [
                {"name": c, "arguments": a.values(), **({"label": a.label} if a.label else {})}
                for c, a in zip(self.calls, self.arguments, strict=True)
            ]
        return out


@dataclass(frozen=True)
class RankedTool:
    """One entry of a ranking.

    Attributes:
        name: Tool name (or `END_OF_PLAN`).
        probability: The retriever's probability for this tool at this step.
        rank: 1-based position in the ranking.
        why: A short explanation of where the score came from.
    """

    name: str
    probability: float
    rank: int
    why: str


@dataclass(frozen=True, eq=False)
class Ranking:
    """A probability distribution over the catalogue's tools and the end-of-plan token.

    Attributes:
        names: Candidate names (catalogue order, then `END_OF_PLAN`).
        probabilities: One probability per name, summing to 1.
        explanation: What produced the scores (method, cluster, Markov key, backoff, ...).
        fallback: True when the query looks out of distribution: the retriever's evidence
            for it is not to be trusted (the same meaning for every retriever), so a
            selection keeps the ranking's best `SelectionPolicy.fallback_k` tools instead of
            its cut; `fallback_reason` says which test failed (docs/architecture.md).
        fallback_reason: Why the fallback fired, or None.
        notes: Per-tool notes (e.g. "added after fit: query-similarity prior").
    """

    names: tuple[str, ...]
    probabilities: np.ndarray
    explanation: Mapping[str, Any] = field(default_factory=dict)
    fallback: bool = False
    fallback_reason: str | None = None
    notes: Mapping[str, str] = field(default_factory=dict)

    @cached_property
    def order(self) -> np.ndarray:
        """Indices into `names`, best first (ties keep catalogue order)."""
        return np.argsort(-self.probabilities, kind="stable")

    @cached_property
    def _positions(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.names)}

    def probability(self, name: str) -> float:
        """Probability of `name` (0.0 for names not in the ranking)."""
        i = self._positions.get(name)
        return 0.0 if i is None else float(self.probabilities[i])

    def rank_of(self, name: str) -> int | None:
        """1-based rank of `name`, or None if it is not a candidate."""
        i = self._positions.get(name)
        if i is None:
            return None
        ranks = np.empty(len(self.order), dtype=np.int64)
        ranks[self.order] = np.arange(1, len(self.order) + 1)
        return int(ranks[i])

    def why(self, name: str) -> str:
        """A short explanation of `name`'s score."""
        if name in self.notes:
            return self.notes[name]
        parts = [f"{k}={v}" for k, v in self.explanation.items() if k != "method"]
        method = self.explanation.get("method", "retriever")
        return f"{method} p={self.probability(name):.3f}" + (
            f" ({', '.join(parts)})" if parts else ""
        )

    def top(self, k: int | None = None, *, include_end: bool = True) -> list[RankedTool]:
        """The best `k` entries (all if None), optionally leaving out the end-of-plan token."""
        if k is not None and (not _is_int(k) or k < 0):
            raise ValueError(f"Ranking.top: k must be an integer >= 0 or None, got {k!r}")
        out: list[RankedTool] = []
        for pos, i in enumerate(self.order, start=1):
            name = self.names[int(i)]
            if not include_end and name == END_OF_PLAN:
                continue
            if k is not None and len(out) >= k:
                break
            out.append(RankedTool(name, float(self.probabilities[int(i)]), pos, self.why(name)))
        return out

    def ranked_names(self) -> list[str]:
        """All names, best first."""
        return [self.names[int(i)] for i in self.order]

    def as_dict(self) -> dict[str, float]:
        """Name -> probability, best first."""
        return {self.names[int(i)]: float(self.probabilities[int(i)]) for i in self.order}


def as_history(history: str | Sequence[str] | None) -> tuple[str, ...]:
    """Normalise a history argument (None, a comma-separated string, or a sequence)."""
    if history is None:
        return ()
    if isinstance(history, str):
        return tuple(h.strip() for h in history.split(",") if h.strip())
    if not isinstance(history, Iterable) or isinstance(history, bytes | Mapping):
        raise TypeError(
            f"history must be a list of tool names, a comma-separated string or None, got "
            f"{type(history).__name__} {history!r:.80}"
        )
    out = tuple(history)
    for pos, name in enumerate(out):
        if not isinstance(name, str):
            raise TypeError(f"history[{pos}] must be a tool name (str), got {name!r:.80}")
    return out


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _edge_pairs(edges: Any, where: str) -> tuple[tuple[int, int], ...]:
    """Validate `edges` as pairs of integer call positions (named in the error)."""
    if isinstance(edges, str | bytes | Mapping) or not isinstance(edges, Iterable):
        raise InvalidDemonstrationError(
            f"{where}: field 'edges' must be a list of [i, j] pairs, got {edges!r:.80}"
        )
    out: list[tuple[int, int]] = []
    for edge in edges:
        if (
            not isinstance(edge, Sequence)
            or isinstance(edge, str | bytes)
            or len(edge) != 2
            or not all(_is_int(v) for v in edge)
        ):
            raise InvalidDemonstrationError(
                f"{where}: field 'edges' has {edge!r:.80}; each edge must be a pair of "
                "integer call positions [i, j]"
            )
        out.append((int(edge[0]), int(edge[1])))
    return tuple(out)
