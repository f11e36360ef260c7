"""The one carrier of an agent step's settings (`SelectionPolicy`), and `select`.

`select` turns a ranking into the tools to bind: top-k, threshold, coverage, fallback, caps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np

from dtdr_agents.foundation.checks import check_number
from dtdr_agents.foundation.errors import UnknownToolError
from dtdr_agents.foundation.types import END_OF_PLAN, Ranking

BindMode = Literal["hard", "hard_weighted", "soft", "soft_weighted"]
"""How the selected tools reach the model (`dtdr_agents.runtime.prompting.MaskMode`)."""

BIND_MODES: tuple[BindMode, ...] = get_args(BindMode)

OnUnbound = Literal["reject", "allow", "raise"]
"""What happens to a call of a tool that was not bound, after the one wider re-selection:
``"reject"`` answers it with an error (the model can correct itself), ``"allow"`` runs it,
``"raise"`` raises `dtdr_agents.runtime.UnboundToolCallError`."""

ON_UNBOUND: tuple[OnUnbound, ...] = get_args(OnUnbound)

CACHE_MODES: set[str] = {"off", "append", "set"}
"""Names of the binding strategies (`dtdr_agents.runtime.BINDERS`); `register_binder` adds to
it, so `SelectionPolicy.cache` is checked when the policy is built."""

_FLAGS = (
    "include_end",
    "respect_fallback",
    "include_zero",
    "widen_on_unbound",
    "widen_on_answer",
    "ignore_unknown_history",
)


@dataclass(frozen=True)
class SelectionPolicy:
    """Every selection setting of an agent step, in one frozen object checked when built.

    Which ranked tools to keep (criteria combine: the strictest one wins), how they are bound,
    the one wider re-selection, and what happens to calls of unbound tools. `select` reads the
    selection fields; `dtdr_agents.runtime.StepSelector` reads all of them. `SelectionPolicy()`
    is the one default. An invalid value (NaN, a negative count, a probability outside
    [0, 1], a wrong type, an unknown mode) raises a `ValueError` naming the field.

    `min_k` never adds zero-probability tools (the retriever saw no evidence for them); set
    `include_zero=False` to drop them from `k` as well.

    Attributes:
        k: Keep at most the `k` best tools.
        threshold: Keep tools whose probability is above this (the DTDR paper's alpha). The
            default 0.0 keeps only tools the retriever gives some probability, so an agent
            binds nothing the retriever saw no evidence for; None lets `k` keep
            zero-probability tools as well (`TOP_K`).
        coverage: Keep the smallest prefix whose cumulative probability reaches this.
        min_k: Keep at least this many tools among those with a non-zero probability (so a
            selection can be empty when no tool has any, e.g. when the retriever is certain
            the plan is complete).
        always_include: Names added to every selection (not counted against `k`).
        include_end: Keep the end-of-plan token if it ranks inside the cut (it is never bound
            to a model; callers may use it as a hint that the plan is complete).
        respect_fallback: When the ranking says the query is out of distribution, keep the
            ranking's top `fallback_k` tools instead of applying `k`, `threshold` and
            `coverage` (the retriever's evidence is not to be trusted there).
        fallback_k: How many tools an out-of-distribution selection keeps (the ranking's
            best, which falls back to zero-shot relevance); None keeps every tool.
        max_tools: A hard cap on the selection's size, `always_include` included (for
            example a provider's limit on the tools of one request); None: no cap.
        include_zero: Let `k` (and `coverage`) keep zero-probability tools, in catalogue
            order after the others, e.g. to return exactly `k` documents; False keeps only
            tools with some probability.
        mode: ``"hard"`` (bind only the selected), ``"hard_weighted"`` (also give their
            probabilities), ``"soft"`` (bind all, name the preferred in the system message),
            ``"soft_weighted"`` (with probabilities). See `dtdr_agents.runtime.prompting`.
        cache: How the bound list follows from the selection (a name of `CACHE_MODES`):
            ``"off"`` binds each step's selection in catalogue order; ``"append"`` only grows
            the turn's bound list, in first-bound order, so provider prompt caches keep their
            prefix; ``"set"`` binds the request's recommended tool set once per turn.
        cache_cap: With ``"append"``, the most tools the bound list may hold; when a step
            would exceed it, the list restarts from that step's selection. Default ``3 * k``
            (the whole catalogue when `k` is None). The one exception: a step whose own
            selection is larger than the cap (a widened or out-of-distribution selection,
            at most `fallback_k`) binds exactly that selection.
        widen_k: `k` of the one re-selection made when the model calls a tool that is not
            bound or answers while the retriever expects more calls (hard modes). Default
            ``2 * k`` (all tools when `k` is None). Never below `k`.
        widen_on_unbound: Re-select with `widen_k` when the model calls an unbound tool.
        widen_on_answer: Re-select with `widen_k` when the model answers without a tool call
            although the retriever ranks end-of-plan below every selected tool.
        on_unbound: After the re-selection, a call of an unbound tool is ``"reject"``-ed with
            an error, ``"allow"``-ed, or ``"raise"``-s `UnboundToolCallError`.
        max_rejections: With ``"reject"``, raise once this many calls of unbound tools were
            rejected in a turn (bounds a model that keeps insisting).
        ignore_unknown_history: Drop history names that are not in the catalogue instead of
            raising `UnknownToolError`.
        max_schema_tokens: A budget on the bound tools' schemas (name, description and
            parameters as the model sees them), in tokens of the runtime's counter
            (`dtdr_agents.runtime.prompting.get_token_counter`: tiktoken when its encoding is
            available). The runtime binds the longest best-first prefix of the selection
            that fits, `always_include` tools first (they are always bound and count against
            the budget); at least one tool is bound even when the best one alone is over
            budget (as `min_k` keeps one). The end-of-plan token is never bound and never
            counts. A cache-stable bound list over budget restarts from the step's
            selection. Hard modes only (the soft modes bind every tool); None: no budget.
    """

    k: int | None = 5
    threshold: float | None = 0.0
    coverage: float | None = None
    min_k: int = 1
    always_include: tuple[str, ...] = ()
    include_end: bool = False
    respect_fallback: bool = True
    include_zero: bool = True
    fallback_k: int | None = 32
    max_tools: int | None = None
    mode: BindMode = "hard"
    cache: str = "off"
    cache_cap: int | None = None
    widen_k: int | None = None
    widen_on_unbound: bool = True
    widen_on_answer: bool = True
    on_unbound: OnUnbound = "reject"
    max_rejections: int = 3
    ignore_unknown_history: bool = False
    max_schema_tokens: int | None = None

    def __post_init__(self) -> None:
        check_number(self.k, "SelectionPolicy.k", low=1, integer=True, optional=True)
        check_number(self.min_k, "SelectionPolicy.min_k", low=0, integer=True)
        check_number(
            self.threshold,
            "SelectionPolicy.threshold",
            low=0,
            high=1,
            high_open=True,
            optional=True,
        )
        check_number(
            self.coverage, "SelectionPolicy.coverage", low=0, high=1, low_open=True, optional=True
        )
        for name in ("fallback_k", "max_tools", "cache_cap", "widen_k", "max_schema_tokens"):
            check_number(
                getattr(self, name), f"SelectionPolicy.{name}", low=1, integer=True, optional=True
            )
        check_number(self.max_rejections, "SelectionPolicy.max_rejections", low=0, integer=True)
        for flag in _FLAGS:
            if not isinstance(getattr(self, flag), bool | np.bool_):
                raise ValueError(
                    f"SelectionPolicy.{flag} must be True or False, got {getattr(self, flag)!r}"
                )
        _check_choice("mode", self.mode, BIND_MODES, "the unknown mask mode ")
        _check_choice("on_unbound", self.on_unbound, ON_UNBOUND)
        if not isinstance(self.cache, str) or self.cache not in CACHE_MODES:
            raise ValueError(
                f"SelectionPolicy.cache must be one of {sorted(CACHE_MODES)}, got {self.cache!r}"
            )
        if self.max_schema_tokens is not None and self.mode.startswith("soft"):
            raise ValueError(
                f"SelectionPolicy.max_schema_tokens cannot bound the {self.mode!r} mode, which "
                "binds every tool; use a hard mode or leave it None"
            )
        if self.widen_k is not None and self.k is not None and self.widen_k < self.k:
            raise ValueError(
                f"SelectionPolicy.widen_k ({self.widen_k}) must be >= k ({self.k}): the wider "
                "re-selection never keeps fewer tools"
            )
        given: Any = self.always_include
        single = isinstance(given, str | bytes) or not isinstance(given, Iterable)
        names = (given,) if single else tuple(given)
        if single or not all(isinstance(n, str) for n in names):
            raise ValueError(
                "SelectionPolicy.always_include must be a list of tool names, got "
                f"{self.always_include!r:.80}"
            )
        object.__setattr__(self, "always_include", names)


def _check_choice(name: str, value: Any, choices: tuple[str, ...], what: str = "") -> None:
    """Refuse `value` unless it is one of `choices`, naming the field."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(
            f"SelectionPolicy.{name} must be one of {list(choices)}, got {what}{value!r}"
        )


