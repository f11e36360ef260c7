"""A LangGraph ReAct agent that re-selects its tools before every model call.

Graph: ``START -> select_tools -> model -> (tools -> select_tools -> model ...) -> END``.

* ``select_tools`` reads the request (the first human message of the current turn) and the
  history (names of the tool calls in AI messages since then) from state, ranks the tools with
  the retriever and writes the selected names to ``selected_tools`` and a JSON record of why
  to ``tool_selections``.
* ``model`` binds exactly ``selected_tools`` (catalogue order; all tools in the soft modes,
  with the guidance text in the system message), calls the model, and re-selects once with a
  wider ``k`` when the model calls a tool that was not bound or answers while the retriever
  expects more calls.
* ``tools`` is LangGraph's `ToolNode`; a call of a tool that was not bound is answered with an
  error message (``on_unbound="reject"``), run (``"allow"``), or stops the run (``"raise"``).

Every node has a sync and an async implementation; state holds only messages, strings and
JSON-like dicts, so any checkpointer can store it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any, NotRequired, Unpack

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool
from langchain_core.tools import tool as as_tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from dtdr_agents.runtime import (
    OnUnbound,
    SelectionKeywords,
    StepRecord,
    check_on_unbound,
    check_tool_list,
    merge_selection_records,
    resolve_policy,
)
from dtdr_agents.runtime.prompting import TokenCounter
from dtdr_agents.runtime.recording import DemonstrationRecorder
from langchain_dtdr.messages import current_turn
from langchain_dtdr.recording import record_turn
from langchain_dtdr.selector import (
    ToolSelector,
    count_rejections,
    refuse_tool_call,
    reply_of,
)

__all__ = [
    "DTDRAgentState",
    "OnUnbound",
    "create_dtdr_agent",
    "create_model_node",
    "create_record_node",
    "create_select_tools_node",
    "create_tool_node",
]


class DTDRAgentState(MessagesState):
    """State of a DTDR agent.

    Attributes:
        messages: The conversation (`add_messages` reducer).
        selected_tools: Names of the tools bound at the current step (in the order sent).
        tool_selections: JSON records of the current turn's selections
            (`StepRecord.to_record`): what was bound and why (retriever method, cluster,
            Markov key, probability, fallback, token figures).
    """

    selected_tools: NotRequired[list[str]]
    tool_selections: NotRequired[Annotated[list[dict[str, Any]], merge_selection_records]]


def _messages(state: Mapping[str, Any]) -> list[Any]:
    if not isinstance(state, Mapping) or "messages" not in state:
        raise ValueError("the DTDR agent nodes need a dict state with a 'messages' key")
    return list(state["messages"])


def _last_step(state: Mapping[str, Any]) -> StepRecord | None:
    """The last step recorded in state (with the bound list state holds), or None."""
    records = state.get("tool_selections") or []
    if not records:
        return None
    step = StepRecord.from_record(records[-1])
    bound = state.get("selected_tools")
    if bound is not None and tuple(bound) != step.bound:
        step = dataclasses.replace(step, bound=tuple(bound))
    return step


def _update(steps: Sequence[StepRecord]) -> dict[str, Any]:
    return {
        "selected_tools": list(steps[-1].bound),
        "tool_selections": [s.to_record() for s in steps],
    }


# ----------------------------------------------------------------------------- select tools
def create_select_tools_node(selector: ToolSelector) -> RunnableLambda[Any, dict[str, Any]]:
    """The ``select_tools`` node: rank and select the tools for the next model call.

    Args:
        selector: The `ToolSelector` (catalogue, retriever, policies).

    Returns:
        A runnable (sync and async) that returns ``{"selected_tools", "tool_selections"}``.
    """

    def select_tools(state: Mapping[str, Any]) -> dict[str, Any]:
        turn = current_turn(_messages(state))
        return _update([selector.select(turn.request, turn.history, previous=_last_step(state))])

    async def aselect_tools(state: Mapping[str, Any]) -> dict[str, Any]:
        turn = current_turn(_messages(state))
        step = await selector.aselect(turn.request, turn.history, previous=_last_step(state))
        return _update([step])

    return RunnableLambda(select_tools, afunc=aselect_tools, name="select_tools")


# ------------------------------------------------------------------------------------ model
def create_model_node(
    model: BaseChatModel,
    selector: ToolSelector,
    *,
    system_prompt: str | None = None,
) -> RunnableLambda[Any, dict[str, Any]]:
    """The model node: bind exactly ``state["selected_tools"]`` and call the model.

    The system message gets `system_prompt` first, then the step's guidance text (soft and
    weighted masks). The model run's metadata carries the ``dtdr_*`` record of the step. In
    the hard modes, when the reply calls a tool that was not bound, or answers while the
    retriever expects more calls, the node re-selects once with the wider policy and calls
    the model again (`StepSelector.run_step`; the first reply is discarded; in a
    ``stream_mode="messages"`` stream its tokens still appear, with ``dtdr_widened`` False in
    their metadata and True for the retry). The selector's `SelectionPolicy` decides what
    happens to calls of unbound tools (`StepSelector.check_unbound`).

    Args:
        model: A chat model that supports `bind_tools`.
        selector: The `ToolSelector` the ``select_tools`` node uses.
        system_prompt: A static system prompt.

    Returns:
        A runnable (sync and async) returning the state update.
    """

    def prepare(state: Mapping[str, Any]) -> tuple[StepRecord, list[Any]]:
        step = _last_step(state)
        if step is None or "selected_tools" not in state:
            raise ValueError(
                "the model node needs 'selected_tools' and 'tool_selections' in state: run the "
                "select_tools node before it"
            )
        return step, _messages(state)

    def finish(response: Any, steps: list[StepRecord], messages: list[Any]) -> dict[str, Any]:
        selector.check_unbound(steps[-1], reply_of(response), count_rejections(messages))
        out: dict[str, Any] = {"messages": [response]}
        if len(steps) > 1:
            out.update(_update(steps[1:]))
        return out

    def call_model(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        step, messages = prepare(state)

        def call(s: StepRecord) -> Any:
            prompt = selector.prepare_messages(messages, system_prompt, s.system_text)
            return selector.bind(model, s.bound, s.metadata()).invoke(prompt, config)

        response, steps = selector.run_step(step, call, reply_of)
        return finish(response, steps, messages)

    async def acall_model(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        step, messages = prepare(state)

        async def call(s: StepRecord) -> Any:
            prompt = selector.prepare_messages(messages, system_prompt, s.system_text)
            return await selector.bind(model, s.bound, s.metadata()).ainvoke(prompt, config)

        response, steps = await selector.arun_step(step, call, reply_of)
        return finish(response, steps, messages)

    return RunnableLambda(call_model, afunc=acall_model, name="model")


# ------------------------------------------------------------------------------------ tools
def create_tool_node(
    tools: Sequence[BaseTool | Callable[..., Any]],
    *,
    on_unbound: OnUnbound = "reject",
    handle_tool_errors: Any = True,
    name: str = "tools",
) -> ToolNode:
    """LangGraph's `ToolNode` over `tools`, guarding against calls of unbound tools.

    Args:
        tools: Every tool of the agent.
        on_unbound: ``"reject"`` answers a call of a tool outside ``state["selected_tools"]``
            with an error tool message; ``"allow"`` and ``"raise"`` run it.
        handle_tool_errors: Passed to `ToolNode`.
        name: Node name.

    Returns:
        The `ToolNode`.
    """
    on_unbound = check_on_unbound(on_unbound)

    def rejection(request: ToolCallRequest) -> ToolMessage | None:
        state = request.state
        bound = state.get("selected_tools") if isinstance(state, Mapping) else None
        return refuse_tool_call(on_unbound, request.tool_call, bound)

    def guard(
        request: ToolCallRequest, execute: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
    ) -> ToolMessage | Command[Any]:
        rejected = rejection(request)
        return rejected if rejected is not None else execute(request)

    async def aguard(
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        rejected = rejection(request)
        return rejected if rejected is not None else await execute(request)

    return ToolNode(
        list(tools),
        name=name,
        handle_tool_errors=handle_tool_errors,
        wrap_tool_call=guard,
        awrap_tool_call=aguard,
    )


# ----------------------------------------------------------------------------------- record
def create_record_node(
    recorder: DemonstrationRecorder, *, skip_errors: bool = True
) -> RunnableLambda[Any, dict[str, Any]]:
    """A node that appends the finished turn to `recorder` (learning from your own runs).

    Args:
        recorder: The `DemonstrationRecorder`.
        skip_errors: Skip turns where a tool returned an error.
    """

    def record(state: Mapping[str, Any]) -> dict[str, Any]:
        record_turn(recorder, _messages(state), skip_errors=skip_errors)
        return {}

    return RunnableLambda(record, name="record")


# ---------------------------------------------------------------------------------- factory
def _as_tools(tools: Sequence[Any]) -> list[BaseTool]:
    out: list[BaseTool] = []
    for pos, t in enumerate(check_tool_list(tools)):
        if isinstance(t, BaseTool):
            out.append(t)
        elif callable(t) and not isinstance(t, Mapping):
            out.append(as_tool(t))
        else:
            raise TypeError(
                f"tools[{pos}] must be a LangChain tool or a function (the tool node runs it), "
                f"got {type(t).__name__}"
            )
    return out


def _check_state_schema(schema: type[Any]) -> None:
    keys = set(getattr(schema, "__annotations__", {})) | set(getattr(schema, "model_fields", {}))
    for base in getattr(schema, "__mro__", ()):
        keys |= set(getattr(base, "__annotations__", {}))
    missing = sorted({"messages", "selected_tools", "tool_selections"} - keys)
    if missing:
        raise ValueError(
            f"state_schema {getattr(schema, '__name__', schema)!r} lacks the keys {missing}; "
            "extend langgraph_dtdr.DTDRAgentState"
        )


def create_dtdr_agent(
    model: BaseChatModel,
    tools: Sequence[BaseTool | Callable[..., Any]],
    retriever: Any = None,
    *,
    system_prompt: str | None = None,
    recorder: DemonstrationRecorder | None = None,
    state_schema: type[Any] = DTDRAgentState,
    handle_tool_errors: Any = True,
    token_counter: TokenCounter | None = None,
    **selection: Unpack[SelectionKeywords],
) -> StateGraph[Any, Any, Any, Any]:
    """Build a ReAct agent graph that binds only the tools ranked for the next step.

    Example:
        .. code-block:: python

            graph = create_dtdr_agent(model, tools, retriever, k=3).compile()
            graph.invoke({"messages": [("user", "Email Bob the summary of report.pdf")]})

    Args:
        model: A chat model that supports `bind_tools`.
        tools: The agent's tools (LangChain tools or functions); names must be unique.
        retriever: A fitted core retriever (any id of `dtdr_agents.make_retriever`: DTDR-C,
            DTDR-L, DR, LR, BM25, QTS, ...) or a `langchain_dtdr.DTDRRetriever`. It must rank
            exactly these tools; swapping it is the only change needed to compare retrievers.
            None (no demonstrations yet): `hybrid` fitted on these tools alone, history-aware
            from the first request.
        system_prompt: A static system prompt (kept first in the system message).
        recorder: Append each finished turn to this `DemonstrationRecorder` (a ``record``
            node runs before END).
        state_schema: The state schema; must have the keys of `DTDRAgentState`.
        handle_tool_errors: Passed to LangGraph's `ToolNode`.
        token_counter: Token counter for the prompt figures in the records.
        **selection: ``k``, ``policy`` (every setting of a step, passed on unchanged to the
            nodes), ``mode``, ``cache`` (and the deprecated ``binding``):
            `dtdr_agents.runtime.SelectionKeywords`.

    Returns:
        The uncompiled `StateGraph` (compile it with your checkpointer, store, ...).

    Raises:
        TypeError: `model` cannot bind tools, or a tool is not a LangChain tool or function.
        InvalidToolError: Duplicate tool names.
        CatalogueMismatchError: The retriever was fitted on another catalogue.
        UnknownToolError: ``policy.always_include`` names a tool that is not in `tools`.
        NotFittedError: The retriever is not fitted.
        ValueError: A shorthand contradicts `policy` / `binding`, an invalid option, or a
            `state_schema` without the keys of `DTDRAgentState`.
    """
    if not isinstance(model, BaseChatModel):
        raise TypeError(
            f"model must be a LangChain chat model (BaseChatModel), got {type(model).__name__}"
        )
    if type(model).bind_tools is BaseChatModel.bind_tools:
        raise TypeError(
            f"{type(model).__name__} does not implement bind_tools, so it cannot be given "
            "tools (for offline tests use langchain_dtdr.testing.ScriptedChatModel)"
        )
    sel_policy = resolve_policy(**selection)
    _check_state_schema(state_schema)
    lc_tools = _as_tools(tools)
    selector = ToolSelector(lc_tools, retriever, policy=sel_policy, token_counter=token_counter)
    after_answer = "record" if recorder is not None else END

    def route(state: Mapping[str, Any]) -> str:
        last = _messages(state)[-1] if _messages(state) else None
        if isinstance(last, AIMessage) and last.tool_calls:
            return "tools"
        return after_answer

    graph: StateGraph[Any, Any, Any, Any] = StateGraph(state_schema)
    graph.add_node("select_tools", create_select_tools_node(selector))
    graph.add_node(
        "model",
        create_model_node(model, selector, system_prompt=system_prompt),
    )
    graph.add_node(
        "tools",
        create_tool_node(
            lc_tools,
            on_unbound=sel_policy.on_unbound,
            handle_tool_errors=handle_tool_errors,
        ),
    )
    graph.add_edge(START, "select_tools")
    graph.add_edge("select_tools", "model")
    graph.add_conditional_edges("model", route, ["tools", after_answer])
    graph.add_edge("tools", "select_tools")
    if recorder is not None:
        graph.add_node("record", create_record_node(recorder))
        graph.add_edge("record", END)
    return graph
