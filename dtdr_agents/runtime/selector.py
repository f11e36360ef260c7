"""`StepSelector`: rank, select and bind the tools of each step; widen once when needed."""

from __future__ import annotations

import asyncio
import dataclasses
import warnings
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from dtdr_agents.foundation.errors import InvalidToolError, NotFittedError, UnknownToolError
from dtdr_agents.foundation.selection import SelectionPolicy, select, within_bounds
from dtdr_agents.foundation.types import END_OF_PLAN, Toolset
from dtdr_agents.runtime.binding import BINDERS, BindContext
from dtdr_agents.runtime.checks import (
    DEFAULT_RETRIEVER,
    CatalogueMismatchError,
    check_int,
    check_tool_list,
    fitted_tools,
    short_names,
    unwrap_retriever,
)
from dtdr_agents.runtime.guard import Reply, check_unbound, refusal, unbound_calls
from dtdr_agents.runtime.policy import DEFAULT_POLICY, BindingPolicy, with_binding
from dtdr_agents.runtime.prompting import (
    MaskMode,
    TokenCounter,
    binds_all_tools,
    build_tool_prompt,
    catalogue_schema_tokens,
    get_token_counter,
)
from dtdr_agents.runtime.steps import StepRecord
from dtdr_agents.store.publishing import Reloader, ReloadWarning

__all__ = ["StepSelector"]

R = TypeVar("R")


