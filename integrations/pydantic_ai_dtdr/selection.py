"""Per-step tool selection and tool search for Pydantic AI agents.

Pydantic AI calls a ``ToolsPrepareFunc`` before every model request with the run context
(``ctx.messages``: the run's messages so far) and the tool definitions; what it returns is
what the model sees. `DTDRPrepareTools` reads the current turn from the messages (the request
and the tool calls made since it), asks the shared runtime's `StepSelector`, and returns the
definitions of the tools the step binds, in the bound order. Definitions of tools the
retriever does not rank (other toolsets, the ``search_tools`` tool) are passed through.

``ToolSearch(strategy=callable)`` calls ``strategy(ctx, queries, deferred_tool_defs)`` when the
model searches; `DTDRSearchStrategy` answers from the retriever with the run's calls so far
(`dtdr_agents.runtime.tool_search.ToolSearchBackend`).

Only the hard mask applies: a prepare function chooses definitions, it cannot add the guidance
text of the soft and weighted modes. The one wider re-selection of the other integrations
needs the model's reply inside the step, which Pydantic AI does not hand to a prepare
function, so it is not made here; a call of an unbound tool is refused by Pydantic AI itself
(the model is told the tool is unknown and retries).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Unpack

from cachetools import LRUCache
from pydantic_ai import RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.tools import Tool as PydanticTool
from pydantic_ai.tools import ToolDefinition

from dtdr_agents.foundation.types import Tool, Toolset
from dtdr_agents.runtime import (
    SelectionKeywords,
    StepRecord,
    StepSelector,
    resolve_policy,
)
from dtdr_agents.runtime.prompting import TokenCounter
from dtdr_agents.runtime.tool_search import ToolSearchBackend, catalogue_of

__all__ = [
    "DTDRPrepareTools",
    "DTDRSearchStrategy",
    "Turn",
    "core_tool",
    "current_turn",
    "prepare_tools",
    "search_strategy",
]

SEARCH_TOOL_NAME = "search_tools"
"""Name of Pydantic AI's local tool-search function tool (never ranked)."""

MAX_RUNS = 1024
"""Runs whose step records are kept (least recently used dropped first)."""


class NoRequestError(ValueError):
    """The run's messages hold no user request to rank tools for."""


@dataclass(frozen=True)
class Turn:
    """The current turn of a run's messages.

    Attributes:
        request: Text of the turn's first user prompt.
        calls: Names of the tool calls of the model responses since then, in order.
    """

    request: str
    calls: tuple[str, ...]


def _prompt_text(part: UserPromptPart) -> str:
    content = part.content
    if isinstance(content, str):
        return content
    return " ".join(c for c in content if isinstance(c, str))


def _calls(message: ModelResponse) -> list[str]:
    return [p.tool_name for p in message.parts if isinstance(p, ToolCallPart)]


def current_turn(messages: Sequence[ModelMessage], *, skip: Iterable[str] = ()) -> Turn:
    """The request and the calls so far of the turn in progress.

    A turn starts with the first user prompt after the model's last final answer (a response
    without tool calls), as in the other integrations.

    Args:
        messages: The run's messages (``ctx.messages``).
        skip: Tool names left out of the calls (e.g. ``search_tools``).

    Raises:
        NoRequestError: No user prompt with text in the turn.
    """
    msgs = list(messages)
    last_answer = max(
        (i for i, m in enumerate(msgs) if isinstance(m, ModelResponse) and not _calls(m)),
        default=-1,
    )
    request: str | None = None
    start = len(msgs)
    for i in range(last_answer + 1, len(msgs)):
        message = msgs[i]
        if isinstance(message, ModelRequest):
            texts = [_prompt_text(p) for p in message.parts if isinstance(p, UserPromptPart)]
            if texts and " ".join(texts).strip():
                request, start = " ".join(texts).strip(), i
                break
    if request is None:
        raise NoRequestError(
            "no user prompt in the run's current turn (after the model's last answer): the "
            "tool retriever needs the user's request"
        )
    skipped = set(skip)
    calls = tuple(
        name
        for m in msgs[start + 1 :]
        if isinstance(m, ModelResponse)
        for name in _calls(m)
        if name not in skipped
    )
    return Turn(request, calls)