@dataclass(frozen=True)
class Selection:
    """The tools chosen for one step.

    Attributes:
        names: Selected tool names, best first (then `always_include` extras).
        probabilities: The ranking's probability of each selected name.
        fallback: True when the query looked out of distribution, so the ranking's top
            `SelectionPolicy.fallback_k` tools were returned; `reason` says why.
        reason: Why the fallback fired, or None.
        end_probability: The ranking's probability that the plan is complete.
    """

    names: tuple[str, ...]
    probabilities: tuple[float, ...]
    fallback: bool = False
    reason: str | None = None
    end_probability: float = 0.0
    why: dict[str, str] = field(default_factory=dict)


def _cut(probs: np.ndarray, policy: SelectionPolicy) -> int:
    """How many of the sorted probabilities `probs` the policy keeps."""
    positive = int(np.count_nonzero(probs > 0))  # sorted descending: these come first
    n = len(probs) if policy.include_zero else positive
    keep = n
    if policy.k is not None:
        keep = min(keep, policy.k)
    if policy.threshold is not None:
        keep = min(keep, int(np.count_nonzero(probs > policy.threshold)))
    if policy.coverage is not None:
        total = probs.sum()
        cum = np.cumsum(probs) / total if total > 0 else np.ones(n)
        keep = min(keep, int(np.searchsorted(cum, policy.coverage - 1e-12) + 1))
    return max(keep, min(policy.min_k, positive))


