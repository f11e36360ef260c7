"""The peers `dtdr-agents speed --peers` times beside `hybrid`, one step at a time.

* ``graph-tool-call``: the `graph-tool-call` package (PyPI) set up as its README does
  (`ToolGraph.add_tools` with its dependency detection, `enable_embedding` with our encoder);
  a step is ``ToolGraph.retrieve(request, top_k=k, history=calls so far)``.
* ``bigtool store``: langgraph-bigtool's retrieval, ``store.search(("tools",), query=...,
  limit=k)`` over a LangGraph `InMemoryStore` embedding ``"name: description"`` with our
  encoder (`langchain_dtdr.bigtool.bigtool_store`, the agent-bench's store). Its
  ``retrieve_tools`` takes only a query the model writes; here the request stands for it.

Registered for the core under the entry-point group ``dtdr_agents.speed_peers`` (name
``peers``), so `dtdr_agents` imports neither package. Install with
``pip install 'dtdr-agents[langgraph,peer]'``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import graph_tool_call

from dtdr_agents.evaluation.perf import PeerStep
from dtdr_agents.foundation.encoders import Encoder
from dtdr_agents.foundation.types import Toolset
from langchain_dtdr.bigtool import NAMESPACE, bigtool_store


def graph_tool_call_peer(tools: Toolset, encoder: Encoder, k: int) -> PeerStep:
    """graph-tool-call's `ToolGraph.retrieve` over `tools`, its embedding channel on `encoder`."""
    graph = graph_tool_call.ToolGraph()
    graph.add_tools([t.to_openai() for t in tools])

    def embed(texts: list[str]) -> list[list[float]]:
        rows: list[list[float]] = encoder.encode(list(texts)).tolist()
        return rows

    graph.enable_embedding(embed)

    def step(query: str, history: tuple[str, ...]) -> object:
        with warnings.catch_warnings():  # advice about large catalogues, at every call
            warnings.simplefilter("ignore")
            return graph.retrieve(query, top_k=k, history=list(history))

    return PeerStep(
        "graph-tool-call",
        "ToolGraph.retrieve(request, top_k=k, history=calls so far): BM25 (on the request "
        "augmented with the called tools' descriptions), graph and embedding channels fused; "
        "embeds the request at every step, then re-ranks its top 10 by embedding the request "
        "with their descriptions (one batch, at every step)",
        step,
    )


def bigtool_peer(tools: Toolset, encoder: Encoder, k: int) -> PeerStep:
    """langgraph-bigtool's store search (`InMemoryStore` embedding with `encoder`)."""
    store = bigtool_store(tools, encoder)

    def step(query: str, history: tuple[str, ...]) -> object:
        return store.search(NAMESPACE, query=query, limit=k)

    return PeerStep(
        "bigtool store",
        "InMemoryStore.search(('tools',), query=request, limit=k), langgraph-bigtool's "
        "retrieve_tools: embeds the query at every step (the model writes a new one each "
        "time) and compares it with every tool; no history",
        step,
    )


def make_peers(tools: Toolset, new_encoder: Callable[[], Encoder], k: int) -> list[PeerStep]:
    """The two peers over `tools`, each embedding with its own `new_encoder()`."""
    return [graph_tool_call_peer(tools, new_encoder(), k), bigtool_peer(tools, new_encoder(), k)]


__all__ = ["bigtool_peer", "graph_tool_call_peer", "make_peers"]
