"""The runtime's input checks: tool lists, fitted retrievers, integer options, the catalogue."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from dtdr_agents.foundation.errors import DTDRError, NotFittedError
from dtdr_agents.foundation.types import Toolset
from dtdr_agents.retrievers.base import ToolRetriever

__all__ = [
    "DEFAULT_RETRIEVER",
    "UNSET",
    "CatalogueMismatchError",
    "Unset",
    "check_int",
    "check_tool_list",
    "fitted_tools",
    "short_names",
    "unwrap_retriever",
]

DEFAULT_RETRIEVER = "hybrid"
"""The retriever id an integration fits when it is given demonstrations and no retriever
(`hybrid`: zero-shot relevance plus learned dependencies; works from zero demonstrations)."""


class Unset(enum.Enum):
    """Type of `UNSET`."""

    UNSET = enum.auto()


UNSET = Unset.UNSET
"""Marks a shorthand keyword (such as `k`) that the caller did not pass."""


class CatalogueMismatchError(DTDRError, ValueError):
    """The retriever ranks a different tool catalogue than the agent binds."""


def check_int(name: str, value: Any, *, minimum: int, optional: bool = False) -> int | None:
    """Validate an integer option (not a bool, a float or a string) of at least `minimum`.

    Args:
        name: The option's name for the message (e.g. ``"ProxyConfig.k"``).
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


def short_names(names: Sequence[str], limit: int = 8) -> str:
    """At most `limit` of `names`, as a list, with " ..." when some were left out."""
    shown = list(names[:limit])
    return f"{shown}{' ...' if len(names) > limit else ''}"
