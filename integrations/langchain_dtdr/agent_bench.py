"""The contestants of the live-agent benchmark (`dtdr-agents agent-bench`), on LangChain.

Every contestant runs a real LangChain v1 / LangGraph agent with the same `ChatOpenAI`
object, the same system prompt and the same step limit; only how tools reach the model
differs:

* ``all-tools``: `create_agent` with every tool bound.
* ``bigtool``: langgraph-bigtool's agent graph (`create_bigtool_graph`, its ``graph.py``
  loop followed line by line, see there), its store embedding the tool descriptions with
  our encoder; ``retrieve_tools`` returns ``k`` tools.
* ``llm-selector``: `create_agent` with LangChain's `LLMToolSelectorMiddleware`
  (``max_tools=k``), the selection asked of the same local model.
* ``search``: the model sees ``search_tools`` plus the tools its searches loaded, BM25
  behind the search (the MCP proxy's pattern, `ToolSearchBackend`, query only, as the
  Anthropic BM25 tool search).
* ``dtdr``, ``dtdr@0demos``, ``bm25``, ``dtdr+append``: `create_agent` with `DTDRMiddleware`
  (``hybrid`` fitted on the training split, on none, ``bm25``, and ``hybrid`` with
  ``cache="append"``).

Each chat model reaches the server through `BenchTransport`, an httpx transport handing the
request body to the benchmark's `BenchEndpoint` (cache, retries, replay, step limit).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Annotated, Any

import httpx
from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    LLMToolSelectorMiddleware,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages import ToolMessage as LCToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, MessagesState, StateGraph
from langgraph.prebuilt import InjectedStore, ToolNode
from langgraph.store.base import BaseStore
from langgraph.types import Send

from dtdr_agents.datasets import Dataset
from dtdr_agents.evaluation.agent_bench import (
    AGENT,
    CONTESTANT_IDS,
    RETRIEVE_TOOL,
    SEARCH_TOOL,
    SELECTOR,
    AgentTask,
    BenchEndpoint,
)
from dtdr_agents.evaluation.bench import build_retriever
from dtdr_agents.foundation.encoders import Encoder
from dtdr_agents.foundation.types import Tool, Toolset
from dtdr_agents.runtime.tool_search import ToolSearchBackend
from langchain_dtdr.bigtool import bigtool_store
from langchain_dtdr.middleware import DTDRMiddleware

__all__ = [
    "CONTESTANTS",
    "BenchTransport",
    "GraphContestant",
    "bench_chat_model",
    "create_bigtool_graph",
    "make_contestants",
]

CONTESTANTS = CONTESTANT_IDS
"""Every contestant id, in the order the report lists them."""

PLACEHOLDER_URL = "http://agent-bench.invalid/v1"
"""The clients' base URL: never dialled, `BenchTransport` answers every request."""

RECURSION_LIMIT = 10_000
"""LangGraph's bound on graph steps: the endpoint's step limit stops a run first."""


class BenchTransport(httpx.BaseTransport):
    """An httpx transport that answers chat-completions requests through a `BenchEndpoint`.

    Args:
        endpoint: The benchmark's endpoint.
        role: `AGENT` (counts toward the step limit) or `SELECTOR`.
    """

    def __init__(self, endpoint: BenchEndpoint, role: str = AGENT) -> None:
        self.endpoint = endpoint
        self.role = role

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Answer one request (its JSON body) with the endpoint's chat completion."""
        body = json.loads(request.read())
        return httpx.Response(200, json=self.endpoint.complete(body, self.role), request=request)


def bench_chat_model(endpoint: BenchEndpoint, role: str = AGENT) -> ChatOpenAI:
    """A `ChatOpenAI` (greedy, no retries of its own) whose requests go to `endpoint`."""
    return ChatOpenAI(
        model=endpoint.model,
        base_url=PLACEHOLDER_URL,
        api_key="agent-bench",  # type: ignore[arg-type]
        temperature=0.0,
        max_retries=0,
        http_client=httpx.Client(transport=BenchTransport(endpoint, role)),
        http_socket_options=(),  # our transport dials nothing: no socket options to apply
    )


class _Current:
    """The task of the run in progress (the simulated tools read its results)."""

    task: AgentTask | None = None

    def result(self, name: str, arguments: Mapping[str, Any]) -> str:
        if self.task is None:
            raise RuntimeError("a benchmark tool was called outside a run")
        return self.task.tool_result(name, arguments)


def simulated_tools(tools: Toolset, current: _Current) -> list[BaseTool]:
    """LangChain tools with the catalogue's schemas returning `AgentTask.tool_result`."""

    def make(tool: Tool) -> BaseTool:
        def run(**kwargs: Any) -> str:
            return current.result(tool.name, kwargs)

        return StructuredTool.from_function(
            func=run,
            name=tool.name,
            description=tool.description,
            args_schema=dict(tool.parameters),
        )

    return [make(t) for t in tools]


