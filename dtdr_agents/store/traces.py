"""Read agent traces of other tools as runs: LangSmith run exports and OpenTelemetry GenAI spans.

Both are trees of spans grouped by trace. A trace becomes one run: the request is the root's
user input, the calls are the trace's tool spans in start order (with their arguments when
recorded), and the outcome is ``"failure"`` when the root span failed, else ``"success"``.
A trace without a request is skipped with a problem naming the file and the trace id.

- **LangSmith** (`read_langsmith`): the JSON list of runs that ``Client.list_runs`` and the UI
  export give (or ``{"runs": [...]}``, or JSON lines): ``id``, ``trace_id``,
  ``parent_run_id``, ``run_type`` (``"tool"`` for a tool call), ``name``, ``inputs``,
  ``start_time``, ``dotted_order``, ``error``.
- **OpenTelemetry** (`read_otel`): OTLP JSON (``{"resourceSpans": [...]}``, one object or one
  per line, as the collector's file exporter writes) with the GenAI semantic conventions: a
  tool span has ``gen_ai.operation.name = "execute_tool"`` and ``gen_ai.tool.name``
  (arguments in ``gen_ai.tool.call.arguments``); the request is the first user message of
  ``gen_ai.input.messages`` (or the older ``gen_ai.prompt``) on the earliest span that has one.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dtdr_agents.datasets.base import Problem
from dtdr_agents.foundation.errors import DatasetFormatError
from dtdr_agents.foundation.types import CallArguments
from dtdr_agents.store.runs import RunRecord


@dataclass(frozen=True)
class Span:
    """One span of a trace, in the fields a run needs."""

    trace: str
    id: str
    parent: str | None
    start: str
    tool: str | None
    arguments: Any
    request: str | None
    failed: bool
    at: datetime | None


def _documents(path: Path) -> Iterator[tuple[int, Any]]:
    """The JSON documents of `path`: one whole-file document, or one per line (JSON lines)."""
    text = path.read_text(encoding="utf-8")
    try:
        yield 1, json.loads(text)
        return
    except json.JSONDecodeError:
        pass
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetFormatError(f"{path}:{number}: not valid JSON: {exc.msg}") from None


def _user_text(value: Any) -> str | None:
    """The first user message's text in a request-like value (str, messages, input dict)."""
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, Mapping):
        role = value.get("role") or value.get("type")
        if role in ("user", "human") and "content" in value:
            return _user_text(value["content"])
        if "parts" in value and role in ("user", "human"):
            return _user_text(value["parts"])
        if value.get("type") == "text" and isinstance(value.get("content"), str):
            return _user_text(value["content"])
        if isinstance(value.get("text"), str):
            return _user_text(value["text"])
        for key in ("input", "question", "query", "messages", "prompt"):
            if key in value:
                found = _user_text(value[key])
                if found:
                    return found
        return None
    if isinstance(value, list):
        for item in value:
            role = (item.get("role") or item.get("type")) if isinstance(item, Mapping) else None
            if role not in (None, "user", "human", "text"):
                continue  # a system or assistant message
            found = _user_text(item)
            if found:
                return found
    return None


def _time(value: Any) -> datetime | None:
    if isinstance(value, str) and value:
        try:
            at = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return at if at.tzinfo else at.replace(tzinfo=UTC)
    return None


