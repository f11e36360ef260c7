"""Learning from your own runs: append demonstrations from real agent runs to a JSONL file.

The file uses the generic JSON-lines format of `dtdr_agents.datasets.jsonl` (one
``{"query", "calls", "edges", "id"}`` object per line), so the loop is::

    recorder = DemonstrationRecorder("runs.jsonl", tools=tools)
    recorder.write_tools("tools.json", tools)          # once
    ... run the agent; an integration calls recorder.record(...) after each finished turn ...
    $ dtdr-agents fit --dataset jsonl --path runs.jsonl --tools tools.json -o model/

Calls are recorded in the order they were made. Tool calls the model issued together (one
message, run in parallel) are independent, so `record` takes the calls grouped by model step
and writes `edges` from every call of a step to every call of the next step: calls of one step
may then come in any order, while the order between steps is kept. When every step has one
call the order is strict and no `edges` are written (the JSONL meaning of a missing ``edges``).

A recording can be read while it is being written (`load_recording`): a last line without a
trailing newline that does not parse is a record being written; it is skipped with a
`PartialLineWarning` and a problem. Any other bad line is an error naming the file and line.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import uuid
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from dtdr_agents.datasets._json import BEING_WRITTEN
from dtdr_agents.datasets.base import Dataset
from dtdr_agents.foundation.errors import InvalidDemonstrationError
from dtdr_agents.foundation.types import Demonstration, Toolset

__all__ = [
    "BUFFER_LIMIT",
    "DemonstrationRecorder",
    "PartialLineWarning",
    "RecordingWarning",
    "load_recording",
    "plan_from_steps",
]


class PartialLineWarning(UserWarning):
    """A recording's last line was being written (no trailing newline, not JSON); skipped."""


class RecordingWarning(UserWarning):
    """A run could not be written to the run store; it is kept in memory and retried."""


BUFFER_LIMIT = 10_000
"""Runs a store-backed recorder keeps in memory while the database is unreachable; beyond
this the oldest are dropped, with a warning."""


def plan_from_steps(
    steps: Sequence[Sequence[str]],
) -> tuple[tuple[str, ...], tuple[tuple[int, int], ...] | None]:
    """Flatten calls grouped by model step into (calls, edges).

    Args:
        steps: Tool names per model step, in order (a step with several names is a batch of
            parallel calls). Empty steps are ignored.

    Returns:
        The calls in order, and the edges from every call of a step to every call of the next
        step; None when every step has exactly one call (strict order).
    """
    batches = [tuple(step) for step in steps if len(step) > 0]
    calls: list[str] = []
    positions: list[list[int]] = []
    for batch in batches:
        positions.append(list(range(len(calls), len(calls) + len(batch))))
        calls.extend(batch)
    if all(len(b) == 1 for b in batches):
        return tuple(calls), None
    edges = [(i, j) for a, b in itertools.pairwise(positions) for i in a for j in b]
    return tuple(calls), tuple(edges)


def _append_line(path: Path, data: bytes) -> None:
    """Append one line with a single `write` on an O_APPEND descriptor.

    If the file does not end with a newline (a writer was killed mid-line), a newline is
    written first, so the torn line stays alone (the loader reports it and `--skip-bad` skips
    it) and this record starts on a fresh line.
    """
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.fstat(fd).st_size
        if size > 0:
            with open(path, "rb") as fh:
                fh.seek(size - 1)
                if fh.read(1) != b"\n":
                    data = b"\n" + data
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)


def load_recording(path: str | Path, tools_path: str | Path | None = None) -> Dataset:
    """Read a recording (possibly still being written) as a `Dataset`, with `load_jsonl`.

    A last line without a trailing newline that does not parse is a record being written:
    the JSONL reader skips it with a `Problem` naming the file and line (`iter_jsonl`), and
    this adds a `PartialLineWarning`.

    Args:
        path: The JSONL file a `DemonstrationRecorder` appends to.
        tools_path: The tools file (see `load_jsonl`).

    Raises:
        DatasetFormatError: Any other malformed line (in the middle, or last but ended by a
            newline); the message names the file and line.
        DatasetNotFoundError: A file is missing.
    """
    from dtdr_agents.datasets.jsonl import load_jsonl

    data = load_jsonl(Path(path), tools_path)
    for problem in data.problems:
        if problem.message.endswith(BEING_WRITTEN):
            warnings.warn(f"{problem.where}: {problem.message}", PartialLineWarning, stacklevel=2)
    return data


