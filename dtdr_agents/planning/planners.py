"""Planners: who writes the sub-goals and functional queries of a request.

A planner takes the request and a `search` function (a functional query -> the base
retriever's top tools as ``(name, short description)``) and returns a `Plan`. It raises on
failure (`PlanningError`, `ChatModelError`, anything): `ToolQPRetriever` then falls back to
its base retriever's single-shot ranking and says so.

- `ChatPlanner`: the ToolQP-Prompting loop (paper 003, Fig. 14) with any chat model of the
  core chat protocol (`dtdr_agents.foundation.chat`): LangChain chat models, `OpenAIChat`, test
  doubles.
- `ReplayPlanner`: recorded plans (a JSON-lines plans file, or plans in memory), so runs are
  repeatable offline.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from pathlib import Path
from typing import Protocol, runtime_checkable

from dtdr_agents.foundation.chat import ChatModel, Message, ainvoke_text, invoke_text
from dtdr_agents.foundation.errors import ChatModelError
from dtdr_agents.planning.plan import (
    SOURCE_CHAT,
    SUB_GOALS_ONLY,
    Plan,
    PlanRecorder,
    read_plans,
)
from dtdr_agents.planning.prompts import (
    NEXT_QUERY_TURN,
    SYSTEM_PROMPT,
    PlanningError,
    feedback_message,
    first_turn_message,
    parse_first_turn,
    parse_query_turn,
)

SearchFn = Callable[[str], Sequence[tuple[str, str]]]
"""A functional query -> the base retriever's top tools as ``(name, short description)``."""

MAX_TURNS = 10
"""Default cap on the planner's turns per request (the planning turn included)."""

FEEDBACK_K = 5
"""Tools shown to the planner after each query (paper 003: the top 5)."""


@runtime_checkable
class Planner(Protocol):
    """Writes the plan of a request; sync and async."""

    def plan(self, request: str, search: SearchFn) -> Plan:
        """The plan of `request` (`search` runs a functional query through the base)."""
        ...

    async def aplan(self, request: str, search: SearchFn) -> Plan:
        """Async `plan`."""
        ...


Dialogue = Generator[list[Message], str, Plan]


