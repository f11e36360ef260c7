"""Answer a model's tool search from a retriever that knows the calls made so far.

The platforms' tool search lets the model find deferred tools (their schemas are not in the
prompt) by calling a search tool; with a client-side search, the application runs the search
and answers with the tools to load. `ToolSearchBackend` runs that search with any fitted
retriever, ranking from the search text *and* the calls made so far, and renders the answer in
the wire shapes of:

* the Anthropic Messages API: tools sent with ``"defer_loading": true`` and a search tool
  defined by the application; the search is answered with a ``tool_result`` block whose
  ``content`` is a list of ``{"type": "tool_reference", "tool_name": ...}`` blocks
  (`anthropic_result`, `anthropic_search_tool`, `anthropic_deferred_tools`);
* the OpenAI Responses API: a ``{"type": "tool_search", "execution": "client"}`` tool and
  function tools with ``"defer_loading": true``; the model's ``tool_search_call`` item is
  answered with a ``tool_search_output`` item carrying the loaded tools' definitions
  (`openai_output`, `openai_search_tool`, `openai_deferred_tools`).

Plain dicts only, no framework or SDK import. A search naming tools that are not in the
catalogue (as candidates or in the calls so far) is answered without them, with a
`ToolSearchWarning`; a tool outside the catalogue is never returned.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dtdr_agents.foundation.selection import SelectionPolicy
from dtdr_agents.foundation.types import Tool, Toolset
from dtdr_agents.runtime.checks import fitted_tools, short_names, unwrap_retriever
from dtdr_agents.runtime.selector import StepSelector
from dtdr_agents.runtime.steps import StepRecord
from dtdr_agents.store.publishing import Reloader

__all__ = [
    "DEFAULT_SEARCH_DESCRIPTION",
    "NO_MATCH_TEXT",
    "SEARCH_PARAMETERS",
    "ToolSearchBackend",
    "ToolSearchWarning",
    "anthropic_calls",
    "anthropic_deferred_tools",
    "anthropic_search_tool",
    "anthropic_tool_result",
    "catalogue_of",
    "openai_calls",
    "openai_deferred_tools",
    "openai_search_tool",
    "openai_tool_search_output",
]

DEFAULT_SEARCH_DESCRIPTION = (
    "Search the deferred tools by what you need to do next; the tools found are loaded and "
    "can then be called."
)
"""Description of the search tool shown to the model."""

NO_MATCH_TEXT = "No tools matched the search."
"""Text answered when nothing matched (Anthropic rejects an empty ``tool_result`` content)."""

SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What the tool should do, in plain words."}
    },
    "required": ["query"],
    "additionalProperties": False,
}
"""JSON schema of the search tool's arguments (one ``query`` string)."""


class ToolSearchWarning(UserWarning):
    """A search named tools that are not in the catalogue; they were ignored."""


def _warn_unknown(names: Sequence[str], where: str) -> None:
    warnings.warn(
        f"the tool search names {len(names)} tool(s) that are not in the catalogue "
        f"{short_names(list(names))} ({where}): they are ignored and never returned",
        ToolSearchWarning,
        stacklevel=3,
    )


# ------------------------------------------------------------------------------ wire shapes
def anthropic_tool_result(tool_use_id: str, names: Sequence[str]) -> dict[str, Any]:
    """The ``tool_result`` block answering an Anthropic client-side tool search.

    Args:
        tool_use_id: The ``id`` of the model's ``tool_use`` block of the search tool.
        names: Tools to load, best first (each must be sent with ``defer_loading``).

    Returns:
        ``{"type": "tool_result", "tool_use_id": ..., "content": [tool_reference, ...]}``;
        with no names, one text block (the API rejects an empty content list).
    """
    content: list[dict[str, Any]] = [{"type": "tool_reference", "tool_name": n} for n in names]
    if not content:
        content = [{"type": "text", "text": NO_MATCH_TEXT}]
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}


def anthropic_search_tool(
    name: str = "tool_search", description: str = DEFAULT_SEARCH_DESCRIPTION
) -> dict[str, Any]:
    """An Anthropic custom tool the model calls to search (the application answers it)."""
    return {"name": name, "description": description, "input_schema": dict(SEARCH_PARAMETERS)}


def anthropic_deferred_tools(tools: Iterable[Tool]) -> list[dict[str, Any]]:
    """Anthropic tool definitions with ``"defer_loading": true`` (loaded when referenced)."""
    return [
        {
            "name": t.name,
            "description": t.description,
            "input_schema": dict(t.parameters),
            "defer_loading": True,
        }
        for t in tools
    ]


def openai_search_tool(description: str = DEFAULT_SEARCH_DESCRIPTION) -> dict[str, Any]:
    """The OpenAI Responses ``tool_search`` tool run by the client (``execution="client"``)."""
    return {
        "type": "tool_search",
        "execution": "client",
        "description": description,
        "parameters": dict(SEARCH_PARAMETERS),
    }


def _openai_function(tool: Tool, *, deferred: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": dict(tool.parameters),
    }
    if deferred:
        out["defer_loading"] = True
    return out


def openai_deferred_tools(tools: Iterable[Tool]) -> list[dict[str, Any]]:
    """OpenAI Responses function tools with ``"defer_loading": true``."""
    return [_openai_function(t, deferred=True) for t in tools]


