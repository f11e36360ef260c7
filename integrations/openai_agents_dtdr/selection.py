"""Per-step tool enabling for OpenAI Agents SDK agents, from the dtdr-agents selection.

The Agents SDK asks every `FunctionTool`'s ``is_enabled(run_context, agent)`` and every MCP
server's ``tool_filter(filter_context, tool)`` which tools to offer before each model call.
`DTDRToolSelection` answers both from one `StepSelector` step per model call, ranked from the
run's request and the tool calls made so far.

Where the run's request and calls come from: the SDK hands the first step's tool checks a run
context whose ``turn_input`` is still empty, so the request is carried by a `DTDRRunContext`
(``Runner.run(agent, input, context=selection.context(input))``, or `DTDRToolSelection.run`),
and the calls are recorded from each model response by `DTDRAgentHooks` (the agent's
``hooks``; `DTDRToolSelection.agent` sets them).

The SDK asks ``is_enabled`` twice per step that calls tools: before the model call (which
tools to offer) and again before running the calls (a call of a disabled tool is refused with
``ModelBehaviorError``). The second round must answer with the step the model saw, so after a
response with tool calls the first answer of each tool comes from that step, and the calls are
added to the history for the next step's checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Unpack

from agents import Agent, AgentHooks, FunctionTool, RunContextWrapper, Runner, RunResult
from agents.agent import AgentBase
from agents.items import ModelResponse, TResponseInputItem
from agents.mcp import ToolFilterContext

from dtdr_agents.foundation.types import Tool, Toolset
from dtdr_agents.runtime import (
    SelectionKeywords,
    StepRecord,
    StepSelector,
    resolve_policy,
)
from dtdr_agents.runtime.prompting import TokenCounter
from dtdr_agents.runtime.tool_search import catalogue_of

__all__ = [
    "DTDRAgentHooks",
    "DTDRRunContext",
    "DTDRToolSelection",
    "core_tool",
    "current_turn",
]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return " ".join(
            str(part.get("text") or "")
            for part in content
            if isinstance(part, Mapping) and part.get("type") in ("input_text", "output_text")
        )
    return ""


def current_turn(items: str | Sequence[TResponseInputItem]) -> tuple[str, tuple[str, ...]]:
    """(request, calls so far) of a run's input: the last user message and the calls after it.

    Raises:
        ValueError: The input holds no user message with text.
    """
    if isinstance(items, str):
        request = items.strip()
        if not request:
            raise ValueError("the run's input is empty: the tool retriever needs a request")
        return request, ()
    msgs: list[Mapping[str, Any]] = [i for i in items if isinstance(i, Mapping)]
    start = max((i for i, m in enumerate(msgs) if m.get("role") == "user"), default=None)
    request = _text(msgs[start].get("content")).strip() if start is not None else ""
    if start is None or not request:
        raise ValueError("the run's input has no user message with text for the tool retriever")
    calls = tuple(str(m["name"]) for m in msgs[start + 1 :] if m.get("type") == "function_call")
    return request, calls


def core_tool(tool: FunctionTool | Any) -> Tool:
    """The dtdr-agents `Tool` of an Agents SDK `FunctionTool` (or anything `Tool` takes)."""
    if isinstance(tool, FunctionTool):
        return Tool(
            name=tool.name, description=tool.description, parameters=dict(tool.params_json_schema)
        )
    return Tool.from_any(tool)


@dataclass
class DTDRRunContext(RunContextWrapper[Any]):
    """The run context of a run whose tools are selected by a `DTDRToolSelection`.

    Pass it as ``Runner.run(..., context=...)`` (the SDK uses a given run context as is);
    the user's own context object is its ``context``.

    Attributes:
        request: The request the tools are ranked for.
        calls: The tool calls of the turn so far (catalogue names, in call order).
        steps: The steps of the run: what each model call was offered, and why.
    """

    request: str = ""
    calls: list[str] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    _pending: list[str] = field(default_factory=list, repr=False)
    _awaiting: set[str] = field(default_factory=set, repr=False)

    def _fold(self) -> None:
        """The last response's calls join the history (its tools were checked to run)."""
        self.calls.extend(self._pending)
        self._pending.clear()
        self._awaiting.clear()