class ChatPlanner:
    """The ToolQP-Prompting planner over a chat model (paper 003, Fig. 14).

    Turn 1 asks for a task breakdown and the sub-goals; every later turn asks for one
    functional query, runs it through the base retriever and feeds back the top `feedback_k`
    tools (names and short descriptions). The loop ends on ``<stop_retrieval>`` or after
    `max_turns` chat calls (the planning turn included). With ``max_turns=1`` the plan is the
    first turn's sub-goals alone (`SUB_GOALS_ONLY`): one chat call per request, what
    `HybridRetriever(goal_planner=...)` reads; ToolQP, which fuses queries, refuses it. An
    unusable answer on turn 1 (garbage, missing tags, no sub-goal) raises `PlanningError`; an
    unusable later answer ends the loop (and raises if no query was written yet).

    Args:
        chat_model: Anything with `invoke(messages)` (see `dtdr_agents.foundation.chat.ChatModel`);
            its `ainvoke` is used by `aplan` when it has one.
        max_turns: Cap on chat calls per request (1: the sub-goals alone).
        feedback_k: Tools fed back after each query.
        recorder: A `PlanRecorder` (or a path) that appends every plan, so a live run can be
            replayed with `ReplayPlanner`.
    """

    def __init__(
        self,
        chat_model: ChatModel,
        *,
        max_turns: int = MAX_TURNS,
        feedback_k: int = FEEDBACK_K,
        recorder: PlanRecorder | str | Path | None = None,
    ) -> None:
        if not callable(getattr(chat_model, "invoke", None)):
            raise ChatModelError(
                f"chat_model must have an invoke(messages) method, got {type(chat_model).__name__}"
            )
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be an integer >= 1, got {max_turns!r}")
        if isinstance(feedback_k, bool) or not isinstance(feedback_k, int) or feedback_k < 1:
            raise ValueError(f"feedback_k must be a positive integer, got {feedback_k!r}")
        self.chat_model = chat_model
        self.max_turns = max_turns
        self.feedback_k = feedback_k
        self.recorder = (
            recorder
            if recorder is None or isinstance(recorder, PlanRecorder)
            else PlanRecorder(recorder)
        )

    def __repr__(self) -> str:
        return f"ChatPlanner({self.chat_model!r}, max_turns={self.max_turns})"

    def _dialogue(self, request: str, search: SearchFn) -> Dialogue:
        """The conversation: yields the messages to send, receives each answer's text."""
        messages: list[Message] = [
            ("system", SYSTEM_PROMPT),
            ("human", first_turn_message(request)),
        ]
        answer = yield list(messages)
        first = parse_first_turn(answer)
        if self.max_turns == 1:
            only = Plan(request.strip(), first.sub_goals, (), first.breakdown, SOURCE_CHAT)
            return self._keep(replace(only, stopped=SUB_GOALS_ONLY).check(queries=False))
        messages += [("ai", answer), ("human", NEXT_QUERY_TURN)]
        queries: list[str] = []
        stopped = "turn_cap"
        for _ in range(self.max_turns - 1):
            answer = yield list(messages)
            try:
                query = parse_query_turn(answer)
            except PlanningError as exc:
                if not queries:
                    raise
                stopped = f"unusable answer ({exc})"
                break
            if query is None:
                stopped = "stop_retrieval"
                break
            queries.append(query)
            feedback = feedback_message(list(search(query))[: self.feedback_k])
            messages += [("ai", answer), ("human", f"{feedback}\n\n{NEXT_QUERY_TURN}")]
        plan = Plan(
            request.strip(), first.sub_goals, tuple(queries), first.breakdown, SOURCE_CHAT, stopped
        ).check()
        return self._keep(plan)

    def _keep(self, plan: Plan) -> Plan:
        """Record `plan` (with a recorder) and return it."""
        if self.recorder is not None:
            self.recorder.record(plan)
        return plan

    def plan(self, request: str, search: SearchFn) -> Plan:
        """Run the planning conversation for `request` (sync)."""
        dialogue = self._dialogue(request, search)
        messages = next(dialogue)
        while True:
            try:
                messages = dialogue.send(invoke_text(self.chat_model, messages))
            except StopIteration as done:
                plan: Plan = done.value
                return plan

    async def aplan(self, request: str, search: SearchFn) -> Plan:
        """Run the planning conversation for `request` with the model's async path."""
        dialogue = self._dialogue(request, search)
        messages = next(dialogue)
        while True:
            answer = await ainvoke_text(self.chat_model, messages)
            try:
                messages = dialogue.send(answer)
            except StopIteration as done:
                plan: Plan = done.value
                return plan


class ReplayPlanner:
    """Plans recorded beforehand, looked up by the request's text.

    Args:
        plans: Plans by request text (`read_plans`, `instruction_plans`), or a plans file.
        skip_bad: With a file: skip lines that do not parse instead of raising.

    Attributes:
        problems: Lines skipped or duplicated in the file.
    """

    def __init__(self, plans: Mapping[str, Plan] | str | Path, *, skip_bad: bool = False) -> None:
        self.problems: list[str] = []
        self.source_file: str | None = None
        if isinstance(plans, str | Path):
            self.source_file = str(plans)
            loaded, self.problems = read_plans(plans, skip_bad=skip_bad)
            self.plans: dict[str, Plan] = loaded
        else:
            self.plans = {key.strip(): plan for key, plan in plans.items()}

    def __repr__(self) -> str:
        where = f"{self.source_file!r}, " if self.source_file else ""
        return f"ReplayPlanner({where}{len(self.plans)} plans)"

    def __len__(self) -> int:
        return len(self.plans)

    def plan(self, request: str, search: SearchFn) -> Plan:
        """The recorded plan of `request` (`search` is not used).

        Raises:
            PlanningError: No plan was recorded for this request.
        """
        found = self.plans.get(request.strip())
        if found is None:
            raise PlanningError("no recorded plan for this request")
        return found.check(queries=not found.sub_goals_only)

    async def aplan(self, request: str, search: SearchFn) -> Plan:
        """Async `plan` (no I/O)."""
        return self.plan(request, search)


