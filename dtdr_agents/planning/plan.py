"""A query plan and the recorded-plans file (JSON lines).

One line per request: ``{"query": str, "sub_goals": [str, ...], "queries": [str, ...]}``
(``"task_breakdown"`` optional). `read_plans` reports a line that does not parse with its file
and line (or skips it with ``skip_bad=True``); `PlanRecorder` appends the plans of a live run.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dtdr_agents.foundation.errors import DatasetFormatError
from dtdr_agents.planning.prompts import PlanningError

SOURCE_CHAT = "chat model"
"""`Plan.source` of a plan a chat model wrote in this run."""
SOURCE_REPLAY = "recorded plan"
"""`Plan.source` of a plan read from a plans file."""
SOURCE_INSTRUCTION = "dataset-provided LLM text"
"""`Plan.source` of a plan made of a dataset's shipped instruction (not a live planner)."""
SUB_GOALS_ONLY = "sub_goals_only"
"""`Plan.stopped` of a plan of sub-goals alone (a planner of one turn: `ChatPlanner(...,
max_turns=1)`, for `HybridRetriever(goal_planner=...)`); its record says
``"sub_goals_only": true`` and needs no queries."""

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "in",
        "into",
        "is",
        "it",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "with",
        "tool",
        "tools",
        "retrieve",
        "find",
        "get",
        "given",
        "task",
    ]
)


@dataclass(frozen=True)
class Plan:
    """The sub-goals and functional queries a planner wrote for one request.

    Attributes:
        request: The user's request.
        sub_goals: The sub-goals (intents), in plan order.
        queries: The functional queries, in the order they were written.
        breakdown: The task breakdown text ("" when there is none).
        source: Who wrote it: `SOURCE_CHAT`, `SOURCE_REPLAY` or `SOURCE_INSTRUCTION`.
        stopped: Why the loop ended: "stop_retrieval", "turn_cap", "recorded" ...
    """

    request: str
    sub_goals: tuple[str, ...]
    queries: tuple[str, ...]
    breakdown: str = ""
    source: str = SOURCE_REPLAY
    stopped: str = "recorded"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sub_goals", tuple(self.sub_goals))
        object.__setattr__(self, "queries", tuple(self.queries))

    @property
    def sub_goals_only(self) -> bool:
        """Whether this is a plan of sub-goals alone (`SUB_GOALS_ONLY`: one planning turn)."""
        return self.stopped == SUB_GOALS_ONLY

    def check(self, *, queries: bool = True) -> Plan:
        """Return self if the plan names a sub-goal and (with `queries`) a functional query.

        Raises:
            PlanningError: It names none (ToolQP fuses queries; a sub-goals-only plan has none).
        """
        if not self.sub_goals:
            raise PlanningError("the plan names no sub-goal")
        if queries and not self.queries:
            raise PlanningError("the plan has no functional query")
        return self

    def targets(self) -> tuple[int, ...]:
        """The sub-goal each query serves (index into `sub_goals`), by word overlap.

        A query goes to the sub-goal sharing the largest fraction of its words; with no
        overlap, query ``i`` goes to sub-goal ``min(i, n - 1)`` (plans usually follow the
        sub-goal order).
        """
        goal_words = [_words(g) for g in self.sub_goals]
        out = []
        for i, query in enumerate(self.queries):
            words = _words(query)
            best, best_score = min(i, len(self.sub_goals) - 1), 0.0
            for g, gw in enumerate(goal_words):
                union = words | gw
                score = len(words & gw) / len(union) if union else 0.0
                if score > best_score + 1e-12:
                    best, best_score = g, score
            out.append(best)
        return tuple(out)

    def to_record(self) -> dict[str, Any]:
        """The JSON-lines record (`read_plans` reads it back)."""
        out: dict[str, Any] = {
            "query": self.request,
            "sub_goals": list(self.sub_goals),
            "queries": list(self.queries),
        }
        if self.breakdown:
            out["task_breakdown"] = self.breakdown
        if self.sub_goals_only:
            out[SUB_GOALS_ONLY] = True
        return out


def _words(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1)


def _strings(value: Any) -> list[str] | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return [" ".join(v.split()) for v in value if v.strip()]


