"""`DTDRFunctionAgent`: a LlamaIndex `FunctionAgent` that re-selects its tools at every step.

LlamaIndex's `FunctionAgent` asks its ``tool_retriever`` with the user message only, so every
step of a run gets the same tools. This agent passes the run's call history (the tool calls in
its scratchpad) to the dtdr-agents retriever before every model call, binds exactly the
selected tools, re-selects once wider when the reply shows the selection was too narrow, and
refuses calls of tools that were not bound (``on_unbound="reject"``). The records of the
current run's steps are kept in the workflow context under ``"tool_selections"``.

LlamaIndex offers a tool to the model under a sanitised name (``ToolMetadata.to_openai_tool``
replaces every character outside ``[a-zA-Z0-9_-]`` with ``_``: ``"météo du jour"`` becomes
``"m_t_o_du_jour"``), and the model calls it by that name. The agent maps the names the model
calls back to the tools' own names (one map, built when the agent is made), so the history,
the bound-tool checks and the tool look-up see the catalogue names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.agent.workflow.agent_context import AgentContext
from llama_index.core.agent.workflow.workflow_events import AgentOutput
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, TextBlock
from llama_index.core.memory import BaseMemory
from llama_index.core.tools import AsyncBaseTool, ToolOutput
from llama_index.core.tools.types import BaseTool
from llama_index.core.workflow import Context
from pydantic import PrivateAttr

from dtdr_agents.foundation.selection import SelectionPolicy
from dtdr_agents.runtime import (
    UNSET,
    AgentMode,
    BindingPolicy,
    Reply,
    StepRecord,
    Unset,
    merge_selection_records,
)
from dtdr_agents.runtime.prompting import TokenCounter
from llama_index_dtdr.retriever import DTDRObjectRetriever, name_map

__all__ = ["RECORDS_KEY", "DTDRFunctionAgent"]

RECORDS_KEY = "tool_selections"
"""Context store key of the current run's step records (`StepRecord.to_record` dicts)."""

_REJECTIONS_KEY = "dtdr_rejections"


def _reply(output: AgentOutput) -> Reply:
    calls = tuple(str(c.tool_name) for c in output.tool_calls)
    return Reply(calls=calls, answered=not calls)


def _with_text(messages: Sequence[ChatMessage], text: str) -> list[ChatMessage]:
    """Add `text` to the leading system message (a new one when there is none)."""
    msgs = list(messages)
    if not text:
        return msgs
    if msgs and msgs[0].role == "system":
        first = msgs[0]
        content = f"{first.content}\n\n{text}" if first.content else text
        return [ChatMessage(role="system", content=content), *msgs[1:]]
    return [ChatMessage(role="system", content=text), *msgs]