def core_tool(tool: ToolDefinition | PydanticTool[Any] | Any) -> Tool:
    """The dtdr-agents `Tool` of a Pydantic AI tool or tool definition (or anything `Tool` takes).

    Raises:
        InvalidToolError: The tool has no name.
    """
    if isinstance(tool, PydanticTool):
        tool = tool.tool_def
    if isinstance(tool, ToolDefinition):
        return Tool(
            name=tool.name,
            description=tool.description or "",
            parameters=dict(tool.parameters_json_schema),
        )
    return Tool.from_any(tool)


def _catalogue(tools: Sequence[Any] | Toolset | None, retriever: Any) -> Toolset:
    if tools is None:
        return catalogue_of(retriever)
    if isinstance(tools, Toolset):
        return tools
    return Toolset([core_tool(t) for t in tools])


class DTDRPrepareTools:
    """A ``ToolsPrepareFunc`` that binds the tools selected for each step.

    Use as ``Agent(model, tools=..., capabilities=[PrepareTools(DTDRPrepareTools(retriever))])``
    (or ``toolset.prepared(...)``). At every model request it ranks the tools from the
    turn's request and the calls made so far (`current_turn` of ``ctx.messages``) and
    returns the definitions of the tools the `StepSelector` binds.

    Args:
        retriever: A fitted core retriever (or an adapter holding one, or a
            `store.Reloader`). None: `hybrid` fitted on `tools` alone.
        tools: The catalogue (Pydantic AI tools, tool definitions or dtdr-agents tools);
            default: the retriever's catalogue.
        token_counter: Token counter for the prompt figures.
        **selection: ``k``, ``policy``, ``mode``, ``cache`` (see `SelectionKeywords`).

    Raises:
        ValueError: A mode other than ``"hard"`` (a prepare function cannot add guidance
            text), or a contradiction in the selection keywords.
        CatalogueMismatchError: The retriever ranks another catalogue.
    """

    def __init__(
        self,
        retriever: Any = None,
        tools: Sequence[Any] | Toolset | None = None,
        *,
        token_counter: TokenCounter | None = None,
        **selection: Unpack[SelectionKeywords],
    ) -> None:
        policy = resolve_policy(**selection)
        if policy.mode != "hard":
            raise ValueError(
                f"SelectionPolicy.mode={policy.mode!r}: a Pydantic AI prepare function chooses "
                "tool definitions and cannot add the guidance text of the soft and weighted "
                "modes; use mode='hard'"
            )
        if tools is None and retriever is None:
            raise ValueError("pass a fitted retriever, or the tools to fit the default one on")
        catalogue = _catalogue(tools, retriever)
        self.selector = StepSelector(
            catalogue, retriever, policy=policy, token_counter=token_counter
        )
        self._runs: LRUCache[str, list[StepRecord]] = LRUCache(maxsize=MAX_RUNS)
        self._lock = threading.Lock()

    @property
    def tools(self) -> Toolset:
        """The catalogue the retriever ranks."""
        return self.selector.toolset

    def steps(self, run_id: str) -> list[StepRecord]:
        """The steps of a run (``result.run_id``), in call order (the latest runs only)."""
        with self._lock:
            return list(self._runs.get(run_id, []))

    def select(self, messages: Sequence[ModelMessage], run_id: str | None = None) -> StepRecord:
        """The step for the current turn of `messages` (recorded under `run_id`)."""
        turn = current_turn(messages, skip=(SEARCH_TOOL_NAME,))
        history = [c for c in turn.calls if self.tools.has(c)]
        with self._lock:
            steps = self._runs.get(run_id, []) if run_id is not None else []
        previous = steps[-1] if steps else None
        step = self.selector.select(turn.request, history, previous=previous)
        if run_id is not None:
            with self._lock:
                self._runs[run_id] = [*steps, step]
        return step

    def filter(self, step: StepRecord, tool_defs: Sequence[ToolDefinition]) -> list[ToolDefinition]:
        """`tool_defs` cut to `step`'s bound tools (bound order), then the unranked ones."""
        by_name = {d.name: d for d in tool_defs}
        bound = [by_name[n] for n in step.bound if n in by_name]
        return [*bound, *(d for d in tool_defs if not self.tools.has(d.name))]

    async def __call__(
        self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        """The tool definitions of this step (the ``ToolsPrepareFunc`` signature)."""
        return self.filter(self.select(ctx.messages, ctx.run_id), tool_defs)


def prepare_tools(
    retriever: Any = None,
    tools: Sequence[Any] | Toolset | None = None,
    *,
    token_counter: TokenCounter | None = None,
    **selection: Unpack[SelectionKeywords],
) -> DTDRPrepareTools:
    """A history-aware ``ToolsPrepareFunc`` (see `DTDRPrepareTools`).

    Example: ``Agent(model, tools=tools, capabilities=[PrepareTools(prepare_tools(r, k=3))])``.
    """
    return DTDRPrepareTools(retriever, tools, token_counter=token_counter, **selection)


class DTDRSearchStrategy:
    """A ``ToolSearch`` strategy: ``(ctx, queries, tools) -> names``, from the retriever.

    Use as ``Agent(model, tools=[Tool(f, defer_loading=True), ...],
    capabilities=[ToolSearch(strategy=DTDRSearchStrategy(retriever))])``. The model's
    queries are the search text; the calls made so far in the turn (from ``ctx.messages``)
    are the history; only the deferred tools Pydantic AI passes in may be returned, best
    first. A name outside the catalogue is ignored with a `ToolSearchWarning`.

    Args:
        retriever: A fitted retriever.
        tools: The catalogue (default: the retriever's).
        limit: At most this many tools per search (default: what the policy selects).
        **selection: ``k``, ``policy``, ``mode``, ``cache`` (see `SelectionKeywords`).
    """

    def __init__(
        self,
        retriever: Any,
        tools: Sequence[Any] | Toolset | None = None,
        *,
        limit: int | None = None,
        **selection: Unpack[SelectionKeywords],
    ) -> None:
        self.backend = ToolSearchBackend(
            retriever, _catalogue(tools, retriever), policy=resolve_policy(**selection), limit=limit
        )

    def search(
        self, messages: Sequence[ModelMessage], queries: Sequence[str], candidates: Iterable[str]
    ) -> list[str]:
        """The tools found for `queries` given the run's `messages`, best first."""
        text = "; ".join(q.strip() for q in queries if q and q.strip())
        try:
            turn = current_turn(messages, skip=(SEARCH_TOOL_NAME,))
        except NoRequestError:
            turn = Turn("", ())
        history = [c for c in turn.calls if self.backend.tools.has(c)]  # other toolsets' calls
        return self.backend.search(text or turn.request, history, candidates=candidates)

    def __call__(
        self, ctx: RunContext[Any], queries: Sequence[str], tools: Sequence[ToolDefinition]
    ) -> list[str]:
        """Answer a tool search (the ``ToolSearchFunc`` signature)."""
        return self.search(ctx.messages, queries, [t.name for t in tools])


def search_strategy(
    retriever: Any,
    tools: Sequence[Any] | Toolset | None = None,
    *,
    limit: int | None = None,
    **selection: Unpack[SelectionKeywords],
) -> DTDRSearchStrategy:
    """A ``ToolSearch(strategy=...)`` callable backed by `retriever` (see `DTDRSearchStrategy`)."""
    return DTDRSearchStrategy(retriever, tools, limit=limit, **selection)
