"""The framework-neutral runtime shared by every agent integration.

Every adapter (LangGraph nodes, the LangChain middleware, the LlamaIndex agent, the MCP proxy)
does the same thing before a model call: rank the catalogue from the request and the calls made
so far, apply a `SelectionPolicy`, decide which tools to bind (`BindingPolicy`), call the model,
re-select once with a wider `k` when the reply shows the selection was too narrow, and handle
calls of tools that were not bound. This module holds all of it, with no framework import:

* `StepRecord`: the typed record of one step (what was bound and why); `to_record` /
  `from_record` convert it to and from the plain-JSON dict kept in graph state and traces.
* `StepSelector`: ranks, selects and binds; `run_step` / `arun_step` is the one
  widen-and-retry helper, `check_unbound` the one unbound-call policy.
* `BINDERS`: how the bound list follows from the selection. ``"off"`` binds the selection in
  catalogue order; ``"append"`` keeps the bound list of the turn growing in first-bound order,
  so each request's tools array starts with the previous one's (prompt caches keep their
  prefix). A new strategy is one `register_binder` call.
* `run_report`: per run, prefix reuse and bound-schema tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import itertools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

import numpy as np

from dtdr_agents.foundation.errors import (
    DTDRError,
    InvalidToolError,
    NotFittedError,
    UnknownToolError,
)
from dtdr_agents.foundation.selection import Selection, SelectionPolicy, select
from dtdr_agents.foundation.types import END_OF_PLAN, Ranking, Toolset
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.runtime.prompting import (
    MaskMode,
    TokenCounter,
    ToolPrompt,
    binds_all_tools,
    build_tool_prompt,
    catalogue_schema_tokens,
    check_mode,
    get_token_counter,
)

__all__ = [
    "BINDERS",
    "DEFAULT_POLICY",
    "DEFAULT_RETRIEVER",
    "UNSET",
    "AgentMode",
    "BindContext",
    "Binder",
    "BindingPolicy",
    "CatalogueMismatchError",
    "OnUnbound",
    "Reply",
    "RunReport",
    "StepRecord",
    "StepSelector",
    "UnboundToolCallError",
    "Unset",
    "check_int",
    "check_on_unbound",
    "check_tool_list",
    "fitted_tools",
    "merge_selection_records",
    "record_metadata",
    "register_binder",
    "rejection_text",
    "resolve_policies",
    "run_report",
    "unwrap_retriever",
]

DEFAULT_RETRIEVER = "hybrid"
"""The retriever id an integration fits when it is given demonstrations and no retriever
(`hybrid`: zero-shot relevance plus learned dependencies; works from zero demonstrations)."""

DEFAULT_POLICY = SelectionPolicy(k=5, threshold=0.0)
"""The agents' default selection: the 5 best tools the retriever gives any probability."""

OnUnbound = Literal["reject", "allow", "raise"]
AgentMode = MaskMode | Literal["set"]
"""A mask mode, or ``"set"``: bind the request's recommended tool set once per turn."""
"""What happens to a call of a tool that was not bound, after the one wider re-selection:
``"reject"`` answers it with an error (the model can correct itself), ``"allow"`` runs it,
``"raise"`` raises `UnboundToolCallError`."""

R = TypeVar("R")


class Unset(enum.Enum):
    """Type of `UNSET`."""

    UNSET = enum.auto()


UNSET = Unset.UNSET
"""Marks a shorthand keyword (such as `k`) that the caller did not pass."""


class CatalogueMismatchError(DTDRError, ValueError):
    """The retriever ranks a different tool catalogue than the agent binds."""


class UnboundToolCallError(DTDRError, RuntimeError):
    """The model called a tool that was not offered to it, even after widening the selection."""


def check_on_unbound(value: str) -> OnUnbound:
    """Validate an `on_unbound` option."""
    if value not in ("reject", "allow", "raise"):
        raise ValueError(f"on_unbound must be 'reject', 'allow' or 'raise', got {value!r}")
    return value  # type: ignore[return-value]


def check_int(name: str, value: Any, *, minimum: int, optional: bool = False) -> int | None:
    """Validate an integer option (not a bool, a float or a string) of at least `minimum`.

    Args:
        name: The option's name for the message (e.g. ``"BindingPolicy.widen_k"``).
        value: The value given.
        minimum: The smallest value allowed.
        optional: Whether None is allowed.

    Raises:
        ValueError: Naming the option.
    """
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(
            f"{name} must be an integer >= {minimum}{' or None' if optional else ''}, got {value!r}"
        )
    return int(value)