def plan_from_record(record: Any, *, source: str = SOURCE_REPLAY) -> Plan:
    """A `Plan` from one plans-file record.

    Raises:
        PlanningError: The record is not ``{"query", "sub_goals": [...], "queries": [...]}``
            with a non-empty query, at least one sub-goal and at least one query (the
            message names the field). A record with ``"sub_goals_only": true`` (a plan of
            sub-goals alone, `SUB_GOALS_ONLY`) needs no queries.
    """
    if not isinstance(record, Mapping):
        raise PlanningError(f"expected a JSON object, got {type(record).__name__}")
    query = record.get("query")
    if not isinstance(query, str) or not query.strip():
        raise PlanningError("field 'query' must be a non-empty string")
    goals = _strings(record.get("sub_goals"))
    if goals is None:
        raise PlanningError("field 'sub_goals' must be a list of strings")
    only = record.get(SUB_GOALS_ONLY, False)
    if not isinstance(only, bool):
        raise PlanningError(f"field {SUB_GOALS_ONLY!r} must be true or false")
    queries = _strings(record.get("queries", [] if only else None))
    if queries is None:
        raise PlanningError("field 'queries' must be a list of strings")
    breakdown = record.get("task_breakdown", "")
    if not isinstance(breakdown, str):
        raise PlanningError("field 'task_breakdown' must be a string")
    plan = Plan(query.strip(), tuple(goals), tuple(queries), breakdown.strip(), source)
    if only:
        plan = replace(plan, stopped=SUB_GOALS_ONLY)
    try:
        return plan.check(queries=not only)
    except PlanningError as exc:
        field_name = "sub_goals" if not goals else "queries"
        raise PlanningError(f"field {field_name!r}: {exc}") from None


def read_plans(path: str | Path, *, skip_bad: bool = False) -> tuple[dict[str, Plan], list[str]]:
    """Read a plans file (JSON lines).

    Args:
        path: The file.
        skip_bad: Skip a line that does not parse (reported in the problems) instead of
            raising.

    Returns:
        ``(plans by request text, problems)``; a request recorded twice keeps its first plan
        (reported).

    Raises:
        DatasetFormatError: The file is missing, or a line does not parse (file and line).
    """
    p = Path(path)
    if not p.is_file():
        raise DatasetFormatError("plans file not found", str(p))
    plans: dict[str, Plan] = {}
    problems: list[str] = []
    first_line: dict[str, int] = {}
    with p.open(encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, start=1):
            text = raw.strip()
            if not text:
                continue
            try:
                try:
                    record = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise PlanningError(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
                plan = plan_from_record(record)
            except PlanningError as exc:
                if not skip_bad:
                    raise DatasetFormatError(str(exc), str(p), lineno) from None
                problems.append(f"{p}:{lineno}: skipped: {exc}")
                continue
            if plan.request in plans:
                problems.append(
                    f"{p}:{lineno}: skipped: a plan for this query is already at line "
                    f"{first_line[plan.request]}"
                )
                continue
            plans[plan.request] = plan
            first_line[plan.request] = lineno
    return plans, problems


def write_plans(path: str | Path, plans: Iterable[Plan]) -> Path:
    """Write plans as a JSON-lines file, atomically (a temporary file, then a rename)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for plan in plans:
            fh.write(json.dumps(plan.to_record(), ensure_ascii=False) + "\n")
    tmp.replace(out)
    return out


class PlanRecorder:
    """Appends each plan of a live run to a JSON-lines plans file (one line per plan).

    Args:
        path: The file (created if missing; existing lines are kept).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PlanRecorder({str(self.path)!r})"

    def record(self, plan: Plan) -> None:
        """Append `plan` as one line (whole lines only; safe across threads)."""
        line = json.dumps(plan.to_record(), ensure_ascii=False) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line)
                fh.flush()


def instruction_plans(pairs: Iterable[tuple[str, str]]) -> dict[str, Plan]:
    """One-query plans from ``(request, instruction)`` pairs (ToolRet's shipped text).

    Each plan has the instruction as its only sub-goal and its only query, and
    ``source=SOURCE_INSTRUCTION``: it is LLM text that came with the dataset, not the output
    of a planner run here.
    """
    out: dict[str, Plan] = {}
    for request, instruction in pairs:
        if request.strip() and instruction.strip() and request.strip() not in out:
            text = " ".join(instruction.split())
            out[request.strip()] = Plan(
                request.strip(), (text,), (text,), "", SOURCE_INSTRUCTION, "recorded"
            )
    return out


def plans_in_order(plans: Mapping[str, Plan], requests: Sequence[str]) -> list[Plan]:
    """The plans of `requests` that exist, in that order (for `write_plans`)."""
    return [plans[r.strip()] for r in requests if r.strip() in plans]


__all__ = [
    "SOURCE_CHAT",
    "SOURCE_INSTRUCTION",
    "SOURCE_REPLAY",
    "SUB_GOALS_ONLY",
    "Plan",
    "PlanRecorder",
    "instruction_plans",
    "plan_from_record",
    "plans_in_order",
    "read_plans",
    "write_plans",
]