PROVIDER_MAX_TOOLS: dict[str, int] = {
    "openai": 128,  # Chat Completions / Responses `tools`: "A max of 128 functions are supported"
    "vertexai": 64,  # Vertex AI / Firebase `functionDeclarations`: "Maximum 64 ... can be provided"
}
"""Published limits on the tools of one request, for `SelectionPolicy.max_tools`
(`for_provider`). Providers that publish no limit are not listed."""


def for_provider(provider: str, **fields: Any) -> SelectionPolicy:
    """`SelectionPolicy(**fields)` capped at `provider`'s published tool limit.

    Raises:
        ValueError: `provider` has no preset, or `max_tools` in `fields` is above the limit.
    """
    limit = PROVIDER_MAX_TOOLS.get(provider)
    if limit is None:
        raise ValueError(
            f"no max_tools preset for provider {provider!r}; presets: {sorted(PROVIDER_MAX_TOOLS)}"
        )
    cap = fields.pop("max_tools", None)
    if cap is not None and cap > limit:
        raise ValueError(f"SelectionPolicy.max_tools={cap} is above {provider}'s limit of {limit}")
    return SelectionPolicy(max_tools=limit if cap is None else cap, **fields)


DEFAULT = SelectionPolicy()
"""The one default: the 5 best tools with some probability, hard mask, no cache."""

TOP_K = SelectionPolicy(threshold=None)
"""The papers' top-k protocol, by name (not a default): always the `k` best tools, those with
zero probability filling in catalogue order. The end-to-end evaluation, recommendations
without a set size and `dtdr-agents rank` use it; agents use `SelectionPolicy()`."""


SchemaTokens = Mapping[str, int]
"""Each tool's schema size in tokens, by name (`runtime.tokens.catalogue_schema_tokens`).

The foundation does not count tokens itself (the counters live in `dtdr_agents.runtime.tokens`):
the caller of `select` or `within_bounds` hands the counts in when the policy sets
`SelectionPolicy.max_schema_tokens`."""


def _token_count(schema_tokens: SchemaTokens, name: str) -> int:
    """`name`'s schema tokens (end-of-plan is never bound: 0); a clear error when missing."""
    if name == END_OF_PLAN:
        return 0
    count = schema_tokens.get(name)
    if count is None:
        raise ValueError(
            f"SelectionPolicy.max_schema_tokens: no schema token count for the tool {name!r} "
            "(schema_tokens must count every tool of the catalogue)"
        )
    return int(count)