class DTDRAgentHooks(AgentHooks[Any]):
    """Agent hooks that record each model response's tool calls into the `DTDRRunContext`.

    Subclass it to add hooks of your own (call ``super().on_llm_end``).
    """

    def __init__(self, selection: DTDRToolSelection) -> None:
        self.selection = selection

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        """Record the response's calls of catalogue tools (used from the next step on)."""
        if not isinstance(context, DTDRRunContext):
            return
        names = [
            str(getattr(item, "name", ""))
            for item in response.output
            if getattr(item, "type", None) == "function_call"
        ]
        context._fold()
        context._pending = [n for n in names if self.selection.tools.has(n)]
        # the SDK checks every function tool once more before running the calls
        context._awaiting = self.selection.enabled_names(agent) if names else set()
        if not context._awaiting:
            context._fold()


class _Enabler:
    """``is_enabled`` of one tool: whether the current step binds it."""

    def __init__(self, selection: DTDRToolSelection, name: str) -> None:
        self.selection = selection
        self.name = name

    def __call__(self, context: RunContextWrapper[Any], agent: AgentBase[Any]) -> bool:
        run = self.selection.run_context_of(context)
        if self.name in run._awaiting:  # the check before running the last response's calls
            run._awaiting.discard(self.name)
            bound = self.name in run.steps[-1].bound if run.steps else False
            if not run._awaiting:
                run._fold()
            return bound
        return self.name in self.selection.step(run).bound


