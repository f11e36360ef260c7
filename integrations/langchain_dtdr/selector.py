"""The LangChain side of the integration runtime (`dtdr_agents.runtime`).

`ToolSelector` is the core `StepSelector` plus what LangChain needs: the agent's tool objects
(bound in the order of the step's ``bound`` list), `bind` for chat models, system-message
merging, reading a model reply (`reply_of`) and counting rejected calls in a message list.
The LangGraph nodes and the middleware are thin shells over it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolCall, ToolMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool

from dtdr_agents.foundation.errors import UnknownToolError
from dtdr_agents.foundation.selection import SelectionPolicy
from dtdr_agents.runtime import (
    BindingPolicy,
    CatalogueMismatchError,
    Reply,
    StepRecord,
    StepSelector,
    UnboundToolCallError,
    fitted_tools,
    merge_selection_records,
    record_metadata,
    unwrap_retriever,
)
from dtdr_agents.runtime.guard import OnUnbound, refusal, rejection_text
from dtdr_agents.runtime.prompting import TokenCounter

__all__ = [
    "REJECTED_MARK",
    "CatalogueMismatchError",
    "ToolLike",
    "ToolSelector",
    "ToolStep",
    "UnboundToolCallError",
    "count_rejections",
    "fitted_tools",
    "merge_selection_records",
    "record_metadata",
    "refuse_tool_call",
    "rejection_message",
    "reply_of",
    "response_message",
    "unbound_tool_message",
    "unwrap_retriever",
]

ToolLike = BaseTool | Mapping[str, Any] | Callable[..., Any]
"""A tool as LangChain accepts it: a `BaseTool`, an OpenAI-style schema dict or a function."""

ToolStep = StepRecord
"""The typed step record (`dtdr_agents.runtime.StepRecord`), under its LangChain-side name."""

REJECTED_MARK = "dtdr_rejected"
"""Key of the artifact that marks the tool messages answering calls of unbound tools."""


class ToolSelector(StepSelector):
    """Chooses the tools to bind at each step of a LangChain / LangGraph agent.

    Args:
        tools: The agent's tools (`BaseTool`, OpenAI schema dicts or functions), in catalogue
            order. Names must be unique.
        retriever: A fitted core retriever (any id of `make_retriever`) or a `DTDRRetriever`.
            None: `hybrid` fitted on these tools alone (no demonstrations yet).
            It must rank exactly this catalogue (same names).
        policy: The `SelectionPolicy`: selection, mask mode, cache, widening, unbound calls
            (default `dtdr_agents.runtime.DEFAULT_POLICY`).
        binding: Deprecated (warns): a `BindingPolicy` whose fields are set on `policy`.
        token_counter: Token counter for the prompt figures.

    Raises:
        See `dtdr_agents.runtime.StepSelector`.
    """

    def __init__(
        self,
        tools: Sequence[ToolLike],
        retriever: Any = None,
        *,
        policy: SelectionPolicy | None = None,
        binding: BindingPolicy | None = None,
        token_counter: TokenCounter | None = None,
    ) -> None:
        self.tools: list[ToolLike] = list(tools)
        super().__init__(
            self.tools, retriever, policy=policy, binding=binding, token_counter=token_counter
        )
        self._by_name: dict[str, ToolLike] = {
            t.name: obj for t, obj in zip(self.toolset, self.tools, strict=True)
        }

    def tools_for(self, names: Sequence[str]) -> list[ToolLike]:
        """The agent's tools called `names`, in the order given.

        Raises:
            UnknownToolError: A name is not one of the agent's tools.
        """
        missing = sorted(set(names).difference(self._by_name))
        if missing:
            raise UnknownToolError(
                f"cannot bind tools that are not among the agent's tools: {missing}",
                tuple(missing),
            )
        return [self._by_name[n] for n in names]

    def bind(
        self,
        model: BaseChatModel,
        names: Sequence[str],
        metadata: Mapping[str, Any] | None = None,
    ) -> Runnable[LanguageModelInput, BaseMessage]:
        """`model` with exactly the tools `names` bound (in that order) and run metadata."""
        tools = [dict(t) if isinstance(t, Mapping) else t for t in self.tools_for(names)]
        bound: Runnable[LanguageModelInput, BaseMessage] = (
            model.bind_tools(tools) if tools else model
        )
        if metadata:
            bound = bound.with_config(metadata=dict(metadata))
        return bound

    @staticmethod
    def prepare_messages(messages: Sequence[BaseMessage], *texts: str | None) -> list[BaseMessage]:
        """Add `texts` (system prompt, guidance) to the system message of `messages`.

        An existing leading system message is kept first and extended, so a static system
        prompt stays a stable prefix; otherwise a new system message is put first.
        """
        parts = [t for t in texts if t]
        msgs = list(messages)
        if not parts:
            return msgs
        extra = "\n\n".join(parts)
        if msgs and isinstance(msgs[0], SystemMessage):
            first = msgs[0]
            if isinstance(first.content, str):
                content: Any = f"{first.content}\n\n{extra}" if first.content else extra
            else:
                content = [*first.content, {"type": "text", "text": extra}]
            return [SystemMessage(content=content), *msgs[1:]]
        return [SystemMessage(content=extra), *msgs]


def reply_of(result: Any) -> Reply | None:
    """What the runtime reads of a model result (a message or a list of messages)."""
    message = response_message(result)
    if message is None:
        return None
    calls = tuple(str(c["name"]) for c in message.tool_calls or ())
    return Reply(calls=calls, answered=not calls and not message.invalid_tool_calls)


def response_message(result: Any) -> AIMessage | None:
    """The AI message of a model result (a message, or a list of messages), if any."""
    if isinstance(result, AIMessage):
        return result
    if isinstance(result, list):
        for item in result:
            if isinstance(item, AIMessage):
                return item
    return None


def unbound_tool_message(call: ToolCall | Mapping[str, Any], bound: Sequence[str]) -> ToolMessage:
    """The error tool message answering a call of a tool that was not bound at this step."""
    return rejection_message(call, rejection_text(str(call["name"]), bound))


def rejection_message(call: ToolCall | Mapping[str, Any], text: str) -> ToolMessage:
    """The error tool message answering `call` with `text` (marked as a rejection)."""
    name = str(call["name"])
    return ToolMessage(
        content=text,
        name=name,
        tool_call_id=str(call.get("id") or ""),
        status="error",
        artifact={REJECTED_MARK: True},
    )


def refuse_tool_call(
    on_unbound: OnUnbound, call: ToolCall | Mapping[str, Any], bound: Sequence[str] | None
) -> ToolMessage | None:
    """The error tool message refusing `call` (`dtdr_agents.runtime.refusal`), or None.

    The one tool-call guard of the LangGraph tool node and the LangChain middleware.
    """
    text = refusal(on_unbound, str(call["name"]), bound)
    return None if text is None else rejection_message(call, text)


def count_rejections(messages: Sequence[BaseMessage]) -> int:
    """Calls of unbound tools rejected in the current turn (since the last human message)."""
    count = 0
    for message in reversed(messages):
        if message.type == "human":
            break
        artifact = getattr(message, "artifact", None)
        if message.type == "tool" and isinstance(artifact, Mapping) and artifact.get(REJECTED_MARK):
            count += 1
    return count
