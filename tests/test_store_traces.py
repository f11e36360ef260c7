"""Importing LangSmith run exports and OpenTelemetry GenAI spans into the run store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dtdr_agents.foundation.errors import DatasetFormatError
from dtdr_agents.store import RunStore, import_traces
from dtdr_agents.store.schema import SCHEMA_VERSION


def _ls_run(id: str, trace: str, parent: str | None, kind: str, name: str, t: int, **kw: Any):
    order = f"20260101T00000{t}000000Z{id}"
    return {
        "id": id,
        "trace_id": trace,
        "parent_run_id": parent,
        "run_type": kind,
        "name": name,
        "dotted_order": order if parent is None else f"20260101T000000000000Z{parent}.{order}",
        "start_time": f"2026-01-01T00:00:0{t}.000000",
        "inputs": kw.get("inputs", {}),
        "outputs": {},
        "error": kw.get("error"),
    }


LANGSMITH = [
    _ls_run(
        "r1", "t1", None, "chain", "LangGraph", 0,
        inputs={"messages": [
            {"type": "system", "content": "You are a helpful agent."},
            {"type": "human", "content": "Find the weather in Paris, then convert it to F"},
        ]},
    ),
    _ls_run("r4", "t1", "r1", "tool", "convert", 4, inputs={"value": 21, "unit": "F"}),
    _ls_run("r2", "t1", "r1", "tool", "geocode", 1, inputs={"city": "Paris"}),
    _ls_run("r3", "t1", "r1", "llm", "ChatOpenAI", 2),
    _ls_run("r5", "t1", "r1", "tool", "weather", 3, inputs={"lat": 48.8, "lon": 2.3}),
    _ls_run("s1", "t2", None, "chain", "AgentExecutor", 5, inputs={"input": "book a table"},
            error="TimeoutError"),
    _ls_run("s2", "t2", "s1", "tool", "search_restaurants", 6, inputs={"q": "table"}),
    _ls_run("u1", "t3", None, "chain", "LangGraph", 7, inputs={}),
]  # fmt: skip


def _attr(key: str, value: Any) -> dict[str, Any]:
    kind = "intValue" if isinstance(value, int) else "stringValue"
    return {"key": key, "value": {kind: value}}


def _span(trace: str, span: str, parent: str | None, t: int, attrs: list[Any], **kw: Any):
    out = {
        "traceId": trace,
        "spanId": span,
        "name": "span",
        "kind": 1,
        "startTimeUnixNano": str(1_700_000_000_000_000_000 + t * 1_000_000),
        "endTimeUnixNano": str(1_700_000_000_000_000_000 + t * 1_000_000 + 5),
        "attributes": attrs,
        "status": kw.get("status", {}),
    }
    if parent:
        out["parentSpanId"] = parent
    return out


def _tool(trace: str, span: str, t: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return _span(trace, span, "01", t, [
        _attr("gen_ai.operation.name", "execute_tool"),
        _attr("gen_ai.tool.name", name),
        _attr("gen_ai.tool.call.id", f"call_{span}"),
        _attr("gen_ai.tool.call.arguments", json.dumps(args)),
    ])  # fmt: skip


MESSAGES = [
    {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
    {"role": "user", "parts": [{"type": "text", "content": "Weather in Rome, then in F"}]},
]
OTEL = {
    "resourceSpans": [{
        "resource": {"attributes": [_attr("service.name", "agent")]},
        "scopeSpans": [{
            "scope": {"name": "opentelemetry.instrumentation.openai_agents"},
            "spans": [
                _span("aa", "01", None, 0, [
                    _attr("gen_ai.operation.name", "invoke_agent"),
                    _attr("gen_ai.input.messages", json.dumps(MESSAGES)),
                ]),
                _tool("aa", "03", 3, "weather", {"city": "Rome"}),
                _tool("aa", "02", 1, "geocode", {"city": "Rome"}),
                _span("aa", "04", "01", 2, [_attr("gen_ai.operation.name", "chat")]),
                _tool("aa", "05", 5, "convert", {"unit": "F"}),
                _span("bb", "01", None, 9, [
                    _attr("gen_ai.operation.name", "invoke_agent"),
                    _attr("gen_ai.prompt", "Translate hello to French"),
                ], status={"code": 2, "message": "boom"}),
            ],
        }],
    }]
}  # fmt: skip


def test_langsmith_export_becomes_one_run_per_trace(tmp_path: Path) -> None:
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(LANGSMITH))
    with RunStore(tmp_path / "runs.db") as store:
        added, problems = import_traces(store, path, "langsmith")
        assert added == 2
        assert [p.message for p in problems] == ["skipped: no user request found"]
        assert "trace t3" in problems[0].where
        runs = {r.id: r for r in store.iter_runs()}
        ok = runs["langsmith-t1"]
        assert ok.request == "Find the weather in Paris, then convert it to F"
        assert ok.calls == ("geocode", "weather", "convert")  # start order, not file order
        assert ok.arguments is not None and ok.arguments[0].values() == {"city": "Paris"}
        assert ok.outcome == "success" and ok.source == "langsmith"
        failed = runs["langsmith-t2"]
        assert failed.request == "book a table" and failed.outcome == "failure"
        assert [d.id for d in store.demonstrations()] == ["langsmith-t1"]
        assert import_traces(store, path, "langsmith")[0] == 0  # idempotent


def test_otel_genai_spans_become_runs(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"  # the collector's file exporter: one object per line
    path.write_text(json.dumps(OTEL) + "\n" + json.dumps({"resourceSpans": []}) + "\n")
    with RunStore(tmp_path / "runs.db") as store:
        added, problems = import_traces(store, path, "otel")
        assert (added, problems) == (2, ())
        runs = {r.id: r for r in store.iter_runs()}
        run = runs["otel-aa"]
        assert run.request == "Weather in Rome, then in F"
        assert run.calls == ("geocode", "weather", "convert")
        assert run.arguments is not None and run.arguments[2].values() == {"unit": "F"}
        assert run.created_at.year == 2023
        other = runs["otel-bb"]
        assert other.request == "Translate hello to French"
        assert other.calls == () and other.outcome == "failure"


@pytest.mark.parametrize(
    ("fmt", "content", "message"),
    [
        ("otel", '{"spans": []}', r"spans\.json:1: field 'resourceSpans' is missing"),
        ("langsmith", '[{"name": "x"}]', r"spans\.json:1: run 0: field 'id' or 'run_type'"),
        ("langsmith", '{"id": 1, "run_type": "chain"}\n{oops', r"spans\.json:2: not valid JSON"),
    ],
)
def test_malformed_traces_name_the_file_and_place(
    tmp_path: Path, fmt: str, content: str, message: str
) -> None:
    path = tmp_path / "spans.json"
    path.write_text(content)
    with RunStore(tmp_path / "runs.db") as store, pytest.raises(DatasetFormatError, match=message):
        import_traces(store, path, fmt)
    with RunStore(tmp_path / "runs.db") as store:
        assert store.count() == 0  # nothing half-written
        with pytest.raises(ValueError, match="format must be one of"):
            import_traces(store, path, "csv")


def test_store_commands_import_and_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dtdr_agents.cli import main

    path = tmp_path / "runs.json"
    path.write_text(json.dumps(LANGSMITH))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    assert main(["store", "import", str(path), "--format", "langsmith", "--store", db]) == 0
    assert main(["store", "import", str(path), "--format", "langsmith", "--store", db]) == 0
    out = capsys.readouterr()
    assert f"{path}: 2 new runs" in out.out and f"{path}: 0 new runs" in out.out
    assert "trace t3" in out.err
    assert main(["store", "stats", "--store", db]) == 0
    stats = capsys.readouterr().out
    assert f"schema version {SCHEMA_VERSION}, 2 runs" in stats
    assert "langsmith    failure  1" in stats
    assert main(["store", "import", str(tmp_path / "nope.json"), "--store", db]) == 2
    assert "nope.json: no such file" in capsys.readouterr().err
