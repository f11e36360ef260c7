"""The proxy's own tools (``set_task``, ``search_tools``) and the names clients see.

An upstream tool named like one of the proxy's own tools is listed as ``upstream_<name>``
(``upstream_<name>_2``, ... when that is taken too), with a `NameClashWarning`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import mcp_types as types

SET_TASK = "set_task"
"""Name of the meta-tool that sets the session's request."""

SEARCH_TOOLS = "search_tools"
"""Name of the meta-tool that looks tools up explicitly."""

_META_TOOLS = (
    types.Tool(
        name=SET_TASK,
        description=(
            "Set the task you are working on (the user's request, in their words). Call it "
            "first: the tools offered to you are chosen for this task and the calls you make."
        ),
        input_schema={
            "type": "object",
            "properties": {"request": {"type": "string", "description": "The user's request."}},
            "required": ["request"],
        },
    ),
    types.Tool(
        name=SEARCH_TOOLS,
        description=(
            "Find tools by what they do when none of the offered tools fits; the tools found "
            "become callable."
        ),
        input_schema={
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What the tool does."}},
            "required": ["query"],
        },
    ),
)


UPSTREAM_PREFIX = "upstream_"
"""Prefix of the listed name of an upstream tool named like one of the proxy's own tools."""


class NameClashWarning(UserWarning):
    """An upstream tool has the name of one of the proxy's own tools and is listed renamed."""


def _renamed(upstream_names: Sequence[str]) -> dict[str, str]:
    """The new name of each upstream tool named like one of the proxy's own tools."""
    own = {t.name for t in _META_TOOLS}
    taken = own | set(upstream_names)
    renamed: dict[str, str] = {}
    for name in upstream_names:
        if name in own:
            new, n = f"{UPSTREAM_PREFIX}{name}", 2
            while new in taken:
                new, n = f"{UPSTREAM_PREFIX}{name}_{n}", n + 1
            taken.add(new)
            renamed[name] = new
    return renamed


def listed_names(upstream_names: Sequence[str]) -> dict[str, str]:
    """The name clients see for each upstream tool, by upstream name.

    An upstream tool named like one of the proxy's own tools (``set_task``, ``search_tools``)
    gets `UPSTREAM_PREFIX` (then ``_2``, ``_3``, ... until the name is free) and a
    `NameClashWarning` naming both names; every other tool keeps its name.
    """
    renamed = _renamed(upstream_names)
    _warn_renamed(renamed)
    return {name: renamed.get(name, name) for name in upstream_names}


def _warn_renamed(renamed: Mapping[str, str]) -> None:
    """A `NameClashWarning` per renamed upstream tool, naming both names."""
    for name, new in renamed.items():
        warnings.warn(
            f"dtdr-agents mcp-proxy: the upstream tool {name!r} has the name of the proxy's own "
            f"tool {name!r}; it is listed to clients as {new!r}, and calls of {new!r} are "
            f"forwarded to the upstream's {name!r}",
            NameClashWarning,
            stacklevel=3,
        )
