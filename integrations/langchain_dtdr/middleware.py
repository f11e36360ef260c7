"""LangChain v1 agent middleware: rewrite the model request's tools at every step.

Use with `langchain.agents.create_agent`::

    from langchain.agents import create_agent
    from langchain_dtdr import DTDRMiddleware

    agent = create_agent(model, tools, middleware=[DTDRMiddleware(retriever, k=3)])

Before every model call (`wrap_model_call` / `awrap_model_call`) the middleware reads the
request (the first human message of the current turn) and the tool-call history (names of the
tool calls in the AI messages since then), ranks the tools with the retriever, and overrides
the request's tools (hard masks) or system message (soft and weighted masks). The selection
record of every call is appended to the ``tool_selections`` state key, and the model run gets
it as metadata. Requires the ``langchain`` package (``pip install 'dtdr-agents[langchain]'``).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any, NotRequired, Unpack

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import SystemMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.types import Command

from dtdr_agents.runtime import (
    OnUnbound,
    SelectionKeywords,
    StepRecord,
    check_tool_list,
    merge_selection_records,
    resolve_policy,
    unwrap_retriever,
)
from dtdr_agents.runtime.prompting import TokenCounter
from dtdr_agents.store import Reloader
from langchain_dtdr.messages import current_turn
from langchain_dtdr.selector import (
    ToolLike,
    ToolSelector,
    count_rejections,
    refuse_tool_call,
    reply_of,
)

__all__ = ["DTDRMiddleware", "DTDRMiddlewareState", "OnUnbound"]


class DTDRMiddlewareState(AgentState[Any]):
    """Agent state with the per-call tool selection records."""

    tool_selections: NotRequired[Annotated[list[dict[str, Any]], merge_selection_records]]


def _tool_name(tool: Any) -> str | None:
    """The name of a request tool that the retriever ranks, or None for provider built-ins."""
    if isinstance(tool, BaseTool):
        return tool.name
    if isinstance(tool, Mapping):
        fn = tool.get("function")
        if isinstance(fn, Mapping):
            name = fn.get("name")
        elif tool.get("type", "function") == "function":
            name = tool.get("name")
        else:  # e.g. {"type": "web_search_preview"}: always passed through
            name = None
        return str(name) if name else None
    return None


def _last_step(state: Any) -> StepRecord | None:
    records = state.get("tool_selections") if isinstance(state, Mapping) else None
    return StepRecord.from_record(records[-1]) if records else None


class DTDRMiddleware(AgentMiddleware[DTDRMiddlewareState, Any, Any]):
    """Dynamic tool retrieval for `create_agent`: bind only the tools ranked for the next step.

    Args:
        retriever: A fitted core retriever (any `make_retriever` id) or a `DTDRRetriever`, a
            `store.Reloader`, or None with no demonstrations yet: `hybrid` fitted on the
            agent's tools alone.
        tools: The agent's tools, to validate the catalogue when the middleware is built;
            otherwise it is checked at the first model call.
        token_counter: Token counter for the prompt figures.
        **selection: ``k``, ``policy``, ``mode``, ``cache`` (and the deprecated
            ``binding``): `dtdr_agents.runtime.SelectionKeywords`.

    Tools given to the request as provider-native dicts without a name (e.g. a provider's
    built-in search tool) are always passed through, first.
    """

    state_schema = DTDRMiddlewareState

    def __init__(
        self,
        retriever: Any = None,
        *,
        tools: Sequence[ToolLike] | None = None,
        token_counter: TokenCounter | None = None,
        **selection: Unpack[SelectionKeywords],
    ) -> None:
        super().__init__()
        # a store.Reloader stays itself: the step selector takes up new versions between steps
        # None: hybrid fitted on the request's tools alone, by each step selector built
        self.retriever = (
            retriever
            if retriever is None or isinstance(retriever, Reloader)
            else unwrap_retriever(retriever)
        )
        self.policy = resolve_policy(**selection)
        self.token_counter = token_counter
        self._selector: ToolSelector | None = None
        self._selector_key: tuple[str, ...] = ()
        self._lock = threading.Lock()
        if tools is not None:
            self._selector_for(check_tool_list(tools))

    @property
    def name(self) -> str:
        """Middleware name."""
        return "DTDRMiddleware"

    # ---------------------------------------------------------------------------- helpers
    def _selector_for(self, tools: Sequence[BaseTool | Mapping[str, Any] | Any]) -> ToolSelector:
        named = [t for t in tools if _tool_name(t) is not None]
        key = tuple(str(_tool_name(t)) for t in named)
        with self._lock:
            if self._selector is None or key != self._selector_key:
                self._selector = ToolSelector(
                    named,
                    self.retriever,
                    policy=self.policy,
                    token_counter=self.token_counter,
                )
                self._selector_key = key
            return self._selector

    def _start(self, request: ModelRequest[Any]) -> tuple[ToolSelector, str, tuple[str, ...]]:
        selector = self._selector_for(request.tools)
        turn = current_turn(request.messages)
        return selector, turn.request, turn.history

    @staticmethod
    def _apply(request: ModelRequest[Any], step: StepRecord) -> ModelRequest[Any]:
        by_name = {n: t for t in request.tools if (n := _tool_name(t)) is not None}
        builtins = [t for t in request.tools if _tool_name(t) is None]
        overrides: dict[str, Any] = {"tools": [*builtins, *(by_name[n] for n in step.bound)]}
        if step.system_text:
            merged = ToolSelector.prepare_messages(
                [request.system_message] if request.system_message else [], step.system_text
            )[0]
            assert isinstance(merged, SystemMessage)
            overrides["system_message"] = merged
        model = request.model
        if isinstance(model, BaseChatModel):
            overrides["model"] = model.model_copy(
                update={"metadata": {**(model.metadata or {}), **step.metadata()}}
            )
        return request.override(**overrides)

    def _finish(
        self,
        selector: ToolSelector,
        request: ModelRequest[Any],
        response: ModelResponse[Any],
        steps: list[StepRecord],
    ) -> ExtendedModelResponse[Any]:
        rejections = count_rejections(request.messages)
        selector.check_unbound(steps[-1], reply_of(response.result), rejections)
        return ExtendedModelResponse(
            model_response=response,
            command=Command(update={"tool_selections": [s.to_record() for s in steps]}),
        )

    # ------------------------------------------------------------------------------ hooks
    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        """Bind the tools selected for this step, widen once if needed, then call the model."""
        if not request.tools:
            return handler(request)
        selector, query, history = self._start(request)
        step = selector.select(query, history, previous=_last_step(request.state))
        response, steps = selector.run_step(
            step,
            lambda s: handler(self._apply(request, s)),
            lambda r: reply_of(r.result),
        )
        return self._finish(selector, request, response, steps)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        """Async `wrap_model_call`."""
        if not request.tools:
            return await handler(request)
        selector, query, history = self._start(request)
        step = await selector.aselect(query, history, previous=_last_step(request.state))
        response, steps = await selector.arun_step(
            step,
            lambda s: handler(self._apply(request, s)),
            lambda r: reply_of(r.result),
        )
        return self._finish(selector, request, response, steps)

    def _rejection(self, request: ToolCallRequest) -> ToolMessage | None:
        step = _last_step(request.state)
        bound = None if step is None else step.bound
        return refuse_tool_call(self.policy.on_unbound, request.tool_call, bound)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Answer calls of tools that were not bound with an error message (``"reject"``)."""
        rejected = self._rejection(request)
        return rejected if rejected is not None else handler(request)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async `wrap_tool_call`."""
        rejected = self._rejection(request)
        return rejected if rejected is not None else await handler(request)