class GraphContestant:
    """A contestant that runs a compiled LangGraph agent (``messages`` state) per task.

    Args:
        name: The contestant's id.
        graph: The compiled graph (`create_agent`'s, or `create_bigtool_graph` compiled).
        current: The shared run holder its tools read.
        binds_all: Whether its prompts carry every tool's schema.
        meta_tools: Its tools that are not catalogue tools.
        system_in_messages: Put the system prompt in the input messages (graphs without a
            ``system_prompt`` option of their own, such as bigtool's).
    """

    def __init__(
        self,
        name: str,
        graph: Any,
        current: _Current,
        *,
        binds_all: bool = False,
        meta_tools: frozenset[str] = frozenset(),
        system_in_messages: bool = False,
    ) -> None:
        self.name = name
        self.graph = graph
        self.current = current
        self.binds_all = binds_all
        self.meta_tools = meta_tools
        self.system_in_messages = system_in_messages

    def run(self, task: AgentTask) -> None:
        """Run the agent on `task` (its model calls go through the endpoint)."""
        messages: list[BaseMessage] = [HumanMessage(task.query)]
        if self.system_in_messages:
            messages.insert(0, SystemMessage(task.system_prompt))
        self.current.task = task
        try:
            self.graph.invoke({"messages": messages}, {"recursion_limit": RECURSION_LIMIT})
        finally:
            self.current.task = None


# ------------------------------------------------------------------------------- bigtool
def _add_new(left: list[str], right: list[str]) -> list[str]:
    """Extend left list with new items from right list (bigtool's reducer)."""
    return left + [item for item in right if item not in set(left)]


class BigtoolState(MessagesState):
    """bigtool's state: the messages and the ids of the tools retrieved so far."""

    selected_tool_ids: Annotated[list[str], _add_new]


def create_bigtool_graph(
    llm: Any,
    tool_registry: Mapping[str, BaseTool],
    *,
    limit: int = 2,
    namespace_prefix: tuple[str, ...] = ("tools",),
) -> StateGraph[Any]:
    """langgraph-bigtool 0.0.3's `create_agent` (``graph.py``), followed line by line.

    The released package (``pip install langgraph-bigtool==0.0.3``) imports with today's
    LangGraph but fails on the first real tool call: its ``should_continue`` calls
    ``ToolNode.inject_tool_args``, which langgraph-prebuilt 1.x renamed to a private
    method. This copy keeps its loop exactly (the model starts with ``retrieve_tools`` alone;
    each ``retrieve_tools`` call searches the store for ``limit`` tools, answered
    ``"Available tools: [...]"``, and binds them from then on; other calls go to a
    `ToolNode`) and drops only that injection, which our simulated tools do not use. The
    retrieval is bigtool's default (`get_default_retrieval_tool`): ``store.search`` over
    `namespace_prefix` with the query.

    Args:
        llm: The chat model (with `bind_tools`).
        tool_registry: Tool id -> tool (the catalogue).
        limit: Tools returned by one ``retrieve_tools`` call.
        namespace_prefix: The store namespace of the tool descriptions.

    Returns:
        The uncompiled graph (compile it with a store holding the descriptions).
    """

    def retrieve_tools(query: str, *, store: Annotated[BaseStore, InjectedStore()]) -> list[str]:
        """Retrieve a tool to use, given a search query."""
        results = store.search(namespace_prefix, query=query, limit=limit)
        return [result.key for result in results]

    retrieve = StructuredTool.from_function(func=retrieve_tools)
    tool_node = ToolNode(list(tool_registry.values()))

    def call_model(state: BigtoolState, *, store: BaseStore) -> dict[str, Any]:
        selected_tools = [tool_registry[i] for i in state["selected_tool_ids"]]
        llm_with_tools = llm.bind_tools([retrieve, *selected_tools])
        response = llm_with_tools.invoke(state["messages"])
        return {"messages": [response]}

    def select_tools(tool_calls: list[dict[str, Any]], *, store: BaseStore) -> dict[str, Any]:
        messages, ids = [], []
        for tool_call in tool_calls:
            batch = retrieve.invoke({**tool_call["args"], "store": store})
            names = [tool_registry[i].name for i in batch]
            messages.append(
                LCToolMessage(f"Available tools: {names}", tool_call_id=tool_call["id"])
            )
            ids.extend(batch)
        return {"messages": messages, "selected_tool_ids": ids}

    def should_continue(state: BigtoolState) -> Any:
        last_message = state["messages"][-1]
        if not isinstance(last_message, AIMessage) or not last_message.tool_calls:
            return END
        destinations = []
        for call in last_message.tool_calls:
            if call["name"] == RETRIEVE_TOOL:
                destinations.append(Send("select_tools", [call]))
            else:
                destinations.append(Send("tools", [call]))
        return destinations

    builder = StateGraph(BigtoolState)
    builder.add_node("agent", call_model)
    builder.add_node("select_tools", select_tools)  # type: ignore[arg-type]  # Send input
    builder.add_node("tools", tool_node)
    builder.set_entry_point("agent")
    builder.add_conditional_edges("agent", should_continue, path_map=["select_tools", "tools", END])
    builder.add_edge("tools", "agent")
    builder.add_edge("select_tools", "agent")
    return builder