def check_tool_list(tools: Any, name: str = "tools") -> list[Any]:
    """`tools` as a list, refusing a lone tool, a string or a mapping given for the list.

    Raises:
        TypeError: Naming the argument.
    """
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Iterable):
        raise TypeError(f"{name} must be a list of tools, got {type(tools).__name__} {tools!r:.60}")
    try:
        return list(tools)
    except TypeError as exc:
        raise TypeError(f"{name} must be a list of tools, got {type(tools).__name__}") from exc


def fitted_tools(retriever: ToolRetriever) -> Toolset:
    """The catalogue `retriever` currently ranks; raises `NotFittedError` if it is not fitted."""
    tools = getattr(retriever, "tools_", None)
    if not isinstance(tools, Toolset):
        raise NotFittedError(
            f"{type(retriever).__name__} is not fitted: call fit(demos, tools) or load a saved "
            "model before giving it to an agent"
        )
    return tools


def unwrap_retriever(retriever: Any) -> ToolRetriever:
    """The fitted core retriever behind `retriever`.

    `retriever` is a core retriever or an adapter holding one in its ``retriever`` attribute,
    such as `langchain_dtdr.DTDRRetriever`.

    Raises:
        TypeError: If `retriever` is neither.
        NotFittedError: If it is not fitted.
    """
    inner = getattr(retriever, "retriever", None)
    if not isinstance(retriever, ToolRetriever) and isinstance(inner, ToolRetriever):
        retriever = inner
    if not isinstance(retriever, ToolRetriever):
        raise TypeError(
            "retriever must be a fitted dtdr_agents ToolRetriever (e.g. "
            "make_retriever('dtdr-c').fit(demos, tools)) or a langchain_dtdr.DTDRRetriever, "
            f"got {type(retriever).__name__}"
        )
    fitted_tools(retriever)
    return retriever