class DTDRToolSelection:
    """Selects an Agents SDK agent's tools at every step from the request and calls so far.

    ::

        selection = DTDRToolSelection(retriever, k=3)
        agent = selection.agent(Agent(name="assistant", model=model, tools=tools))
        result = await selection.run(agent, "Summarize q3.pdf and email it to Ana")

    `agent` gives each catalogue tool an ``is_enabled`` of this selection and the agent the
    `DTDRAgentHooks`; `tool_filter` is the same selection for an MCP server
    (``MCPServerStdio(..., tool_filter=selection.tool_filter)``). Tools the retriever does not
    rank stay enabled. Only the hard mask applies (``is_enabled`` can only offer or withhold a
    tool), and a call of a tool the step did not offer is refused by the SDK
    (``ModelBehaviorError``), not by the runtime's ``on_unbound``.

    Args:
        retriever: A fitted core retriever (or an adapter holding one, or a
            `store.Reloader`). None: `hybrid` fitted on `tools` alone.
        tools: The catalogue (`FunctionTool` objects or dtdr-agents tools); default: the
            retriever's catalogue.
        token_counter: Token counter for the prompt figures.
        **selection: ``k``, ``policy``, ``mode``, ``cache`` (see `SelectionKeywords`).

    Raises:
        ValueError: A mode other than ``"hard"``, or contradicting selection keywords.
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
                f"SelectionPolicy.mode={policy.mode!r}: is_enabled can only offer or withhold "
                "a tool, not add the guidance text of the soft and weighted modes; use "
                "mode='hard'"
            )
        if tools is None and retriever is None:
            raise ValueError("pass a fitted retriever, or the tools to fit the default one on")
        if tools is None:
            catalogue = catalogue_of(retriever)
        elif isinstance(tools, Toolset):
            catalogue = tools
        else:
            catalogue = Toolset([core_tool(t) for t in tools])
        self.selector = StepSelector(
            catalogue, retriever, policy=policy, token_counter=token_counter
        )
        self.hooks = DTDRAgentHooks(self)
        self._enablers: dict[str, _Enabler] = {}

    @property
    def tools(self) -> Toolset:
        """The catalogue the retriever ranks."""
        return self.selector.toolset

    # ---------------------------------------------------------------------------- run context
    def context(
        self, input: str | Sequence[TResponseInputItem], context: Any = None
    ) -> DTDRRunContext:
        """A run context for ``Runner.run(agent, input, context=...)``.

        Args:
            input: The run's input (its last user message is the request; calls after it
                start the history).
            context: Your own context object (``run_context.context`` in tools and hooks).
        """
        request, calls = current_turn(input)
        return DTDRRunContext(
            context=context, request=request, calls=[c for c in calls if self.tools.has(c)]
        )

    @staticmethod
    def run_context_of(context: RunContextWrapper[Any]) -> DTDRRunContext:
        """The `DTDRRunContext` of a run.

        Raises:
            TypeError: The run was not started with one.
        """
        if not isinstance(context, DTDRRunContext):
            raise TypeError(
                "the run's tools are selected by dtdr-agents but the run has no request: start "
                "it with Runner.run(agent, input, context=selection.context(input)) or "
                f"selection.run(agent, input) (got a {type(context).__name__})"
            )
        return context

    def step(self, run: DTDRRunContext) -> StepRecord:
        """The step for the run's calls so far (selected once per step, then reused)."""
        if run._pending and not run._awaiting:
            run._fold()
        history = tuple(run.calls)
        last = run.steps[-1] if run.steps else None
        if last is not None and last.history == history and last.query == run.request:
            return last
        step = self.selector.select(run.request, history, previous=last)
        run.steps.append(step)
        return step

    # -------------------------------------------------------------------------------- tools
    def is_enabled(self, name: str) -> Callable[[RunContextWrapper[Any], AgentBase[Any]], bool]:
        """The ``is_enabled`` callable of the catalogue tool `name`.

        Raises:
            UnknownToolError: `name` is not in the catalogue.
        """
        if not self.tools.has(name):
            from dtdr_agents.foundation.errors import UnknownToolError

            raise UnknownToolError(f"{name!r} is not in the retriever's catalogue", (name,))
        return self._enablers.setdefault(name, _Enabler(self, name))

    def enable(self, tool: FunctionTool) -> FunctionTool:
        """A copy of `tool` enabled by this selection (unchanged if the retriever does not rank it).

        Raises:
            ValueError: The tool already has an ``is_enabled`` of its own.
        """
        if not self.tools.has(tool.name):
            return tool
        if tool.is_enabled is not True and not isinstance(tool.is_enabled, _Enabler):
            raise ValueError(
                f"tool {tool.name!r} already has is_enabled={tool.is_enabled!r}: the selection "
                "sets it; drop it or leave the tool out of the catalogue"
            )
        return dataclasses.replace(tool, is_enabled=self.is_enabled(tool.name))

    def enabled_names(self, agent: AgentBase[Any]) -> set[str]:
        """Names of `agent`'s function tools whose ``is_enabled`` is this selection's."""
        return {
            t.name
            for t in agent.tools
            if isinstance(t, FunctionTool)
            and isinstance(t.is_enabled, _Enabler)
            and t.is_enabled.selection is self
        }

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        """A clone of `agent` whose catalogue tools this selection enables, with its hooks.

        Raises:
            ValueError: The agent has hooks that are not `DTDRAgentHooks` (subclass them).
        """
        hooks = agent.hooks
        if hooks is not None and not isinstance(hooks, DTDRAgentHooks):
            raise ValueError(
                f"the agent has hooks ({type(hooks).__name__}): subclass DTDRAgentHooks so the "
                "run's tool calls are recorded"
            )
        tools = [self.enable(t) if isinstance(t, FunctionTool) else t for t in agent.tools]
        return agent.clone(tools=tools, hooks=hooks or self.hooks)

    def tool_filter(self, context: ToolFilterContext, tool: Any) -> bool:
        """A dynamic MCP ``tool_filter``: offer the tool if the step binds it.

        MCP tools the retriever does not rank are offered. An MCP server's filter runs before
        the function tools' checks of a step, never before running a call, so it starts the
        step.
        """
        name = str(getattr(tool, "name", ""))
        if not self.tools.has(name):
            return True
        run = self.run_context_of(context.run_context)
        run._fold()
        return name in self.step(run).bound

    async def run(
        self,
        agent: Agent[Any],
        input: str | list[TResponseInputItem],
        *,
        context: Any = None,
        **runner_kwargs: Any,
    ) -> RunResult:
        """``Runner.run(agent, input, context=self.context(input, context), **runner_kwargs)``."""
        return await Runner.run(agent, input, context=self.context(input, context), **runner_kwargs)