# -------------------------------------------------------------------------------- search
class SearchToolsMiddleware(AgentMiddleware):
    """Bind ``search_tools`` plus the tools earlier searches loaded, nothing else."""

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> Any:
        """Rewrite the request's tools to the search tool and the loaded ones."""
        loaded: list[str] = []
        for m in request.messages:
            if isinstance(m, LCToolMessage) and m.name == SEARCH_TOOL:
                loaded += [n for n in (m.artifact or []) if n not in loaded]
        by_name = {getattr(t, "name", None): t for t in request.tools}
        tools = [by_name[SEARCH_TOOL], *(by_name[n] for n in loaded if n in by_name)]
        return handler(request.override(tools=tools))


def search_tool(backend: ToolSearchBackend) -> BaseTool:
    """The ``search_tools`` tool: BM25 over the catalogue, the found names as its artifact."""

    def search_tools(query: str) -> tuple[str, list[str]]:
        names = backend.search(query) if query.strip() else []
        text = f"Loaded tools: {', '.join(names)}" if names else "No tools matched the search."
        return text, names

    return StructuredTool.from_function(
        func=search_tools,
        name=SEARCH_TOOL,
        description=(
            "Search the tools by what you need to do next; the tools found are loaded and "
            "can then be called."
        ),
        response_format="content_and_artifact",
    )


# ------------------------------------------------------------------------------- factory
def make_contestants(
    names: Sequence[str],
    endpoint: BenchEndpoint,
    *,
    train: Dataset,
    zero_train: Dataset,
    tools: Toolset,
    encoder: Encoder,
    k: int = 5,
    seed: int = 0,
    system_prompt: str,
    fitted: MutableMapping[tuple[str, bool], Any] | None = None,
) -> list[GraphContestant]:
    """Build the named contestants over one shared chat model.

    Args:
        names: Contestant ids (`CONTESTANTS`).
        endpoint: The benchmark's endpoint (every model call goes there).
        train: The training split (API-safe names): what ``dtdr`` and ``bm25`` fit on.
        zero_train: The training split with no demonstrations (``dtdr@0demos``).
        tools: The catalogue.
        encoder: The encoder of the retrievers and of bigtool's store.
        k: Tools per selection (top-k, the selector's ``max_tools``, a search's results).
        seed: Seed of the retrievers.
        system_prompt: The system prompt of every agent.
        fitted: Retrievers fitted so far, by (id, zero demonstrations): reused, and the ones
            fitted here are added (share it between calls over the same splits).

    Raises:
        ValueError: An unknown contestant id, or a retriever that cannot be built here.
    """
    unknown = [n for n in names if n not in CONTESTANTS]
    if unknown:
        raise ValueError(f"unknown contestant(s) {unknown}; choose from {list(CONTESTANTS)}")
    model = bench_chat_model(endpoint, AGENT)
    current = _Current()
    lc_tools = simulated_tools(tools, current)
    fitted = {} if fitted is None else fitted

    def retriever(rid: str, zero: bool = False) -> Any:
        if (rid, zero) not in fitted:
            data = zero_train if zero else train
            built, reason = build_retriever(rid, encoder=encoder, seed=seed, dataset=data)
            if built is None:
                raise ValueError(f"retriever {rid!r} cannot run here: {reason}")
            fitted[rid, zero] = built.fit(data.demos, data.tools)
        return fitted[rid, zero]

    def agent(middleware: Sequence[Any] = (), extra: Sequence[BaseTool] = ()) -> Any:
        return create_agent(
            model, [*extra, *lc_tools], system_prompt=system_prompt, middleware=list(middleware)
        )

    out: list[GraphContestant] = []
    for name in names:
        if name == "all-tools":
            out.append(GraphContestant(name, agent(), current, binds_all=True))
        elif name == "llm-selector":
            selector = LLMToolSelectorMiddleware(
                model=bench_chat_model(endpoint, SELECTOR), max_tools=k
            )
            out.append(GraphContestant(name, agent([selector]), current, binds_all=True))
        elif name == "search":
            backend = ToolSearchBackend(retriever("bm25"), tools, limit=k)
            graph = agent([SearchToolsMiddleware()], [search_tool(backend)])
            meta = frozenset({SEARCH_TOOL})
            out.append(GraphContestant(name, graph, current, meta_tools=meta))
        elif name == "bigtool":
            registry = {t.name: t for t in lc_tools}
            graph = create_bigtool_graph(model, registry, limit=k).compile(
                store=bigtool_store(tools, encoder)
            )
            meta = frozenset({RETRIEVE_TOOL})
            out.append(
                GraphContestant(name, graph, current, meta_tools=meta, system_in_messages=True)
            )
        else:
            rid, zero, cache = {
                "dtdr": ("hybrid", False, None),
                "dtdr@0demos": ("hybrid", True, None),
                "bm25": ("bm25", False, None),
                "dtdr+append": ("hybrid", False, "append"),
            }[name]
            options: dict[str, Any] = {"k": k}
            if cache is not None:
                options["cache"] = cache
            middleware = DTDRMiddleware(retriever(rid, zero), tools=lc_tools, **options)
            out.append(GraphContestant(name, agent([middleware]), current))
    return out
