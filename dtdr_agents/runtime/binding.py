"""Binding strategies: how the bound list of a step follows from its selection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from dtdr_agents.foundation.selection import CACHE_MODES
from dtdr_agents.foundation.types import Toolset
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.runtime.steps import StepRecord

__all__ = ["BINDERS", "BindContext", "Binder", "register_binder"]


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
        cap: `SelectionPolicy.cache_cap` resolved (never None).
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
"""Binding strategies by name (the values of `SelectionPolicy.cache`)."""


def register_binder(name: str, binder: Binder) -> None:
    """Add a binding strategy usable as ``SelectionPolicy(cache=name)``.

    Raises:
        ValueError: `name` is already registered.
    """
    if name in BINDERS:
        raise ValueError(f"a binder named {name!r} is already registered")
    BINDERS[name] = binder
    CACHE_MODES.add(name)