def langsmith_spans(path: Path) -> Iterator[Span]:
    """The runs of a LangSmith export as spans.

    Raises:
        DatasetFormatError: A run is not an object with ``id`` and ``run_type`` (file, item).
    """
    for line, doc in _documents(path):
        items = doc.get("runs", doc) if isinstance(doc, Mapping) else doc
        if isinstance(items, Mapping):
            items = [items]
        if not isinstance(items, list):
            raise DatasetFormatError(f"{path}:{line}: expected a list of runs")
        for pos, run in enumerate(items):
            where = f"{path}:{line}: run {pos}"
            if not isinstance(run, Mapping) or "id" not in run or "run_type" not in run:
                raise DatasetFormatError(f"{where}: field 'id' or 'run_type' is missing")
            tool = str(run.get("name") or "") if run["run_type"] == "tool" else None
            if tool == "":
                raise DatasetFormatError(f"{where}: a tool run without field 'name'")
            parent = run.get("parent_run_id")
            yield Span(
                trace=str(run.get("trace_id") or run["id"]),
                id=str(run["id"]),
                parent=str(parent) if parent else None,
                start=str(run.get("dotted_order") or run.get("start_time") or ""),
                tool=tool,
                arguments=run.get("inputs") if tool else None,
                request=None if parent else _user_text(run.get("inputs")),
                failed=bool(run.get("error")),
                at=_time(run.get("start_time")),
            )


def _attributes(span: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attr in span.get("attributes") or []:
        value = attr.get("value") or {}
        for kind in ("stringValue", "intValue", "doubleValue", "boolValue"):
            if kind in value:
                out[str(attr.get("key"))] = value[kind]
                break
    return out


def _json_or_text(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def otel_spans(path: Path) -> Iterator[Span]:
    """The spans of an OTLP JSON file, with the GenAI attributes a run needs.

    Raises:
        DatasetFormatError: A document has no ``resourceSpans`` list (file, line).
    """
    for line, doc in _documents(path):
        resource_spans = doc.get("resourceSpans") if isinstance(doc, Mapping) else None
        if not isinstance(resource_spans, list):
            raise DatasetFormatError(f"{path}:{line}: field 'resourceSpans' is missing")
        for rs in resource_spans:
            for scope in rs.get("scopeSpans") or []:
                for span in scope.get("spans") or []:
                    attrs = _attributes(span)
                    is_tool = attrs.get("gen_ai.operation.name") == "execute_tool"
                    tool = attrs.get("gen_ai.tool.name") if is_tool else None
                    request = _user_text(_json_or_text(attrs.get("gen_ai.input.messages")))
                    request = request or _user_text(_json_or_text(attrs.get("gen_ai.prompt")))
                    nanos = int(span.get("startTimeUnixNano") or 0)
                    yield Span(
                        trace=str(span.get("traceId")),
                        id=str(span.get("spanId")),
                        parent=str(span.get("parentSpanId") or "") or None,
                        start=f"{nanos:020d}",
                        tool=str(tool) if tool else None,
                        arguments=_json_or_text(attrs.get("gen_ai.tool.call.arguments")),
                        request=request,
                        failed=(span.get("status") or {}).get("code") in (2, "STATUS_CODE_ERROR"),
                        at=datetime.fromtimestamp(nanos / 1e9, UTC) if nanos else None,
                    )


def runs_from_spans(
    spans: Iterator[Span], *, source: str, where: str
) -> tuple[list[RunRecord], list[Problem]]:
    """One run per trace: the root's request, the tool spans in start order, the outcome."""
    traces: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        traces[span.trace].append(span)
    runs: list[RunRecord] = []
    problems: list[Problem] = []
    for trace, members in traces.items():
        members.sort(key=lambda s: s.start)
        roots = [s for s in members if s.parent is None] or members[:1]
        request = next((s.request for s in roots if s.request), None)
        request = request or next((s.request for s in members if s.request), None)
        if not request:
            problems.append(Problem(f"{where}: trace {trace}", "skipped: no user request found"))
            continue
        tools = [s for s in members if s.tool]
        arguments = None
        if tools and all(isinstance(s.arguments, Mapping) for s in tools):
            arguments = tuple(CallArguments.of(s.arguments) for s in tools)
        times = [s.at for s in members if s.at]
        run = RunRecord(
            request=request,
            calls=tuple(str(s.tool) for s in tools),
            arguments=arguments,
            outcome="failure" if any(s.failed for s in roots) else "success",
            source=source,
            id=f"{source}-{trace}"[:128],
        )
        runs.append(replace(run, created_at=min(times)) if times else run)
    return runs, problems