def _jsonable(value: Any) -> Any:
    """Plain-JSON form of explanation values (tuples, numpy scalars, nested mappings)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _end_in_cut(end_rank: int | None, n_selected: int) -> bool:
    """End-of-plan ranks within the selection (or first, when nothing was selected)."""
    return end_rank is not None and end_rank <= max(n_selected, 1)


# ---------------------------------------------------------------------------------- policy
@dataclass(frozen=True)
class BindingPolicy:
    """How the selected tools reach the model, and what happens when the model strays.

    Attributes:
        mode: ``"hard"`` (bind only the selected), ``"hard_weighted"`` (also give their
            probabilities), ``"soft"`` (bind all, name the preferred in the system message),
            ``"soft_weighted"`` (with probabilities). See `dtdr_agents.runtime.prompting`.
        cache: How the bound list follows from the selection (a key of `BINDERS`):
            ``"off"`` binds each step's selection in catalogue order; ``"append"`` only grows
            the turn's bound list, in first-bound order, so provider prompt caches keep their
            prefix.
        cache_cap: With ``"append"``, the most tools the bound list may hold; when a step
            would exceed it, the list restarts from that step's selection. Default ``3 * k``
            (the whole catalogue when `k` is None). The one exception: a step whose own
            selection is larger than the cap (a widened or out-of-distribution selection,
            at most `SelectionPolicy.fallback_k`) binds exactly that selection.
        widen_k: `k` of the one re-selection made when the model calls a tool that is not
            bound or answers while the retriever expects more calls (hard modes). Default
            ``2 * k`` (all tools when `k` is None).
        widen_on_unbound: Re-select with `widen_k` when the model calls an unbound tool.
        widen_on_answer: Re-select with `widen_k` when the model answers without a tool call
            although the retriever ranks end-of-plan below every selected tool.
        on_unbound: After the re-selection, a call of an unbound tool is ``"reject"``-ed with
            an error, ``"allow"``-ed, or ``"raise"``-s `UnboundToolCallError`.
        max_rejections: With ``"reject"``, raise once this many calls of unbound tools were
            rejected in a turn (bounds a model that keeps insisting).
        ignore_unknown_history: Drop history names that are not in the catalogue instead of
            raising `UnknownToolError`.
    """

    mode: MaskMode = "hard"
    cache: str = "off"
    cache_cap: int | None = None
    widen_k: int | None = None
    widen_on_unbound: bool = True
    widen_on_answer: bool = True
    on_unbound: OnUnbound = "reject"
    max_rejections: int = 3
    ignore_unknown_history: bool = False

    def __post_init__(self) -> None:
        check_mode(self.mode)
        check_on_unbound(self.on_unbound)
        if not isinstance(self.cache, str) or self.cache not in BINDERS:
            raise ValueError(
                f"BindingPolicy.cache must be one of {sorted(BINDERS)}, got {self.cache!r}"
            )
        check_int("BindingPolicy.cache_cap", self.cache_cap, minimum=1, optional=True)
        check_int("BindingPolicy.widen_k", self.widen_k, minimum=1, optional=True)
        check_int("BindingPolicy.max_rejections", self.max_rejections, minimum=0)
        for flag in ("widen_on_unbound", "widen_on_answer", "ignore_unknown_history"):
            if not isinstance(getattr(self, flag), bool | np.bool_):
                raise ValueError(
                    f"BindingPolicy.{flag} must be True or False, got {getattr(self, flag)!r}"
                )


# ---------------------------------------------------------------------------------- record
@dataclass(frozen=True)
class StepRecord:
    """The tools chosen for one model call, and why.

    Attributes:
        query: The request the retriever ranked for.
        history: The tool calls made so far in the turn (unknown names dropped if allowed).
        selection: The core selection (names best first, probabilities, fallback, why).
        prompt: What the policy chose: the selected tools (catalogue order) and the
            system-message text.
        bound: The tools actually bound, in the order they are sent (catalogue order, or
            first-bound order with ``cache="append"``).
        explanation: The ranking's explanation (method, cluster, Markov key, ...).
        end_rank: Rank of the end-of-plan token in the ranking (1 = the retriever expects the
            plan to be complete).
        k: The `k` of the policy used.
        widened: True for the one re-selection with a wider `k`.
        widen_reason: Why the selection was widened.
        cache: The binding strategy (`BindingPolicy.cache`).
        prefix_kept: Whether `bound` starts with the previous step's bound list of the turn
            (None at the first step of a turn).
        bound_tokens: Tokens of the bound tools' schemas.
    """

    query: str
    history: tuple[str, ...]
    selection: Selection
    prompt: ToolPrompt
    bound: tuple[str, ...]
    explanation: Mapping[str, Any]
    end_rank: int | None
    k: int | None
    widened: bool = False
    widen_reason: str | None = None
    cache: str = "off"
    prefix_kept: bool | None = None
    bound_tokens: int = 0

    @property
    def system_text(self) -> str:
        """Text to add to the system message ("" for the plain hard mask)."""
        return self.prompt.text

    @property
    def end_in_cut(self) -> bool:
        """Whether the retriever ranks end-of-plan among the selected tools' ranks."""
        return _end_in_cut(self.end_rank, len(self.selection.names))

    @property
    def saved_tokens(self) -> int:
        """Prompt tokens saved against binding every tool with no guidance text."""
        return self.prompt.all_tool_tokens - self.bound_tokens - self.prompt.text_tokens

    def to_record(self) -> dict[str, Any]:
        """A JSON-serializable description of the step (kept in graph state and traces)."""
        sel = self.selection
        return {
            "step": len(self.history),
            "query": self.query,
            "history": list(self.history),
            "mode": self.prompt.mode,
            "k": self.k,
            "selected": list(sel.names),
            "bound": list(self.bound),
            "probabilities": {
                n: float(p) for n, p in zip(sel.names, sel.probabilities, strict=True)
            },
            "why": dict(sel.why),
            "fallback": sel.fallback,
            "fallback_reason": sel.reason,
            "end_probability": float(sel.end_probability),
            "end_rank": self.end_rank,
            "explanation": _jsonable(self.explanation),
            "system_text": self.prompt.text,
            "tokens": {
                "guidance": self.prompt.text_tokens,
                "bound_tools": self.bound_tokens,
                "all_tools": self.prompt.all_tool_tokens,
                "saved": self.saved_tokens,
                "counter": self.prompt.counter,
            },
            "widened": self.widened,
            "widen_reason": self.widen_reason,
            "cache": {"mode": self.cache, "prefix_kept": self.prefix_kept},
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> StepRecord:
        """Rebuild a step from `to_record`'s dict (e.g. read back from graph state).

        Raises:
            ValueError: A required key is missing or malformed (names the key).
        """
        try:
            names = tuple(str(n) for n in record["selected"])
            probs_map = {str(n): float(p) for n, p in dict(record["probabilities"]).items()}
            tokens = dict(record.get("tokens") or {})
            cache = dict(record.get("cache") or {})
            selection = Selection(
                names=names,
                probabilities=tuple(probs_map.get(n, 0.0) for n in names),
                fallback=bool(record.get("fallback")),
                reason=record.get("fallback_reason"),
                end_probability=float(record.get("end_probability") or 0.0),
                why={str(k): str(v) for k, v in dict(record.get("why") or {}).items()},
            )
            bound = tuple(str(n) for n in record["bound"])
            prompt = ToolPrompt(
                mode=check_mode(str(record["mode"])),
                bound=bound,
                preferred=names,
                probabilities=probs_map,
                text=str(record.get("system_text") or ""),
                text_tokens=int(tokens.get("guidance") or 0),
                tool_tokens=int(tokens.get("bound_tools") or 0),
                all_tool_tokens=int(tokens.get("all_tools") or 0),
                counter=str(tokens.get("counter") or ""),
            )
            end_rank = record.get("end_rank")
            k = record.get("k")
            return cls(
                query=str(record["query"]),
                history=tuple(str(h) for h in record["history"]),
                selection=selection,
                prompt=prompt,
                bound=bound,
                explanation=dict(record.get("explanation") or {}),
                end_rank=None if end_rank is None else int(end_rank),
                k=None if k is None else int(k),
                widened=bool(record.get("widened")),
                widen_reason=record.get("widen_reason"),
                cache=str(cache.get("mode") or "off"),
                prefix_kept=cache.get("prefix_kept"),
                bound_tokens=int(tokens.get("bound_tools") or 0),
            )
        except KeyError as exc:
            raise ValueError(f"a step record lacks the key {exc.args[0]!r}") from exc
        except (TypeError, ValueError) as exc:
            raise ValueError(f"malformed step record: {exc}") from exc

    def metadata(self) -> dict[str, Any]:
        """Run metadata (``dtdr_*`` keys) for the model call's trace."""
        return record_metadata(self.to_record())


def record_metadata(record: Mapping[str, Any]) -> dict[str, Any]:
    """Run metadata (``dtdr_*`` keys) from a selection record, for the model call's trace."""
    probs = record.get("probabilities") or {}
    tokens = record.get("tokens") or {}
    return {
        "dtdr_step": record.get("step"),
        "dtdr_mode": record.get("mode"),
        "dtdr_bound_tools": list(record.get("bound") or []),
        "dtdr_selected": list(record.get("selected") or []),
        "dtdr_probabilities": {n: round(float(p), 4) for n, p in probs.items()},
        "dtdr_why": dict(record.get("why") or {}),
        "dtdr_fallback": bool(record.get("fallback")),
        "dtdr_fallback_reason": record.get("fallback_reason"),
        "dtdr_explanation": record.get("explanation") or {},
        "dtdr_widened": bool(record.get("widened")),
        "dtdr_tokens_saved": tokens.get("saved"),
        "dtdr_token_counter": tokens.get("counter"),
    }


def merge_selection_records(
    left: list[dict[str, Any]] | None, right: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """State reducer of ``tool_selections``: append, and restart at the first step of a turn.

    A record with an empty history that is not a widened re-selection starts a new turn, so
    the key holds the current turn's records and does not grow with a long thread (earlier
    turns stay in checkpoints and traces).
    """
    out = list(left or [])
    for record in right or []:
        if not record.get("history") and not record.get("widened"):
            out = []
        out.append(record)
    return out


# --------------------------------------------------------------------------------- binders
@dataclass(frozen=True)
class BindContext:
    """What a `Binder` sees to decide the bound list of a step.

    Attributes:
        selected: The policy's selection, in catalogue order (all tools in the soft modes).
        previous: The previous step of the same turn, or None at its first step.
        catalogue: The agent's tools.
        retriever: The fitted retriever (e.g. for a strategy that asks it for a tool set).
        query: The request.
        history: The calls made so far.
        k: The `k` of the policy used.
        cap: `BindingPolicy.cache_cap` resolved (never None).
    """

    selected: tuple[str, ...]
    previous: StepRecord | None
    catalogue: Toolset
    retriever: ToolRetriever
    query: str
    history: tuple[str, ...]
    k: int | None
    cap: int


class Binder(Protocol):
    """A binding strategy: the tools to bind at a step, in the order they are sent."""

    def __call__(self, ctx: BindContext) -> tuple[str, ...]:
        """The bound names for the step described by `ctx`."""
        ...


def _bind_selection(ctx: BindContext) -> tuple[str, ...]:
    """``cache="off"``: the step's selection, in catalogue order."""
    return ctx.selected


def _bind_append(ctx: BindContext) -> tuple[str, ...]:
    """``cache="append"``: the turn's bound list, grown in first-bound order, capped."""
    if ctx.previous is None:
        return ctx.selected
    bound = list(ctx.previous.bound)
    seen = set(bound)
    new = [n for n in ctx.selected if n not in seen]
    if len(bound) + len(new) > ctx.cap:
        return ctx.selected  # restart from this step's selection (one cache miss)
    return (*bound, *new)


def _bind_set(ctx: BindContext) -> tuple[str, ...]:
    """``cache="set"`` (``mode="set"``): the request's recommended tool set, bound once.

    The set is `ToolRetriever.recommend` (a learned size or PTR's stages) and stays bound for
    the whole turn. It is recommended again (with the calls so far, which stay in it) when the
    model called a tool outside it (a widening re-selection, or an allowed unbound call), or
    when the next-step ranking has moved on: none of the step's selected tools is in the set.
    An out-of-distribution request binds the step's bounded fallback selection.
    """
    prev = ctx.previous
    if prev is not None:
        bound = set(prev.bound)
        widening = ctx.history == prev.history  # the model strayed at this very step
        outside = any(h not in bound for h in ctx.history)
        moved_on = bool(ctx.selected) and not bound & set(ctx.selected)
        if not (widening or outside or moved_on):
            return prev.bound
    rec = ctx.retriever.recommend(ctx.query, ctx.history, ignore_unknown=True)
    if rec.fallback:
        return ctx.selected
    names = [n for n in rec.names if ctx.catalogue.has(n)]
    if prev is not None and ctx.history == prev.history:  # widening: keep the wider selection
        names += [n for n in (*prev.bound, *ctx.selected) if n not in names]
    return tuple(names)


BINDERS: dict[str, Binder] = {"off": _bind_selection, "append": _bind_append, "set": _bind_set}
"""Binding strategies by name (the values of `BindingPolicy.cache`)."""


def register_binder(name: str, binder: Binder) -> None:
    """Add a binding strategy usable as ``BindingPolicy(cache=name)``.

    Raises:
        ValueError: `name` is already registered.
    """
    if name in BINDERS:
        raise ValueError(f"a binder named {name!r} is already registered")
    BINDERS[name] = binder


def resolve_policies(
    policy: SelectionPolicy | None = None,
    binding: BindingPolicy | None = None,
    *,
    k: int | Unset | None = UNSET,
    mode: AgentMode | None = None,
    cache: str | None = None,
) -> tuple[SelectionPolicy, BindingPolicy]:
    """The policies of an agent from its `policy` / `binding` objects and shorthand keywords.

    `k` sets ``policy.k``; `mode` and `cache` set the same fields of `binding`. A shorthand
    that contradicts the object given alongside it is an error. ``mode="set"`` is the hard
    mode with ``cache="set"``: the request's recommended tool set is bound once per turn.

    Raises:
        ValueError: A contradiction, or an invalid value.
    """
    if policy is not None and not isinstance(policy, SelectionPolicy):
        raise TypeError(f"policy must be a SelectionPolicy, got {type(policy).__name__}")
    if binding is not None and not isinstance(binding, BindingPolicy):
        raise TypeError(f"binding must be a BindingPolicy, got {type(binding).__name__}")
    sel = policy or DEFAULT_POLICY
    if not isinstance(k, Unset):
        if policy is not None and policy.k != k:
            raise ValueError(f"k={k} contradicts policy.k={policy.k}: pass one of them")
        sel = dataclasses.replace(sel, k=k)
    bind = binding or BindingPolicy()
    if mode == "set":
        if cache not in (None, "set"):
            raise ValueError(
                f"mode='set' binds the recommended set; it contradicts cache={cache!r}"
            )
        mode, cache = "hard", "set"
    if mode is not None:
        if binding is not None and binding.mode != mode:
            raise ValueError(f"mode={mode!r} contradicts binding.mode={binding.mode!r}")
        bind = dataclasses.replace(bind, mode=mode)
    if cache is not None:
        if binding is not None and binding.cache != cache:
            raise ValueError(f"cache={cache!r} contradicts binding.cache={binding.cache!r}")
        bind = dataclasses.replace(bind, cache=cache)
    return sel, bind


# -------------------------------------------------------------------------------- selector
@dataclass(frozen=True)
class Reply:
    """What the runtime needs to know of a model reply.

    Attributes:
        calls: Names of the tools the reply calls (valid calls only).
        answered: True when the reply calls no tool at all (not even a malformed call).
    """

    calls: tuple[str, ...] = ()
    answered: bool = False


class StepSelector:
    """Chooses the tools to bind at each step of a tool-calling agent (framework-neutral).

    Args:
        tools: The agent's tool catalogue (anything `Toolset` accepts), in the order tools
            are bound. Names must be unique.
        retriever: A fitted core retriever (any id of `make_retriever`) or an adapter holding
            one. It must rank exactly this catalogue (same names).
        policy: The `SelectionPolicy` (default `DEFAULT_POLICY`).
        binding: The `BindingPolicy` (default `BindingPolicy()`).
        token_counter: Token counter for the prompt figures (default `get_token_counter()`).

    Raises:
        InvalidToolError: Duplicate or unnamed tools.
        CatalogueMismatchError: The retriever ranks another catalogue.
        UnknownToolError: `policy.always_include` names a tool that is not in the catalogue.
        NotFittedError: The retriever is not fitted.
        ValueError: `binding.widen_k` is smaller than `policy.k`.
    """

    def __init__(
        self,
        tools: Sequence[Any] | Toolset,
        retriever: Any,
        *,
        policy: SelectionPolicy | None = None,
        binding: BindingPolicy | None = None,
        token_counter: TokenCounter | None = None,
    ) -> None:
        self.policy = policy or DEFAULT_POLICY
        self.binding = binding or BindingPolicy()
        self.mode: MaskMode = self.binding.mode
        self.retriever = unwrap_retriever(retriever)
        try:
            self.toolset = tools if isinstance(tools, Toolset) else Toolset(check_tool_list(tools))
        except InvalidToolError as exc:
            raise InvalidToolError(f"invalid tool list: {exc}") from exc
        missing = [n for n in self.policy.always_include if not self.toolset.has(n)]
        if missing:
            raise UnknownToolError(
                f"always_include names tools that are not in the agent's tools: {missing}",
                tuple(missing),
            )
        k = self.policy.k
        widen_k = self.binding.widen_k
        if widen_k is None:
            widen_k = None if k is None else max(k, min(2 * k, len(self.toolset)))
        elif k is not None and widen_k < k:
            raise ValueError(f"widen_k ({widen_k}) must be >= k ({k})")
        self.wide_policy = dataclasses.replace(
            self.policy, k=widen_k, threshold=None, coverage=None, include_zero=True
        )
        cap = self.binding.cache_cap
        self.cache_cap = cap if cap is not None else (len(self.toolset) if k is None else 3 * k)
        self.binder = BINDERS[self.binding.cache]
        self.counter = token_counter or get_token_counter()
        self.check_catalogue()
        self._schema_tokens: dict[str, int] | None = None

    @property
    def schema_tokens(self) -> dict[str, int]:
        """Token count of each tool's schema (computed once, with `counter`)."""
        if self._schema_tokens is None:
            self._schema_tokens = catalogue_schema_tokens(self.toolset, self.counter)
        return self._schema_tokens

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
                f"{_short(unknown)}"
            )
        if absent:
            parts.append(
                f"{len(absent)} of the retriever's tools are not among the agent's tools "
                f"{_short(absent)}"
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
        if not self.binding.ignore_unknown_history:
            raise UnknownToolError(
                f"the tool-call history names tools that are not among the agent's tools: "
                f"{unknown} (history {list(hist)}). The conversation was produced with another "
                "tool set; pass ignore_unknown_history=True to drop those calls.",
                tuple(unknown),
            )
        return tuple(h for h in hist if self.toolset.has(h))

    # --------------------------------------------------------------------------- selection
    def _selection(self, ranking: Ranking, policy: SelectionPolicy) -> Selection:
        selection = select(ranking, policy)
        if not policy.always_include:
            return selection
        ranked = set(select(ranking, dataclasses.replace(policy, always_include=())).names)
        why = dict(selection.why)
        for name in policy.always_include:
            if name not in ranked:
                why[name] = f"always_include ({ranking.why(name)})"
        return dataclasses.replace(selection, why=why)

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
        hist = self.check_history(history)
        ranking = self.retriever.rank(query, hist)
        policy = self.wide_policy if wide else self.policy
        selection = self._selection(ranking, policy)
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
                    f"the {self.binding.cache!r} binder bound unknown tools {unknown}",
                    tuple(unknown),
                )
        return StepRecord(
            query=query,
            history=hist,
            selection=selection,
            prompt=prompt,
            bound=bound,
            explanation=dict(ranking.explanation),
            end_rank=ranking.rank_of(END_OF_PLAN),
            k=policy.k,
            cache=self.binding.cache,
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
            if not self.binding.widen_on_unbound:
                return None
            return f"the model called tools that were not bound: {unbound}"
        n_selected = len(step.selection.names)
        if reply.answered and self.binding.widen_on_answer and not step.end_in_cut:
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
        """Names the reply calls that `step` did not bind."""
        allowed = set(step.bound)
        return [n for n in reply.calls if n not in allowed]

    def check_unbound(self, step: StepRecord, reply: Reply | None, rejections: int) -> None:
        """The unbound-call policy, applied to the model's final reply of a step.

        With ``on_unbound="raise"`` any call of an unbound tool raises; with ``"reject"`` the
        run stops once `rejections` (calls already rejected in the turn) reached
        `max_rejections` (the loop would otherwise run to the framework's recursion limit);
        ``"allow"`` never raises.

        Raises:
            UnboundToolCallError: As described.
        """
        unbound = self.unbound(step, reply) if reply is not None else []
        if not unbound:
            return
        on_unbound = self.binding.on_unbound
        if on_unbound == "raise":
            raise UnboundToolCallError(
                f"the model called tools that were not bound at this step: {unbound} "
                f"(bound: {list(step.bound)})"
            )
        if on_unbound == "reject" and rejections >= self.binding.max_rejections:
            raise UnboundToolCallError(
                f"the model called tools that are not available at this step ({unbound}) "
                f"after {rejections} such calls were rejected in this turn; bound: "
                f"{list(step.bound)}. Raise k, set always_include, or use on_unbound='allow'."
            )

    def rejects(self, name: str, bound: Sequence[str]) -> bool:
        """Whether a call of `name` must be refused (``on_unbound="reject"`` and not bound)."""
        return self.binding.on_unbound == "reject" and name not in bound


def rejection_text(name: str, bound: Sequence[str]) -> str:
    """The error text answering a call of a tool that was not bound at this step."""
    return (
        f"Error: the tool {name!r} is not available at this step. "
        f"Call one of {list(bound)}, or answer if none fits."
    )


def _short(names: Sequence[str], limit: int = 8) -> str:
    shown = list(names[:limit])
    return f"{shown}{' ...' if len(names) > limit else ''}"


# ---------------------------------------------------------------------------------- report
@dataclass(frozen=True)
class RunReport:
    """Prompt figures of one run (the model calls of one turn).

    Attributes:
        model_calls: Number of model calls (steps, widened re-selections included).
        prefix_reuse: Share of the calls after the first whose tools array starts with the
            previous call's (None with fewer than two calls).
        bound_tokens: Bound-schema tokens summed over the calls.
        mean_bound_tools: Mean number of tools bound per call.
        per_call_tokens: Bound-schema tokens of each call.
    """

    model_calls: int
    prefix_reuse: float | None
    bound_tokens: int
    mean_bound_tools: float
    per_call_tokens: tuple[int, ...] = field(default_factory=tuple)


def run_report(steps: Sequence[StepRecord | Mapping[str, Any]]) -> RunReport:
    """Prefix reuse and bound-schema tokens of a run's steps (records or their dicts).

    Args:
        steps: The steps of one turn, in call order (e.g. ``state["tool_selections"]``).
    """
    typed = [s if isinstance(s, StepRecord) else StepRecord.from_record(s) for s in steps]
    bounds = [s.bound for s in typed]
    pairs = list(itertools.pairwise(bounds))
    kept = sum(cur[: len(prev)] == prev for prev, cur in pairs)
    return RunReport(
        model_calls=len(typed),
        prefix_reuse=kept / len(pairs) if pairs else None,
        bound_tokens=sum(s.bound_tokens for s in typed),
        mean_bound_tools=float(np.mean([len(b) for b in bounds])) if bounds else 0.0,
        per_call_tokens=tuple(s.bound_tokens for s in typed),
    )