def within_bounds(
    names: Sequence[str],
    policy: SelectionPolicy,
    *,
    schema_tokens: SchemaTokens | None = None,
    fallback: bool = False,
    reserved: int = 0,
) -> tuple[str, ...]:
    """`names` (most wanted first) cut to `policy`'s bounds: the one place a bound is applied.

    `select` applies it to every selection (its `always_include` names listed first); the
    runtime checks a binder's grown list with it (a list it would cut restarts from the step's
    selection), and the MCP proxy its exposed list. The bounds:

    * with `fallback` (the step is out of distribution), at most `fallback_k` names besides
      the `always_include` ones (the first ones);
    * at most `max_tools` names, less `reserved` slots (tools the caller binds besides
      `names`, e.g. the MCP proxy's meta-tools): the first ones;
    * `max_schema_tokens`: the `always_include` names are kept and counted first, then the
      longest prefix of the others whose schemas fit; at least one name is kept even when
      the first alone is over budget. The end-of-plan token never counts.

    Args:
        names: Candidate names, most wanted first, without duplicates.
        policy: The policy whose bounds apply.
        schema_tokens: Each tool's schema tokens; needed when `max_schema_tokens` is set.
        fallback: Apply the out-of-distribution bound `fallback_k`.
        reserved: Slots of `max_tools` taken by tools that are not in `names`.

    Returns:
        The kept names, in the order given (all of `names` when it is within every bound).

    Raises:
        ValueError: `max_schema_tokens` is set and `schema_tokens` is None or lacks a name.
    """
    kept = list(names)
    always = set(policy.always_include)
    if fallback and policy.fallback_k is not None:
        room = policy.fallback_k
        kept = [n for n in kept if n in always or (room := room - 1) >= 0]
    if policy.max_tools is not None:
        kept = kept[: max(0, policy.max_tools - reserved)]
    budget = policy.max_schema_tokens
    if budget is not None:
        if schema_tokens is None:
            raise ValueError(
                "SelectionPolicy.max_schema_tokens needs the tools' schema token counts: pass "
                "schema_tokens= (dtdr_agents.runtime.tokens.catalogue_schema_tokens(tools, "
                "counter))"
            )
        fit = {n for n in kept if n in always}  # always bound, counted first
        used = sum(_token_count(schema_tokens, n) for n in fit)
        for name in (n for n in kept if n not in always):
            cost = _token_count(schema_tokens, name)
            if fit and used + cost > budget:
                break  # the longest prefix that fits; at least one name is kept
            fit.add(name)
            used += cost
        kept = [n for n in kept if n in fit]
    return tuple(kept)


def select(
    ranking: Ranking,
    policy: SelectionPolicy | None = None,
    *,
    schema_tokens: SchemaTokens | None = None,
    reserved: int = 0,
) -> Selection:
    """Apply every selection field of `policy` to `ranking`: the one selection path.

    The ranked cut (`k`, `threshold`, `coverage`, `min_k`, `include_zero`), or, when the
    ranking is out of distribution and `respect_fallback` is set, the ranking's best
    `fallback_k`; then the `always_include` names; then the bounds `max_tools` and
    `max_schema_tokens` (`within_bounds`, the `always_include` names kept first). The
    end-of-plan token is ranked like a tool but only returned when `include_end` is set.
    Every stack (the runtime's `StepSelector`, the LangChain retriever, the LangGraph node,
    the middleware, LlamaIndex, the MCP proxy) selects through this function and applies no
    bound of its own.

    Args:
        ranking: The retriever's ranking of the step.
        policy: The policy (default `DEFAULT`).
        schema_tokens: Each tool's schema size in tokens; needed when the policy sets
            `max_schema_tokens` (`dtdr_agents.runtime.tokens.catalogue_schema_tokens`).
        reserved: Slots of `max_tools` taken by tools the caller binds besides the selection
            (the MCP proxy's two meta-tools).

    Returns:
        The selection: the ranked names best first, then the `always_include` extras.

    Raises:
        UnknownToolError: An `always_include` name is not a candidate of the ranking.
        ValueError: `max_schema_tokens` is set and `schema_tokens` is missing (or lacks a
            selected tool).
    """
    policy = policy or DEFAULT
    unknown = [n for n in policy.always_include if n not in ranking.names or n == END_OF_PLAN]
    if unknown:
        raise UnknownToolError(
            f"always_include names tools not in the catalogue: {unknown}", tuple(unknown)
        )
    order = ranking.order
    if not policy.include_end:
        order = order[np.asarray(ranking.names, dtype=object)[order] != END_OF_PLAN]
    sorted_probs = ranking.probabilities[order]
    end_p = ranking.probability(END_OF_PLAN)
    fallback = ranking.fallback and policy.respect_fallback
    if fallback:
        chosen: list[int] = [int(i) for i in order[: policy.fallback_k]]
    else:
        chosen = [int(i) for i in order[: _cut(sorted_probs, policy)]]
    ranked = [ranking.names[i] for i in chosen]
    extras = [n for n in dict.fromkeys(policy.always_include) if n not in set(ranked)]
    always = dict.fromkeys(policy.always_include)  # first: they survive every cap
    wanted = [*always, *(n for n in ranked if n not in always)]
    kept = set(within_bounds(wanted, policy, schema_tokens=schema_tokens, reserved=reserved))
    names = tuple(n for n in (*ranked, *extras) if n in kept)
    why = {n: ranking.why(n) for n in names}
    for name in extras:
        if name in why:
            why[name] = f"always_include ({why[name]})"
    return Selection(
        names=names,
        probabilities=tuple(ranking.probability(n) for n in names),
        fallback=fallback,
        reason=ranking.fallback_reason if ranking.fallback else None,
        end_probability=end_p,
        why=why,
    )