class DTDRFunctionAgent(FunctionAgent):
    """A `FunctionAgent` whose tools are re-selected from the request and the calls so far.

    Build it with `from_tools`, or pass a `DTDRObjectRetriever` as ``tool_retriever``. The
    retriever's `BindingPolicy` decides the mask mode, ``cache="append"``, the one wider
    re-selection and what happens to calls of unbound tools. Tools given as ``tools`` are
    bound at every step, besides the selection.

    Raises:
        TypeError: ``tool_retriever`` is not a `DTDRObjectRetriever`.
        InvalidToolError: Two tools reach the model under the same sanitised name.
    """

    _names: dict[str, str] = PrivateAttr(default_factory=dict)
    _static_only: frozenset[str] = PrivateAttr(default_factory=frozenset)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        dtdr = self.dtdr_retriever()
        static: list[BaseTool] = list(self.tools or [])  # type: ignore[arg-type]
        self._names = name_map([*static, *dtdr.tools])
        own = {str(t.metadata.name) for t in static}
        self._static_only = frozenset(own.difference(dtdr.tools_by_name))

    @classmethod
    def from_tools(
        cls,
        tools: Sequence[BaseTool],
        retriever: Any = None,
        *,
        k: int | Unset | None = UNSET,
        policy: SelectionPolicy | None = None,
        binding: BindingPolicy | None = None,
        mode: AgentMode | None = None,
        cache: str | None = None,
        token_counter: TokenCounter | None = None,
        **agent_kwargs: Any,
    ) -> DTDRFunctionAgent:
        """An agent over `tools` ranked by the fitted `retriever`.

        Args:
            tools: The agent's LlamaIndex tools (unique names).
            retriever: A fitted core retriever ranking exactly these tools.
                None: `hybrid` fitted on these tools alone (no demonstrations yet).
            k: Shorthand for ``policy.k`` (default 5).
            policy: The `SelectionPolicy` (every setting of a step), passed on unchanged.
            binding: Deprecated (warns): a `BindingPolicy` whose fields are set on `policy`.
            mode: Shorthand for ``policy.mode``, or ``"set"``.
            cache: Shorthand for ``policy.cache`` (``"append"`` keeps the tools array a
                growing prefix within a run).
            token_counter: Token counter for the prompt figures.
            **agent_kwargs: `FunctionAgent` fields (``llm``, ``system_prompt``, ...).
        """
        tool_retriever = DTDRObjectRetriever(
            tools,
            retriever,
            k=k,
            policy=policy,
            binding=binding,
            mode=mode,
            cache=cache,
            token_counter=token_counter,
        )
        return cls(tool_retriever=tool_retriever, **agent_kwargs)

    def dtdr_retriever(self) -> DTDRObjectRetriever:
        """The agent's `DTDRObjectRetriever`.

        Raises:
            TypeError: ``tool_retriever`` is not one.
        """
        retriever = self.tool_retriever
        if not isinstance(retriever, DTDRObjectRetriever):
            raise TypeError(
                "DTDRFunctionAgent needs tool_retriever=DTDRObjectRetriever(tools, retriever), "
                f"got {type(retriever).__name__}"
            )
        return retriever

    async def get_tools(self, input_str: str | None = None) -> Sequence[AsyncBaseTool]:
        """The static tools, plus the tool named `input_str` (LlamaIndex looks tools up by name).

        The selected tools are bound in `take_step`, where the call history is known.
        """
        tools: list[BaseTool] = list(self.tools or [])  # type: ignore[arg-type]
        named = self.dtdr_retriever().tools_by_name.get(self.tool_name(input_str or ""))
        if named is not None:
            tools.append(named)
        return self._ensure_tools_are_async(tools)

    def tool_name(self, called: str) -> str:
        """The own name of the tool the model called `called` (`called` when unknown)."""
        return self._names.get(called, called)

    def _history(self, messages: Sequence[ChatMessage]) -> tuple[str, ...]:
        """The tool calls of the assistant messages, in order, by the tools' own names.

        Calls of static tools (``tools=``) outside the retriever's catalogue are left out:
        the retriever does not rank them.
        """
        read = getattr(self.llm, "get_tool_calls_from_response", None)
        if read is None:
            return ()
        names: list[str] = []
        for message in messages:
            if message.role == "assistant":
                calls = read(ChatResponse(message=message), error_on_no_tool_call=False)
                names.extend(self.tool_name(str(c.tool_name)) for c in calls or ())
        return tuple(n for n in names if n not in self._static_only)

    def _named(self, output: AgentOutput) -> AgentOutput:
        """`output` with its tool calls renamed to the tools' own names (LlamaIndex runs them)."""
        calls = [
            c.model_copy(update={"tool_name": self.tool_name(str(c.tool_name))})
            for c in output.tool_calls
        ]
        return output.model_copy(update={"tool_calls": calls})

    async def take_step(
        self,
        ctx: AgentContext,
        llm_input: list[ChatMessage],
        tools: Sequence[AsyncBaseTool],
        memory: BaseMemory,
    ) -> AgentOutput:
        """Select the tools for this step from the request and the run's calls, then call."""
        dtdr = self.dtdr_retriever()
        selector = dtdr.selector
        scratchpad: list[ChatMessage] = list(await ctx.store.get(self.scratchpad_key, default=[]))
        query = str(await ctx.store.get("user_msg_str", default="") or "").strip()
        if not query:
            users = [m for m in llm_input if m.role == "user"]
            query = " ".join(
                b.text for b in (users[-1].blocks if users else []) if isinstance(b, TextBlock)
            ).strip()
        if not query:
            raise ValueError("the run has no user message for the tool retriever")
        records: list[dict[str, Any]] = list(await ctx.store.get(RECORDS_KEY, default=[]))
        previous = StepRecord.from_record(records[-1]) if records else None
        step = await selector.aselect(query, self._history(scratchpad), previous=previous)
        if step.prefix_kept is None:  # a new run (turn)
            await ctx.store.set(_REJECTIONS_KEY, 0)
        static = list(tools)

        async def call(s: StepRecord) -> AgentOutput:
            await ctx.store.set(self.scratchpad_key, list(scratchpad))  # drop a discarded reply
            bound = [*static, *self._ensure_tools_are_async(dtdr.tools_for(s.bound))]
            output = await FunctionAgent.take_step(
                self, ctx, _with_text(llm_input, s.system_text), bound, memory
            )
            return self._named(output)

        output, steps = await selector.arun_step(step, call, _reply)
        records = merge_selection_records(records, [s.to_record() for s in steps])
        await ctx.store.set(RECORDS_KEY, records)
        rejections = int(await ctx.store.get(_REJECTIONS_KEY, default=0))
        selector.check_unbound(steps[-1], _reply(output), rejections)
        return output

    async def _call_tool(
        self, ctx: Context, tool: AsyncBaseTool, tool_input: dict[str, Any]
    ) -> ToolOutput:
        """Run a tool call, refusing tools this step did not bind (``on_unbound="reject"``)."""
        name = tool.metadata.get_name()
        records = await ctx.store.get(RECORDS_KEY, default=[])
        if records and name in self.dtdr_retriever().tools_by_name:
            bound = StepRecord.from_record(records[-1]).bound
            refused = self.dtdr_retriever().selector.refusal(name, bound)
            if refused is not None:
                count = int(await ctx.store.get(_REJECTIONS_KEY, default=0))
                await ctx.store.set(_REJECTIONS_KEY, count + 1)
                return ToolOutput(
                    content=refused,
                    tool_name=name,
                    raw_input=tool_input,
                    raw_output=None,
                    is_error=True,
                )
        return await super()._call_tool(ctx, tool, tool_input)
