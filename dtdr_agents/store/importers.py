"""Turn existing traces into runs of the store: JSONL recordings, LangSmith, OpenTelemetry.

Importing is idempotent: every run gets an id derived from its source (the recording's own
``id``, else a hash of its content and its position among identical records), so importing
the same file twice, or a file that grew since, adds only the new runs.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

from dtdr_agents.datasets.base import Problem
from dtdr_agents.datasets.jsonl import load_jsonl
from dtdr_agents.foundation.types import Demonstration
from dtdr_agents.store.runs import RunRecord, RunStore
from dtdr_agents.store.traces import langsmith_spans, otel_spans, runs_from_spans

FORMATS = ("jsonl", "langsmith", "otel")
"""The trace formats `import_traces` reads."""


def _content_id(prefix: str, demo: Demonstration, seen: Counter[str]) -> str:
    """A stable id for an unnamed record: its content's hash and its occurrence number."""
    body = json.dumps([demo.query, demo.calls, demo.edges], sort_keys=True, default=list)
    digest = hashlib.sha256(body.encode("utf-8")).hexdigest()[:24]
    seen[digest] += 1
    return f"{prefix}-{digest}-{seen[digest]}"


def import_jsonl(store: RunStore, path: str | Path) -> tuple[int, tuple[Problem, ...]]:
    """Add the runs of a JSONL recording (the `DemonstrationRecorder` format) to `store`.

    A live recording's partial last line (being written) is skipped with a problem; any other
    malformed line is an error naming the file and line (`load_jsonl`).

    Returns:
        How many runs were new, and the loader's problems (e.g. the partial last line).
    """
    data = load_jsonl(Path(path), keep_duplicates=True)
    seen: Counter[str] = Counter()
    runs = [
        RunRecord.from_demonstration(
            demo, id=demo.id or _content_id("jsonl", demo, seen), source="jsonl"
        )
        for demo in data.demos
    ]
    return store.add_many(runs), tuple(data.problems)


def import_traces(
    store: RunStore, path: str | Path, format: str
) -> tuple[int, tuple[Problem, ...]]:
    """Add the runs of a trace file in `format` (one of `FORMATS`) to `store`.

    LangSmith run exports and OpenTelemetry GenAI spans (OTLP JSON) become one run per trace
    (`dtdr_agents.store.traces`); ids are ``langsmith-<trace id>`` / ``otel-<trace id>``, so a
    re-import adds only new traces.

    Returns:
        How many runs were new, and the problems (traces skipped, with the reason).

    Raises:
        ValueError: If `format` is not one of `FORMATS`.
        DatasetFormatError: The file is not in that format (file and line or item named).
    """
    if format == "jsonl":
        return import_jsonl(store, path)
    readers = {"langsmith": langsmith_spans, "otel": otel_spans}
    if format not in readers:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    where = str(path)
    runs, problems = runs_from_spans(readers[format](Path(path)), source=format, where=where)
    return store.add_many(runs), tuple(problems)