class KeptPlanner:
    """Another planner's plans, each request's kept: asked once, then answered from memory.

    Args:
        inner: The planner that writes a plan the first time a request is seen.
        kept: Plans already written, by request text (e.g. `read_plans` of the file a
            `ChatPlanner` records to): those requests are never asked again, so an
            interrupted recording resumes where it stopped.

    Attributes:
        served: The requests a plan was returned for.
        failed: The requests whose planning raised at least once, with the last reason (a
            failed request is asked again next time; the run that failed used no plan).
        asked: How many times a request went to `inner`.
    """

    def __init__(self, inner: Planner, kept: Mapping[str, Plan] | None = None) -> None:
        self.inner = inner
        self.kept: dict[str, Plan] = {k.strip(): p for k, p in (kept or {}).items()}
        self.served: set[str] = set()
        self.failed: dict[str, str] = {}
        self.asked = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"KeptPlanner({self.inner!r}, {len(self.kept)} kept)"

    def _known(self, request: str) -> Plan | None:
        with self._lock:
            found = self.kept.get(request.strip())
            if found is None:
                self.asked += 1
            else:
                self.served.add(request.strip())
            return found

    def _keep(self, request: str, plan: Plan | None, error: Exception | None) -> None:
        with self._lock:
            if plan is not None:
                self.kept[request.strip()] = plan
                self.served.add(request.strip())
            else:
                self.failed[request.strip()] = f"{type(error).__name__}: {error}"

    def plan(self, request: str, search: SearchFn) -> Plan:
        """The kept plan of `request`, else `inner`'s (then kept)."""
        found = self._known(request)
        if found is not None:
            return found
        try:
            plan = self.inner.plan(request, search)
        except Exception as exc:
            self._keep(request, None, exc)
            raise
        self._keep(request, plan, None)
        return plan

    async def aplan(self, request: str, search: SearchFn) -> Plan:
        """Async `plan`."""
        found = self._known(request)
        if found is not None:
            return found
        try:
            plan = await self.inner.aplan(request, search)
        except Exception as exc:
            self._keep(request, None, exc)
            raise
        self._keep(request, plan, None)
        return plan


_CLAUSE = re.compile(r"(?:[.;!?]\s+|,\s*(?:and\s+)?then\s+|\s+and\s+then\s+|\s+then\s+)", re.I)


class ClausePlanner:
    """A planner without an LLM: one sub-goal and one query per clause of the request.

    For tests and offline examples only: splitting requests into clauses brings no retrieval
    gain (issue 7 measured dense nDCG@10 43.5 -> 43.3 on ToolRet toolink). Plans say
    ``source="clauses (no LLM)"``.
    """

    source = "clauses (no LLM)"

    def __repr__(self) -> str:
        return "ClausePlanner()"

    def plan(self, request: str, search: SearchFn) -> Plan:
        """Split `request` into clauses; each is a sub-goal and its query."""
        clauses = [c.strip(" ,") for c in _CLAUSE.split(request) if len(c.strip(" ,")) > 3]
        parts = tuple(dict.fromkeys(clauses)) or (request.strip(),)
        return Plan(request.strip(), parts, parts, "", self.source, "recorded").check()

    async def aplan(self, request: str, search: SearchFn) -> Plan:
        """Async `plan` (no I/O)."""
        return self.plan(request, search)


def plan_within(planner: Planner, request: str, search: SearchFn, timeout: float | None) -> Plan:
    """`planner.plan(request, search)`, bounded by `timeout` seconds (None: unbounded).

    Raises:
        TimeoutError: Planning took longer (the planner's thread is left to finish).
    """
    if timeout is None or isinstance(planner, ReplayPlanner):
        return planner.plan(request, search)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="planner")
    try:
        return pool.submit(planner.plan, request, search).result(timeout)
    except FutureTimeout:
        raise TimeoutError(f"planning took longer than {timeout} s") from None
    finally:
        pool.shutdown(wait=False)


async def aplan_within(
    planner: Planner, request: str, search: SearchFn, timeout: float | None
) -> Plan:
    """Async `plan_within`: `planner.aplan`, bounded by `timeout` seconds."""
    try:
        return await asyncio.wait_for(planner.aplan(request, search), timeout)
    except TimeoutError:
        raise TimeoutError(f"planning took longer than {timeout} s") from None


__all__ = [
    "FEEDBACK_K",
    "MAX_TURNS",
    "ChatPlanner",
    "ClausePlanner",
    "KeptPlanner",
    "Planner",
    "ReplayPlanner",
    "SearchFn",
    "aplan_within",
    "plan_within",
]
