"""The agents' policy: one `SelectionPolicy` built from an integration's keywords.

Every integration takes ``policy=`` (a `SelectionPolicy`, the one carrier of selection,
binding, widening and unbound-call settings) plus the shorthands ``k``, ``mode`` and ``cache``,
and turns them into one policy with `resolve_policy`, which it passes on unchanged.
`BindingPolicy` and ``binding=`` are deprecated spellings of the carrier's binding fields.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from dtdr_agents.foundation.selection import DEFAULT, OnUnbound, SelectionPolicy
from dtdr_agents.runtime.checks import UNSET, Unset
from dtdr_agents.runtime.prompting import MaskMode

__all__ = [
    "DEFAULT_POLICY",
    "AgentMode",
    "BindingPolicy",
    "SelectionKeywords",
    "resolve_policies",
    "resolve_policy",
    "with_binding",
]

DEFAULT_POLICY = DEFAULT
"""The one default, `SelectionPolicy()`: the 5 best tools with some probability, hard mask, no
cache, one wider re-selection, unbound calls rejected (an alias kept for its name)."""

AgentMode = MaskMode | Literal["set"]
"""A mask mode, or ``"set"``: bind the request's recommended tool set once per turn."""

_BINDING_FIELDS = (
    "mode",
    "cache",
    "cache_cap",
    "widen_k",
    "widen_on_unbound",
    "widen_on_answer",
    "on_unbound",
    "max_rejections",
    "ignore_unknown_history",
)


@dataclass(frozen=True)
class BindingPolicy:
    """Deprecated: the binding fields of `SelectionPolicy` (same names, same defaults).

    Building one warns (`DeprecationWarning`); pass ``SelectionPolicy(mode=..., cache=...,
    widen_k=..., on_unbound=...)`` as ``policy=`` instead. Values are checked as the carrier
    checks them (errors name ``SelectionPolicy.<field>``).
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
        warnings.warn(
            "BindingPolicy is deprecated: its fields are fields of SelectionPolicy (pass "
            "policy=SelectionPolicy(mode=..., cache=..., on_unbound=...))",
            DeprecationWarning,
            stacklevel=3,
        )
        SelectionPolicy(k=None, **self.fields())  # the carrier's checks, naming the field

    def fields(self) -> dict[str, Any]:
        """The binding fields, by name."""
        return {name: getattr(self, name) for name in _BINDING_FIELDS}


def with_binding(policy: SelectionPolicy, binding: BindingPolicy) -> SelectionPolicy:
    """`policy` with the fields a deprecated `BindingPolicy` sets (those not at their default).

    Raises:
        ValueError: `policy` sets one of those fields to another non-default value.
    """
    default = SelectionPolicy()
    changes: dict[str, Any] = {}
    for name, value in binding.fields().items():
        if value == getattr(default, name):
            continue
        current = getattr(policy, name)
        if current != getattr(default, name) and current != value:
            raise ValueError(
                f"binding.{name}={value!r} contradicts policy.{name}={current!r}: pass one of them"
            )
        changes[name] = value
    return dataclasses.replace(policy, **changes) if changes else policy


def _shorthand(sel: SelectionPolicy, given: bool, name: str, value: Any) -> SelectionPolicy:
    """`sel` with the shorthand `name`=`value`, refusing one that contradicts a given value."""
    current = getattr(sel, name)
    if given and current != value and current != getattr(SelectionPolicy(), name):
        raise ValueError(
            f"{name}={value!r} contradicts policy.{name}={current!r}: pass one of them"
        )
    return dataclasses.replace(sel, **{name: value})


def resolve_policy(
    policy: SelectionPolicy | None = None,
    *,
    k: int | Unset | None = UNSET,
    mode: AgentMode | None = None,
    cache: str | None = None,
    binding: BindingPolicy | None = None,
) -> SelectionPolicy:
    """An agent's one policy from its `policy` and the shorthand keywords.

    `k`, `mode` and `cache` set the same fields of `policy` (default `DEFAULT_POLICY`). A
    shorthand that contradicts a value the given policy sets is an error. ``mode="set"`` is
    the hard mode with ``cache="set"``: the request's recommended tool set is bound once per
    turn. `binding` (deprecated, warns) sets the binding fields.

    Raises:
        TypeError: `policy` is not a `SelectionPolicy`.
        ValueError: A contradiction, or an invalid value (naming the field).
    """
    if policy is not None and not isinstance(policy, SelectionPolicy):
        raise TypeError(f"policy must be a SelectionPolicy, got {type(policy).__name__}")
    sel = policy or DEFAULT_POLICY
    if binding is not None:
        if not isinstance(binding, BindingPolicy):
            raise TypeError(f"binding must be a BindingPolicy, got {type(binding).__name__}")
        warnings.warn(
            "binding= is deprecated: pass the binding fields in policy=SelectionPolicy(...)",
            DeprecationWarning,
            stacklevel=3,
        )
        sel = with_binding(sel, binding)
    given = policy is not None or binding is not None
    if not isinstance(k, Unset):
        if policy is not None and policy.k != k:
            raise ValueError(f"k={k} contradicts policy.k={policy.k}: pass one of them")
        sel = dataclasses.replace(sel, k=k)
    if mode == "set":
        if cache not in (None, "set"):
            raise ValueError(
                f"mode='set' binds the recommended set; it contradicts cache={cache!r}"
            )
        mode, cache = "hard", "set"
    if mode is not None:
        sel = _shorthand(sel, given, "mode", mode)
    if cache is not None:
        sel = _shorthand(sel, given, "cache", cache)
    return sel


class SelectionKeywords(TypedDict, total=False):
    """The selection keywords every agent stack takes and hands to `resolve_policy`.

    Keys:
        k: Shorthand for ``policy.k``: bind at most this many retrieved tools per step
            (None: no cap). Default 5.
        policy: The `SelectionPolicy`, every setting of a step (selection, mask mode,
            cache-stable binding, the one wider re-selection, calls of unbound tools).
            Default `DEFAULT_POLICY`. Passed on unchanged.
        mode: Shorthand for ``policy.mode``: ``"hard"``, ``"hard_weighted"``, ``"soft"`` or
            ``"soft_weighted"`` (DTDR paper, §5), or ``"set"``: bind the request's
            recommended tool set once per turn, re-recommended when the model leaves it.
        cache: Shorthand for ``policy.cache``: ``"append"`` only grows the bound list
            within a turn (so each request's tools array starts with the previous one's);
            ``"off"`` binds each selection.
        binding: Deprecated (warns): a `BindingPolicy` whose fields are set on `policy`.
    """

    k: int | Unset | None
    policy: SelectionPolicy | None
    mode: AgentMode | None
    cache: str | None
    binding: BindingPolicy | None


def resolve_policies(
    policy: SelectionPolicy | None = None,
    binding: BindingPolicy | None = None,
    *,
    k: int | Unset | None = UNSET,
    mode: AgentMode | None = None,
    cache: str | None = None,
) -> tuple[SelectionPolicy, SelectionPolicy]:
    """Deprecated: `resolve_policy`, returned twice (the one policy carries the binding too).

    Returns:
        ``(policy, policy)``: the second item stands for the old `BindingPolicy` (same field
        names).
    """
    warnings.warn(
        "resolve_policies is deprecated: use resolve_policy (one SelectionPolicy)",
        DeprecationWarning,
        stacklevel=2,
    )
    sel = resolve_policy(policy, k=k, mode=mode, cache=cache, binding=binding)
    return sel, sel
