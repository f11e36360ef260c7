"""ToolQP: iterative query planning over any base retriever (paper 003), per agent step.

Once per request (cached per request and catalogue), a planner writes sub-goals and
functional queries; each query runs through the base retriever (a chat planner sees the top 5
after each query, Fig. 14). The rankings of the queries and of the request itself are fused by
peak rank (default) or RRF.

Beyond the paper, inside an agent: at a later step, each call already made serves the
sub-goal whose query ranked it best (within the top `done_k`; one sub-goal per call, the next
best when that one is served already). Served sub-goals' lists leave the fusion, so the
next-step ranking leans on the remaining sub-goals. The request's own list is
ranked by the base with the history (`base.rank(request, history)`), so a history-aware base
keeps its dependency knowledge.

Any planner failure (malformed output, an empty plan, a time-out, an HTTP error, no recorded
plan) falls back to the base retriever's single-shot ranking; `explanation["planner_fallback"]`
says why. Every ranking explains, for its top tools, which sub-goal and which query found each
tool and at what rank (`Ranking.why`), and `explain_tool` does it for any tool.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np

from dtdr_agents.foundation.checks import check_number
from dtdr_agents.foundation.errors import ModelLoadError
from dtdr_agents.foundation.types import Demonstration, Ranking, Toolset, as_history
from dtdr_agents.planning.fusion import FUSIONS, RRF_K, Fusion, fuse
from dtdr_agents.planning.plan import Plan
from dtdr_agents.planning.planners import (
    FEEDBACK_K,
    ClausePlanner,
    Planner,
    aplan_within,
    plan_within,
)
from dtdr_agents.retrievers.base import Scores, ToolRetriever
from dtdr_agents.retrievers.composite import CompositeRetriever

PLANNER_TIMEOUT = 60.0
"""Default bound, in seconds, on planning one request (all the planner's turns)."""

EXPLAIN_K = 10
"""Tools of each ranking that get a note saying which sub-goal and query found them."""

_EPS = 1e-12


@dataclass(frozen=True)
class _PlanState:
    """A request's plan with its base rankings (or why there is none)."""

    plan: Plan | None
    ranks: np.ndarray  # (n_queries, n_tools) 1-based ranks of each query's base ranking
    shapes: np.ndarray  # (n_queries, n_tools) each list's tool probabilities, best first
    targets: tuple[int, ...]
    fallback_reason: str | None = None


def _tool_order(ranking: Ranking, n_tools: int) -> np.ndarray:
    """Tool indices of `ranking`, best first (end-of-plan, the last name, left out)."""
    order = ranking.order
    tools: np.ndarray = order[order != n_tools]
    return tools


def _ranks_of(order: np.ndarray) -> np.ndarray:
    """1-based rank of every tool, from tool indices best first."""
    ranks = np.empty(len(order), dtype=np.int32)
    ranks[order] = np.arange(1, len(order) + 1, dtype=np.int32)
    return ranks


def _shape(ranking: Ranking, order: np.ndarray) -> np.ndarray:
    """The tool probabilities of `ranking` in its order, summing to 1."""
    values = np.asarray(ranking.probabilities, dtype=np.float64)[order]
    total = values.sum()
    out: np.ndarray = values / total if total > 0 else np.full(len(values), 1.0 / len(values))
    return out


def _tool_ranks(ranking: Ranking, n_tools: int) -> np.ndarray:
    """1-based rank of every tool in `ranking` (end-of-plan left out)."""
    return _ranks_of(_tool_order(ranking, n_tools))


class ToolQPRetriever(CompositeRetriever):
    """ToolQP query planning over a base retriever (composite id ``toolqp:<base>``).

    Args:
        base: The retriever the functional queries run through (fitted by `fit`; None:
            `qts`). Saved in the sub-folder ``base/``.
        planner: Writes the plans: `dtdr_agents.planning.ChatPlanner` (live chat model),
            `ReplayPlanner` (recorded plans), or any `Planner`. Not saved with the model: pass
            it again at load.
        fusion: "peak" (peak rank, the paper's choice) or "rrf".
        rrf_k: The RRF constant.
        include_request: Fuse the request's own base ranking with the queries' rankings (the
            paper keeps the user query).
        feedback_k: Tools returned to the planner after each query.
        done_k: A call in the history serves the sub-goal whose query ranked it best, if
            within the top `done_k` (one sub-goal per call).
        timeout: Bound in seconds on planning one request (None: no bound); beyond it the
            request falls back to the base ranking.
        cache_size: Plans kept (per request and catalogue).
    """

    retriever_id: ClassVar[str] = "toolqp"
    accepts_no_demos: ClassVar[bool] = True  # needs no demonstrations by nature
    default_base: ClassVar[str] = "qts"
    runtime_params: ClassVar[tuple[str, ...]] = ("planner",)
    uses_history: ClassVar[bool] = True

    base: ToolRetriever | None = None
    planner: Planner | None = None
    fusion: Fusion = "peak"
    rrf_k: int = RRF_K
    include_request: bool = True
    feedback_k: int = FEEDBACK_K
    done_k: int = FEEDBACK_K
    timeout: float | None = PLANNER_TIMEOUT
    cache_size: int = 1024

    @classmethod
    def unavailable_reason(cls, **params: Any) -> str | None:
        """Why toolqp cannot run with `params` (no planner), or None."""
        if params.get("planner") is None:
            return (
                "toolqp needs a planner: recorded plans (--plans FILE, or "
                "--plans-from-instruction on ToolRet), or a live chat model "
                "(--chat-base-url URL --chat-model NAME)"
            )
        return None

    @classmethod
    def example_params(cls) -> dict[str, Any]:
        """An offline planner for tests and examples: `ClausePlanner` (no LLM)."""
        return {"planner": ClausePlanner()}

    # ------------------------------------------------------------------------------ fitting
    def _check_params(self) -> None:
        super()._check_params()
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, got {self.fusion!r}")
        for name in ("rrf_k", "feedback_k", "done_k", "cache_size"):
            check_number(getattr(self, name), name, low=1, integer=True)
        check_number(self.timeout, "timeout", low=0.0, low_open=True, optional=True)

    def _fit_composite(self, demos: list[Demonstration], tools: Toolset) -> None:
        """Nothing to learn: plans are made per request (`fit` checked the parameters)."""

    def set_tools(self, tools: Toolset | Iterable[Any]) -> Self:
        """Change the catalogue of this retriever and of its base (plans are per catalogue)."""
        super().set_tools(tools)
        self._catalogue_hash = self.tools_.catalogue_hash
        return self

    # ------------------------------------------------------------------------------ planning
    def _cache(self) -> tuple[OrderedDict[tuple[str, str], _PlanState], threading.Lock]:
        cache: OrderedDict[tuple[str, str], _PlanState] | None = getattr(self, "_plans", None)
        if cache is None:
            cache = OrderedDict()
            self._plans = cache
            self._plans_lock = threading.Lock()
        return cache, self._plans_lock

    def set_params(self, **params: Any) -> Self:
        """Set constructor arguments (e.g. a planner after `load`); cached plans are dropped."""
        super().set_params(**params)
        self.clear_plans()
        return self

    def clear_plans(self) -> None:
        """Forget every cached plan."""
        cache, lock = self._cache()
        with lock:
            cache.clear()

    def _searcher(self) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], Any]:
        base = self.fitted_base()
        n_tools = len(self.tools_)
        lists: dict[str, tuple[np.ndarray, np.ndarray]] = {}

        def search(text: str) -> list[tuple[str, str]]:
            ranking = base.rank(text, (), ignore_unknown=True)
            order = _tool_order(ranking, n_tools)
            lists[text] = (_ranks_of(order), _shape(ranking, order))
            top = order[: self.feedback_k]
            return [(self.tools_[int(i)].name, self.tools_[int(i)].description) for i in top]

        return lists, search

    def _finish(
        self,
        plan: Plan | None,
        lists: dict[str, tuple[np.ndarray, np.ndarray]],
        search: Any,
        reason: str | None,
    ) -> _PlanState:
        n_tools = len(self.tools_)
        if plan is not None:
            try:
                plan.check()
                for text in plan.queries:
                    if text not in lists:
                        search(text)
                ranks = np.stack([lists[text][0] for text in plan.queries])
                shapes = np.stack([lists[text][1] for text in plan.queries])
                return _PlanState(plan, ranks, shapes, plan.targets())
            except Exception as exc:
                reason = f"{type(exc).__name__}: {exc}"
        empty = np.empty((0, n_tools))
        return _PlanState(None, empty.astype(np.int32), empty, (), reason)

    def _remember(self, key: tuple[str, str], state: _PlanState) -> _PlanState:
        cache, lock = self._cache()
        with lock:
            cache[key] = state
            cache.move_to_end(key)
            while len(cache) > self.cache_size:
                cache.popitem(last=False)
        return state

    def _cached(self, query: str) -> tuple[tuple[str, str], _PlanState | None]:
        key = (query.strip(), self._catalogue_hash)
        cache, lock = self._cache()
        with lock:
            state = cache.get(key)
            if state is not None:
                cache.move_to_end(key)
        return key, state

    def _require_planner(self) -> Planner:
        if self.planner is None:
            raise ValueError("no planner was given (set_params(planner=...))")
        return self.planner

    def _run_planner(self, request: str, search: Any) -> Plan:
        return plan_within(self._require_planner(), request, search, self.timeout)

    async def _arun_planner(self, request: str, search: Any) -> Plan:
        return await aplan_within(self._require_planner(), request, search, self.timeout)

    def _plan_state(self, query: str) -> _PlanState:
        key, state = self._cached(query)
        if state is not None:
            return state
        lists, search = self._searcher()
        try:
            plan, reason = self._run_planner(key[0], search), None
        except Exception as exc:  # any planner failure: fall back to the base ranking
            plan, reason = None, f"{type(exc).__name__}: {exc}"
        return self._remember(key, self._finish(plan, lists, search, reason))

    async def _aplan_state(self, query: str) -> _PlanState:
        key, state = self._cached(query)
        if state is not None:
            return state
        lists, search = self._searcher()
        try:
            plan, reason = await self._arun_planner(key[0], search), None
        except Exception as exc:  # any planner failure: fall back to the base ranking
            plan, reason = None, f"{type(exc).__name__}: {exc}"
        return self._remember(key, self._finish(plan, lists, search, reason))

    def plan_for(self, query: str) -> Plan | None:
        """The plan of `query` (planned now if not cached), or None when planning failed."""
        self._check_fitted()
        return self._plan_state(query).plan

    async def aplan_for(self, query: str) -> Plan | None:
        """Async `plan_for`: the planner's async path (`Planner.aplan`)."""
        self._check_fitted()
        return (await self._aplan_state(query)).plan

    def plan_fallback_reason(self, query: str) -> str | None:
        """Why `query` has no plan (the ranking falls back to the base), or None."""
        self._check_fitted()
        return self._plan_state(query).fallback_reason

    # ------------------------------------------------------------------------------ ranking
    def _active(self, state: _PlanState, history: Sequence[str]) -> tuple[list[int], list[int]]:
        """(indices of the queries still fused, indices of the sub-goals done)."""
        assert state.plan is not None
        done: set[int] = set()
        for name in dict.fromkeys(history):  # each call serves at most one sub-goal
            if not self.tools_.has(name):
                continue
            ranks = state.ranks[:, self.tools_.index(name)]
            for i in np.argsort(ranks, kind="stable"):
                if ranks[i] > self.done_k:
                    break
                if state.targets[i] not in done:
                    done.add(state.targets[i])
                    break
        active = [i for i, goal in enumerate(state.targets) if goal not in done]
        if not active:  # every sub-goal served: keep them all
            active = list(range(len(state.targets)))
        return active, sorted(done)

    def _lists(
        self, state: _PlanState, active: list[int], request: Ranking
    ) -> tuple[np.ndarray, np.ndarray, list[int | None]]:
        """The ranks to fuse, the lists' probability shapes, and each row's query (or None)."""
        labels: list[int | None] = list(active)
        ranks, shapes = state.ranks[active], state.shapes[active]
        if self.include_request:
            order = _tool_order(request, len(self.tools_))
            ranks = np.vstack([ranks, _ranks_of(order)[None, :]])
            shapes = np.vstack([shapes, _shape(request, order)[None, :]])
            labels.append(None)
        return ranks, shapes, labels

    def _note(self, state: _PlanState, label: int | None, rank: int) -> str:
        if label is None or state.plan is None:
            return f"toolqp: the request itself ranked it {rank} ({self.fusion} fusion)"
        plan = state.plan
        goal = state.targets[label]
        return (
            f"toolqp: sub-goal {goal + 1} {plan.sub_goals[goal]!r} via query "
            f"{plan.queries[label]!r} ranked it {rank} ({self.fusion} fusion)"
        )

    def _fallback(self, request: Ranking, reason: str) -> Scores:
        explanation = {
            "base": self._base_id(),
            "planner_fallback": f"{reason}; used the base retriever's single-shot ranking",
            "base_explanation": dict(request.explanation),
        }
        return Scores(
            np.asarray(request.probabilities, dtype=np.float64),
            explanation,
            request.fallback_reason,
            over_current=True,
            notes=dict(request.notes),
        )

    def _base_id(self) -> str:
        base = self.fitted_base()
        return base.retriever_id or type(base).__name__

    def _fused(self, state: _PlanState, history: tuple[str, ...], request: Ranking) -> Scores:
        if state.plan is None:
            return self._fallback(request, state.fallback_reason or "no plan")
        plan = state.plan
        active, done = self._active(state, history)
        matrix, shapes, labels = self._lists(state, active, request)
        order = fuse(matrix, self.fusion, rrf_k=self.rrf_k)
        probs = self._probabilities(matrix, shapes, request, order)
        notes = dict(request.notes)  # the base's notes (e.g. "added after fit") stay
        top = order[:EXPLAIN_K]
        best = np.argmin(matrix[:, top], axis=0)
        for j, tool in enumerate(top):
            row = int(best[j])
            name = self.tools_[int(tool)].name
            note = self._note(state, labels[row], int(matrix[row, tool]))
            notes[name] = f"{note}; base: {notes[name]}" if name in notes else note
        explanation = {
            "base": self._base_id(),
            "fusion": self.fusion,
            "planner": plan.source,
            "sub_goals": list(plan.sub_goals),
            "queries": list(plan.queries),
            "stopped": plan.stopped,
            "done_sub_goals": [plan.sub_goals[g] for g in done],
            "lists_fused": len(labels),
        }
        return Scores(probs, explanation, request.fallback_reason, over_current=True, notes=notes)

    def _probabilities(
        self, matrix: np.ndarray, shapes: np.ndarray, request: Ranking, order: np.ndarray
    ) -> np.ndarray:
        """Probabilities along the fused `order` (end-of-plan keeps the request's value).

        A tool whose best rank in any list is ``r`` gets the lists' mean rank-``r``
        probability, so the tools every sub-goal found first get comparable mass; the values
        are then laid along `order` from high to low.
        """
        n_tools = len(self.tools_)
        values = shapes.mean(axis=0)[matrix.min(axis=0)[order] - 1]
        if self.fusion != "peak":  # peak fusion orders by best rank: already non-increasing
            values = np.sort(values)[::-1]
        values = values / values.sum() * (1.0 - float(request.probabilities[n_tools]))
        values = values + _EPS * np.arange(n_tools, 0, -1)  # strictly decreasing: keeps order
        probs = np.empty(n_tools + 1, dtype=np.float64)
        probs[order] = values
        probs[n_tools] = request.probabilities[n_tools]
        out: np.ndarray = probs / probs.sum()
        return out

    def _prepare(
        self, query: str, history: Sequence[str] | str | None, ignore_unknown: bool
    ) -> tuple[tuple[str, ...], ToolRetriever]:
        self._check_fitted()
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        hist = self._validate_history(as_history(history), ignore_unknown)
        return hist, self.fitted_base()

    def _score(self, query: str, history: tuple[str, ...]) -> Scores:
        """The request's plan fused with its own base ranking (over the current catalogue)."""
        state = self._plan_state(query)
        request = self.fitted_base().rank(query, history, ignore_unknown=True)
        return self._fused(state, history, request)

    async def aprepare(self, query: str) -> None:
        """Plan the request through the planner's async path (cached for `rank`)."""
        self._check_fitted()
        await self._aplan_state(query)
        await super().aprepare(query)

    async def arank(
        self,
        query: str,
        history: Sequence[str] | str | None = (),
        *,
        ignore_unknown: bool = False,
    ) -> Ranking:
        """Async `rank`: the planner's async path (`Planner.aplan`) plans the request."""
        self._prepare(query, history, ignore_unknown)
        await self._aplan_state(query)  # cached: `rank` reuses it
        return self.rank(query, history, ignore_unknown=ignore_unknown)

    def explain_tool(
        self, query: str, name: str, history: Sequence[str] | str | None = ()
    ) -> dict[str, Any]:
        """Which list found `name` at its best rank: sub-goal, query and rank, for any tool.

        Returns:
            ``{"tool", "rank", "source"}`` plus ``"sub_goal"`` and ``"query"`` when a planner
            query found it (``source`` is "request", "query" or "fallback").
        """
        hist, base = self._prepare(query, history, True)
        if not self.tools_.has(name):
            raise ValueError(f"{name!r} is not in the tool catalogue")
        state = self._plan_state(query)
        request = base.rank(query, hist, ignore_unknown=True)
        tool = self.tools_.index(name)
        if state.plan is None:
            rank = int(_tool_ranks(request, len(self.tools_))[tool])
            return {"tool": name, "rank": rank, "source": "fallback"}
        active, _ = self._active(state, hist)
        matrix, _, labels = self._lists(state, active, request)
        row = int(np.argmin(matrix[:, tool]))
        label = labels[row]
        out: dict[str, Any] = {"tool": name, "rank": int(matrix[row, tool])}
        if label is None:
            return {**out, "source": "request"}
        goal = state.targets[label]
        return {
            **out,
            "source": "query",
            "sub_goal": state.plan.sub_goals[goal],
            "query": state.plan.queries[label],
        }

    # -------------------------------------------------------------------------- persistence
    def _set_parts(self, parts: Mapping[str, ToolRetriever]) -> None:
        """Restore the saved base; it must have been fitted on this model's catalogue.

        Raises:
            ModelLoadError: The base is missing, or was fitted on another catalogue (a
                ``base/`` folder copied from another model).
        """
        base = parts.get("base")
        if base is None:
            raise ModelLoadError("toolqp model folder: the base retriever (base/) is missing")
        mine: Toolset | None = getattr(self, "fit_tools_", None)
        theirs: Toolset | None = getattr(base, "fit_tools_", None)
        if mine is not None and theirs is not None and theirs.catalogue_hash != mine.catalogue_hash:
            raise ModelLoadError(
                f"toolqp model folder: base/ ({base.retriever_id or type(base).__name__}) was "
                f"fitted on another tool catalogue (hash {theirs.catalogue_hash}) than toolqp "
                f"(hash {mine.catalogue_hash}); it does not belong to this model"
            )
        super()._set_parts(parts)

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return {}, {}

    def _set_state(self, state: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """Nothing to restore: the base is its own saved part and the planner is passed again."""


__all__ = ["EXPLAIN_K", "PLANNER_TIMEOUT", "ToolQPRetriever"]