def openai_tool_search_output(call_id: str | None, tools: Iterable[Tool]) -> dict[str, Any]:
    """The ``tool_search_output`` item answering an OpenAI client-executed tool search.

    Args:
        call_id: The ``call_id`` of the model's ``tool_search_call`` item.
        tools: The tools to load, best first (their function definitions are sent).
    """
    return {
        "type": "tool_search_output",
        "execution": "client",
        "call_id": call_id,
        "status": "completed",
        "tools": [_openai_function(t, deferred=False) for t in tools],
    }


def anthropic_calls(
    messages: Sequence[Mapping[str, Any]], *, skip: Iterable[str] = ()
) -> list[str]:
    """Names of the ``tool_use`` blocks of the assistant messages since the last user request.

    The turn starts at the last user message that is not only tool results. `skip` names
    tools to leave out (the search tool itself).
    """
    skipped = set(skip)
    start = 0
    for i, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") != "user":
            continue
        blocks = content if isinstance(content, list) else [{"type": "text"}]
        if any(isinstance(b, Mapping) and b.get("type") != "tool_result" for b in blocks):
            start = i
    return [
        str(block["name"])
        for message in messages[start:]
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, Mapping) and block.get("type") == "tool_use"
        if str(block.get("name")) not in skipped
    ]


def openai_calls(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """Names of the ``function_call`` items since the last user message of a Responses input."""
    start = 0
    for i, item in enumerate(items):
        if item.get("role") == "user":
            start = i
    return [str(item["name"]) for item in items[start:] if item.get("type") == "function_call"]


# ---------------------------------------------------------------------------------- backend
def catalogue_of(retriever: Any) -> Toolset:
    """The catalogue `retriever` ranks (a fitted retriever, an adapter or a `Reloader`).

    Raises:
        NotFittedError: The retriever is not fitted.
        TypeError: `retriever` is none of those.
    """
    if isinstance(retriever, Reloader):
        retriever = retriever.current()
    return fitted_tools(unwrap_retriever(retriever))


class ToolSearchBackend:
    """Answers a model's tool search from a retriever, with the calls made so far.

    The search ranks the catalogue with ``retriever.rank(query, calls so far)`` and keeps
    what the `SelectionPolicy` selects (the `StepSelector` selection, best first).

    Args:
        retriever: A fitted retriever (any `make_retriever` id, or an adapter holding one).
        tools: The catalogue (default: the one the retriever was fitted on).
        policy: The `SelectionPolicy` (default `DEFAULT_POLICY`: the 5 best tools).
        limit: At most this many tools per answer (None: what the policy selects).

    Raises:
        CatalogueMismatchError: The retriever ranks another catalogue.
        NotFittedError: The retriever is not fitted.
    """

    def __init__(
        self,
        retriever: Any,
        tools: Sequence[Any] | Toolset | None = None,
        *,
        policy: SelectionPolicy | None = None,
        limit: int | None = None,
    ) -> None:
        catalogue = tools if tools is not None else catalogue_of(retriever)
        self.selector = StepSelector(catalogue, retriever, policy=policy)
        self.limit = limit
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ValueError(f"limit must be a positive integer or None, got {limit!r}")

    @property
    def tools(self) -> Toolset:
        """The catalogue searched."""
        return self.selector.toolset

    def _known(self, names: Iterable[str], where: str) -> list[str]:
        names = [str(n) for n in names]
        unknown = [n for n in names if not self.tools.has(n)]
        if unknown:
            _warn_unknown(unknown, where)
        return [n for n in names if self.tools.has(n)]

    def step(self, query: str, history: Sequence[str] = ()) -> StepRecord:
        """The `StepSelector` step behind a search (calls outside the catalogue dropped)."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"the tool search query must be a non-empty string, got {query!r}")
        return self.selector.select(query, self._known(history, "calls so far"))

    def search(
        self,
        query: str,
        history: Sequence[str] = (),
        *,
        candidates: Iterable[str] | None = None,
    ) -> list[str]:
        """The tools to load for a search, best first.

        Args:
            query: The model's search text (or the user's request).
            history: Names of the tools called so far in the turn, in order. Names outside
                the catalogue are ignored with a `ToolSearchWarning`.
            candidates: Only these tools may be returned (e.g. the request's deferred tools);
                names outside the catalogue are ignored with a `ToolSearchWarning`.

        Raises:
            ValueError: An empty query.
        """
        names = list(self.step(query, history).names)
        if candidates is not None:
            allowed = set(self._known(candidates, "candidates"))
            names = [n for n in names if n in allowed]
        return names[: self.limit] if self.limit is not None else names

    def anthropic_result(
        self,
        tool_use: Mapping[str, Any],
        history: Sequence[str] = (),
        *,
        candidates: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        """Answer an Anthropic ``tool_use`` block of the search tool (``input.query``)."""
        query = str(dict(tool_use.get("input") or {}).get("query") or "")
        names = self.search(query, history, candidates=candidates)
        return anthropic_tool_result(str(tool_use["id"]), names)

    def openai_output(
        self,
        call: Mapping[str, Any],
        history: Sequence[str] = (),
        *,
        candidates: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        """Answer an OpenAI Responses ``tool_search_call`` item (``arguments.query``)."""
        arguments = call.get("arguments")
        if isinstance(arguments, str):  # a JSON string, as function-call arguments are sent
            try:
                arguments = json.loads(arguments)
            except ValueError as exc:
                raise ValueError(f"tool_search_call arguments are not JSON: {exc}") from exc
        query = str(arguments.get("query") or "") if isinstance(arguments, Mapping) else ""
        names = self.search(query, history, candidates=candidates)
        found = [t for n in names if (t := self.tools.get(n)) is not None]
        return openai_tool_search_output(call.get("call_id"), found)