class StepSelector:
    """Chooses the tools to bind at each step of a tool-calling agent (framework-neutral).

    Args:
        tools: The agent's tool catalogue (anything `Toolset` accepts), in the order tools
            are bound. Names must be unique.
        retriever: A fitted core retriever (any id of `make_retriever`) or an adapter holding
            one. It must rank exactly this catalogue (same names). Or a `store.Reloader` of
            published versions: each step (never a wider re-selection inside one) starts
            with its current version; a version that ranks another catalogue is refused
            with a `ReloadWarning` and the running one keeps serving. Or None, with no
            demonstrations yet: `DEFAULT_RETRIEVER` fitted on the tools alone (it ranks from
            the request, its sub-goals and the calls so far over a tool graph derived from
            the catalogue).
        policy: The `SelectionPolicy`: selection, binding, widening and unbound calls
            (default `DEFAULT_POLICY`). Used as given.
        binding: Deprecated (warns): a `BindingPolicy` whose fields are set on `policy`.
        token_counter: Token counter for the prompt figures (default `get_token_counter()`).
        reserved: Slots of `SelectionPolicy.max_tools` taken by tools the stack binds
            besides the selection (the MCP proxy's two meta-tools): the selection and the
            bound list hold at most ``max_tools - reserved`` tools.

    Raises:
        InvalidToolError: Duplicate or unnamed tools.
        CatalogueMismatchError: The retriever ranks another catalogue.
        UnknownToolError: `policy.always_include` names a tool that is not in the catalogue.
        NotFittedError: The retriever is not fitted.
        ValueError: `binding` contradicts `policy`.
    """

    def __init__(
        self,
        tools: Sequence[Any] | Toolset,
        retriever: Any,
        *,
        policy: SelectionPolicy | None = None,
        binding: BindingPolicy | None = None,
        token_counter: TokenCounter | None = None,
        reserved: int = 0,
    ) -> None:
        self.policy = policy or DEFAULT_POLICY
        self.reserved = int(check_int("StepSelector.reserved", reserved, minimum=0) or 0)
        if binding is not None:
            warnings.warn(
                "StepSelector(binding=...) is deprecated: pass the binding fields in "
                "policy=SelectionPolicy(...)",
                DeprecationWarning,
                stacklevel=2,
            )
            self.policy = with_binding(self.policy, binding)
        self.mode: MaskMode = self.policy.mode
        try:
            self.toolset = tools if isinstance(tools, Toolset) else Toolset(check_tool_list(tools))
        except InvalidToolError as exc:
            raise InvalidToolError(f"invalid tool list: {exc}") from exc
        if retriever is None:  # no demonstrations yet: history-aware from the tools alone
            from dtdr_agents.retrievers import make_retriever

            retriever = make_retriever(DEFAULT_RETRIEVER).fit([], self.toolset)
        self.reloader: Reloader[Any] | None = retriever if isinstance(retriever, Reloader) else None
        self.retriever = unwrap_retriever(
            self.reloader.current() if self.reloader is not None else retriever
        )
        missing = [n for n in self.policy.always_include if not self.toolset.has(n)]
        if missing:
            raise UnknownToolError(
                f"always_include names tools that are not in the agent's tools: {missing}",
                tuple(missing),
            )
        k = self.policy.k
        widen_k = self.policy.widen_k  # never below k (`SelectionPolicy` checks it)
        if widen_k is None:
            widen_k = None if k is None else max(k, min(2 * k, len(self.toolset)))
        self.wide_policy = dataclasses.replace(
            self.policy, k=widen_k, threshold=None, coverage=None, include_zero=True
        )
        if (
            binds_all_tools(self.mode)
            and self.policy.max_tools is not None
            and len(self.toolset) > self.policy.max_tools - reserved
        ):
            raise ValueError(
                f"SelectionPolicy.max_tools is {self.policy.max_tools} but mode "
                f"{self.mode!r} binds every tool ({len(self.toolset)}"
                f"{f' and {reserved} of its own' if reserved else ''}): use a hard mode"
            )
        cap = self.policy.cache_cap
        self.cache_cap = cap if cap is not None else (len(self.toolset) if k is None else 3 * k)
        self.binder = BINDERS[self.policy.cache]
        self.counter = token_counter or get_token_counter()
        self.check_catalogue()
        self._schema_tokens: dict[str, int] | None = None

    @property
    def schema_tokens(self) -> dict[str, int]:
        """Token count of each tool's schema (computed once, with `counter`)."""
        if self._schema_tokens is None:
            self._schema_tokens = catalogue_schema_tokens(self.toolset, self.counter)
        return self._schema_tokens

    def _take_up_new_version(self) -> None:
        """At the start of a step: the reloader's current version, if it ranks our catalogue."""
        if self.reloader is None:
            return
        model = self.reloader.current()
        if model is self.retriever:
            return
        running = self.retriever
        try:
            self.retriever = unwrap_retriever(model)
            self.check_catalogue()
        except (CatalogueMismatchError, NotFittedError, TypeError) as exc:
            self.retriever = running
            name = self.reloader.version.name
            self.reloader.refuse(f"{type(exc).__name__}: {exc}")
            warnings.warn(
                f"{name} is not taken up ({exc}); the running version keeps serving",
                ReloadWarning,
                stacklevel=3,
            )

    # ------------------------------------------------------------------------------ checks
    def check_catalogue(self) -> None:
        """Refuse a retriever that ranks a different tool catalogue.

        Raises:
            CatalogueMismatchError: With the names missing on either side.
        """
        ranked = fitted_tools(self.retriever)
        ours = set(self.toolset.names)
        theirs = set(ranked.names)
        unknown = [n for n in self.toolset.names if n not in theirs]
        absent = [n for n in ranked.names if n not in ours]
        if not unknown and not absent:
            return
        parts = []
        if unknown:
            parts.append(
                f"{len(unknown)} of the agent's tools are not in the retriever's catalogue "
                f"{short_names(unknown)}"
            )
        if absent:
            parts.append(
                f"{len(absent)} of the retriever's tools are not among the agent's tools "
                f"{short_names(absent)}"
            )
        raise CatalogueMismatchError(
            f"the {type(self.retriever).__name__} retriever was fitted on another tool "
            f"catalogue: {'; '.join(parts)}. Fit it on these tools, or call "
            "retriever.set_tools(tools) to rank this catalogue (tools added after fit are "
            "ranked by a query-similarity prior)."
        )

    def check_history(self, history: Sequence[str]) -> tuple[str, ...]:
        """Validate history names against the catalogue (dropping unknown ones if allowed).

        Raises:
            UnknownToolError: A name is not one of the agent's tools and
                `ignore_unknown_history` is off.
        """
        hist = tuple(history)
        unknown = [h for h in hist if not self.toolset.has(h)]
        if not unknown:
            return hist
        if not self.policy.ignore_unknown_history:
            raise UnknownToolError(
                f"the tool-call history names tools that are not among the agent's tools: "
                f"{unknown} (history {list(hist)}). The conversation was produced with another "
                "tool set; pass ignore_unknown_history=True to drop those calls.",
                tuple(unknown),
            )
        return tuple(h for h in hist if self.toolset.has(h))

    # --------------------------------------------------------------------------- selection
    def _schema_tokens_for(self, policy: SelectionPolicy) -> dict[str, int] | None:
        """The schema token counts `select` needs for `policy` (None without a budget)."""
        return None if policy.max_schema_tokens is None else self.schema_tokens

    def select(
        self,
        query: str,
        history: Sequence[str] = (),
        *,
        previous: StepRecord | None = None,
        wide: bool = False,
    ) -> StepRecord:
        """Rank and select the tools for the next step.

        Args:
            query: The user's request.
            history: Names of the tools called so far in this turn, in order.
            previous: The previous step (e.g. read back from state); used by the binding
                strategy only if it belongs to the same turn (same query, and its history is
                a prefix of `history`).
            wide: Use the wider re-selection policy (`widen_k`, no threshold).
        """
        if not wide:
            self._take_up_new_version()
        hist = self.check_history(history)
        ranking = self.retriever.rank(query, hist)
        policy = self.wide_policy if wide else self.policy
        tokens = self._schema_tokens_for(policy)
        selection = select(ranking, policy, schema_tokens=tokens, reserved=self.reserved)
        key = ranking.explanation.get("key")
        shown_key = (
            tuple(str(x) for x in key) if isinstance(key, tuple | list) and len(key) > 0 else None
        )
        prompt = build_tool_prompt(
            self.mode,
            self.toolset,
            selection.names,
            dict(zip(selection.names, selection.probabilities, strict=True)),
            history=hist,
            key=shown_key,
            counter=self.counter,
            schema_tokens=self.schema_tokens,
        )
        if previous is not None and not (
            previous.query == query and hist[: len(previous.history)] == previous.history
        ):
            previous = None
        if binds_all_tools(self.mode):
            bound = prompt.bound
        else:
            ctx = BindContext(
                selected=prompt.bound,
                previous=previous,
                catalogue=self.toolset,
                retriever=self.retriever,
                query=query,
                history=hist,
                k=policy.k,
                cap=max(self.cache_cap, len(prompt.bound)),
            )
            bound = tuple(self.binder(ctx))
            unknown = [n for n in bound if not self.toolset.has(n)]
            if unknown:
                raise UnknownToolError(
                    f"the {self.policy.cache!r} binder bound unknown tools {unknown}",
                    tuple(unknown),
                )
            checked = within_bounds(
                bound,
                policy,
                schema_tokens=tokens,
                fallback=selection.fallback,
                reserved=self.reserved,
            )
            if checked != bound:  # a grown or recommended list over a bound of the policy
                bound = prompt.bound  # (fallback_k, max_tools, max_schema_tokens): restart
        return StepRecord(
            query=query,
            history=hist,
            selection=selection,
            prompt=prompt,
            bound=bound,
            explanation=dict(ranking.explanation),
            end_rank=ranking.rank_of(END_OF_PLAN),
            k=policy.k,
            cache=self.policy.cache,
            prefix_kept=None
            if previous is None
            else bound[: len(previous.bound)] == previous.bound,
            bound_tokens=sum(self.schema_tokens[n] for n in bound),
        )

    async def aselect(
        self,
        query: str,
        history: Sequence[str] = (),
        *,
        previous: StepRecord | None = None,
        wide: bool = False,
    ) -> StepRecord:
        """`select` in a worker thread (ranking encodes the query: CPU work).

        The retriever's async I/O for the request (a ToolQP plan) runs first, on the loop.
        """
        await self.retriever.aprepare(query)
        return await asyncio.to_thread(self.select, query, history, previous=previous, wide=wide)

    # ---------------------------------------------------------------------------- widening
    def widen_reason(self, step: StepRecord, reply: Reply | None) -> str | None:
        """Why the model's `reply` calls for the one wider re-selection, or None.

        Only in the hard modes, once per step, and not after an out-of-distribution fallback
        (every tool is bound then).
        """
        if reply is None or binds_all_tools(self.mode) or step.widened:
            return None
        if step.selection.fallback:
            return None
        unbound = self.unbound(step, reply)
        if unbound:
            if not self.policy.widen_on_unbound:
                return None
            return f"the model called tools that were not bound: {unbound}"
        n_selected = len(step.selection.names)
        if reply.answered and self.policy.widen_on_answer and not step.end_in_cut:
            return (
                "the model answered without a tool call while the retriever ranks end-of-plan "
                f"at {step.end_rank}, below the {n_selected} selected tools"
            )
        return None

    def widen(self, step: StepRecord, reason: str) -> StepRecord | None:
        """The re-selection with the wider policy, or None if it binds no new tool."""
        wider = self.select(step.query, step.history, previous=step, wide=True)
        if set(wider.bound) <= set(step.bound):
            return None
        return dataclasses.replace(wider, widened=True, widen_reason=reason)

    async def awiden(self, step: StepRecord, reason: str) -> StepRecord | None:
        """`widen` in a worker thread."""
        return await asyncio.to_thread(self.widen, step, reason)

    def run_step(
        self,
        step: StepRecord,
        call: Callable[[StepRecord], R],
        reply_of: Callable[[R], Reply | None],
    ) -> tuple[R, list[StepRecord]]:
        """Call the model with `step`'s tools, and once more wider if the reply asks for it.

        The one widen-and-retry helper of every integration.

        Args:
            step: The selected step.
            call: Calls the model with a step's tools bound; returns the model's result.
            reply_of: Reads the calls of a result (None: not a reply to inspect).

        Returns:
            The result kept (the wider call's, if made) and the steps used (one or two).
        """
        result = call(step)
        reason = self.widen_reason(step, reply_of(result))
        if reason is None:
            return result, [step]
        wider = self.widen(step, reason)
        if wider is None:
            return result, [step]
        return call(wider), [step, wider]

    async def arun_step(
        self,
        step: StepRecord,
        call: Callable[[StepRecord], Awaitable[R]],
        reply_of: Callable[[R], Reply | None],
    ) -> tuple[R, list[StepRecord]]:
        """Async `run_step`."""
        result = await call(step)
        reason = self.widen_reason(step, reply_of(result))
        if reason is None:
            return result, [step]
        wider = await self.awiden(step, reason)
        if wider is None:
            return result, [step]
        return await call(wider), [step, wider]

    # ------------------------------------------------------------------------------ unbound
    @staticmethod
    def unbound(step: StepRecord, reply: Reply) -> list[str]:
        """Names the reply calls that `step` did not bind (`guard.unbound_calls`)."""
        return unbound_calls(step.bound, reply)

    def check_unbound(self, step: StepRecord, reply: Reply | None, rejections: int) -> None:
        """`guard.check_unbound` with this selector's policy, for `step`'s final reply.

        Raises:
            UnboundToolCallError: ``on_unbound="raise"`` and an unbound call, or
                ``"reject"`` and `max_rejections` calls already rejected in the turn.
        """
        check_unbound(self.policy, step.bound, reply, rejections)

    def refusal(self, name: str, bound: Sequence[str] | None) -> str | None:
        """`guard.refusal` with this selector's ``on_unbound``: the error text, or None."""
        return refusal(self.policy.on_unbound, name, bound)

    def rejects(self, name: str, bound: Sequence[str]) -> bool:
        """Whether a call of `name` must be refused (``on_unbound="reject"`` and not bound)."""
        return self.refusal(name, bound) is not None