class DemonstrationRecorder:
    """Records finished runs: to a JSONL file (`fit --dataset jsonl`) or a run store.

    A JSONL file is what `dtdr-agents fit --dataset jsonl` reads; a store URL writes each
    demonstration as a run of `dtdr_agents.store.RunStore` (`dtdr-agents refit --store`).

    Safe to share between threads; each demonstration is one ``write`` of one line to a file
    opened in append mode, so concurrent processes do not interleave lines on local disks.
    Every record starts on a fresh line, even after a writer was killed mid-line.

    With a store URL (``sqlite:///runs.db``, ``postgresql://...``) each demonstration is one
    run of the store. Recording never fails an agent's step: when the database cannot be
    reached the run stays in memory (a `RecordingWarning`) and is written with the next
    record that gets through; past `BUFFER_LIMIT` waiting runs the oldest are dropped, with a
    warning. `dedupe` then covers what this recorder wrote (the store is idempotent by id).

    Args:
        path: The JSONL file (created with its folder if missing; appended to otherwise), or
            a run store URL.
        tools: The tool catalogue; when given, calls to tools outside it are rejected.
        min_calls: Skip runs with fewer tool calls than this (a run without calls teaches the
            retriever only that the plan ends at once).
        dedupe: Skip a demonstration identical (query, calls, edges) to one already in the
            file or recorded by this recorder.
        id_prefix: Recorded ids are ``<id_prefix>-<12 hex digits>``.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        tools: Toolset | Iterable[Any] | None = None,
        min_calls: int = 1,
        dedupe: bool = True,
        id_prefix: str = "run",
    ) -> None:
        if min_calls < 0:
            raise ValueError(f"min_calls must be >= 0, got {min_calls}")
        self.url: str | None = str(path) if "://" in str(path) else None
        self.path = Path(path) if self.url is None else Path()
        self._store: Any = None
        self.pending: list[Any] = []
        self.dropped = 0
        self.tools: Toolset | None = (
            None if tools is None else tools if isinstance(tools, Toolset) else Toolset(tools)
        )
        self.min_calls = min_calls
        self.dedupe = dedupe
        self.id_prefix = id_prefix
        self.recorded: list[Demonstration] = []
        self.skipped = 0
        self._lock = threading.Lock()
        self._seen: set[tuple[str, tuple[str, ...], tuple[tuple[int, int], ...] | None]] | None
        self._seen = None
        if self.url is not None:
            from dtdr_agents.store import RunStore

            self._store = RunStore(self.url)  # a bad URL or a newer schema fails here, at once
            self._seen = set()

    @staticmethod
    def _key(
        demo: Demonstration,
    ) -> tuple[str, tuple[str, ...], tuple[tuple[int, int], ...] | None]:
        return (demo.query.strip(), demo.calls, demo.edges)

    def _load_seen(self) -> set[tuple[str, tuple[str, ...], tuple[tuple[int, int], ...] | None]]:
        seen: set[tuple[str, tuple[str, ...], tuple[tuple[int, int], ...] | None]] = set()
        if self.path.is_file():
            with self.path.open(encoding="utf-8") as fh:
                for line in fh:
                    try:
                        rec = json.loads(line)
                        edges = rec.get("edges")
                        seen.add(
                            (
                                str(rec["query"]).strip(),
                                tuple(c if isinstance(c, str) else c["name"] for c in rec["calls"]),
                                None
                                if edges is None
                                else tuple(sorted((int(i), int(j)) for i, j in edges)),
                            )
                        )
                    except (ValueError, KeyError, TypeError):
                        continue  # malformed lines are the loader's business
        return seen

    def record(
        self,
        query: str,
        calls: Sequence[str] | None = None,
        *,
        steps: Sequence[Sequence[str]] | None = None,
        edges: Iterable[tuple[int, int]] | None = None,
        id: str | None = None,
    ) -> Demonstration | None:
        """Append one demonstration.

        Give either `calls` (strict order, or with explicit `edges`) or `steps` (calls grouped
        by model step; edges are derived, see `plan_from_steps`).

        Args:
            query: The user's request.
            calls: Tool names in call order.
            steps: Tool names grouped by model step.
            edges: Dependencies ``(i, j)`` between `calls` (only with `calls`).
            id: Identifier to write; default ``<id_prefix>-<random hex>``.

        Returns:
            The demonstration written, or None when it was skipped (too few calls, duplicate).

        Raises:
            InvalidDemonstrationError: If the query is empty, a call is not in `tools`, or the
                arguments are inconsistent.
        """
        if (calls is None) == (steps is None):
            raise InvalidDemonstrationError("record needs exactly one of calls= or steps=")
        if steps is not None:
            if edges is not None:
                raise InvalidDemonstrationError("edges= cannot be combined with steps=")
            flat, derived = plan_from_steps(steps)
        else:
            assert calls is not None
            flat = tuple(calls)
            derived = None if edges is None else tuple((int(i), int(j)) for i, j in edges)
        demo = Demonstration(
            query=query.strip() if isinstance(query, str) else query,
            calls=flat,
            edges=derived,
            id=id or f"{self.id_prefix}-{uuid.uuid4().hex[:12]}",
        )
        if self.tools is not None:
            demo.check_tools(self.tools)
        if len(demo.calls) < self.min_calls:
            self.skipped += 1
            return None
        line = json.dumps(demo.to_dict(), ensure_ascii=False) + "\n"
        with self._lock:
            if self.dedupe:
                if self._seen is None:
                    self._seen = self._load_seen()
                key = self._key(demo)
                if key in self._seen:
                    self.skipped += 1
                    return None
                self._seen.add(key)
            if self._store is not None:
                self._write_run(demo)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                _append_line(self.path, line.encode("utf-8"))
            self.recorded.append(demo)
        return demo

    def _write_run(self, demo: Demonstration) -> None:
        """Write `demo` and any runs still waiting; keep them in memory if that fails."""
        from dtdr_agents.store import RunRecord

        self.pending.append(RunRecord.from_demonstration(demo, source="recorder"))
        try:
            self._store.add_many(self.pending)
        except Exception as exc:
            if len(self.pending) > BUFFER_LIMIT:
                over = len(self.pending) - BUFFER_LIMIT
                del self.pending[:over]
                self.dropped += over
            warnings.warn(
                f"run store {self._store.where}: {type(exc).__name__}: {exc}"[:300]
                + f"; {len(self.pending)} runs wait in memory ({self.dropped} dropped)",
                RecordingWarning,
                stacklevel=3,
            )
            return
        self.pending.clear()

    def __len__(self) -> int:
        """Demonstrations written by this recorder."""
        return len(self.recorded)

    def close(self) -> None:
        """Release the run store's connections (a JSONL recorder holds none)."""
        if self._store is not None:
            self._store.close()

    def load(self, tools_path: str | Path | None = None) -> Dataset:
        """Read the file back as a `Dataset` (with `load_recording`; see `dtdr-agents fit`).

        A partial last line (another process is writing it) is skipped with a
        `PartialLineWarning`; any other malformed line raises `DatasetFormatError`.

        A store-backed recorder reads the store's runs instead (`RunStore.dataset`; failed
        runs left out), which needs a catalogue: `tools_path` or this recorder's tools.

        Args:
            tools_path: The tools file; default: this recorder's catalogue if it has one
                (written next to the JSONL file as ``<name>.tools.json``), else none.

        Raises:
            ValueError: A store-backed recorder with no catalogue.
        """
        if self._store is not None:
            tools = self.tools
            if tools_path is not None:
                from dtdr_agents.datasets.jsonl import load_tools

                tools = load_tools(tools_path)
            if tools is None:
                raise ValueError(
                    f"reading the run store {self._store.where} back needs a catalogue: "
                    "pass tools_path or build the recorder with tools="
                )
            return self._store.dataset(tools)  # type: ignore[no-any-return]
        if tools_path is None and self.tools is not None:
            tools_path = self.write_tools(self.path.with_suffix(".tools.json"), self.tools)
        return load_recording(self.path, tools_path)

    @staticmethod
    def write_tools(path: str | Path, tools: Toolset | Iterable[Any]) -> Path:
        """Write a tools file (a JSON list of tool dicts) for ``dtdr-agents fit --tools``.

        Args:
            path: The file to write (atomically: a temporary file then a rename).
            tools: The catalogue (anything `Toolset` accepts, LangChain tools included).

        Returns:
            The path written.
        """
        toolset = tools if isinstance(tools, Toolset) else Toolset(tools)
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_text(json.dumps(toolset.to_list(), indent=1, ensure_ascii=False), "utf-8")
        os.replace(tmp, target)
        return target
