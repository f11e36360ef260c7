"""langgraph-bigtool's tool store, built once for every user in this package.

langgraph-bigtool keeps the tool descriptions in a LangGraph `BaseStore` keyed by tool id and
its ``retrieve_tools`` searches it (``store.search(namespace, query=..., limit=k)``). The
live-agent benchmark's ``bigtool`` contestant (`langchain_dtdr.agent_bench`) and the per-step
timing of `dtdr-agents speed --peers` (`langchain_dtdr.peers`) build that store here.
"""

from __future__ import annotations

from collections.abc import Sequence

from langgraph.store.memory import InMemoryStore

from dtdr_agents.foundation.encoders import Encoder, FittableEncoder
from dtdr_agents.foundation.types import Toolset

NAMESPACE = ("tools",)
"""The store namespace of the tool descriptions."""


def bigtool_store(tools: Toolset, encoder: Encoder) -> InMemoryStore:
    """A store holding each tool's ``"name: description"``, embedded by `encoder`."""
    texts = [f"{t.name}: {t.description}" for t in tools]
    if isinstance(encoder, FittableEncoder) and not encoder.is_fitted:
        encoder.fit(texts)

    def embed(batch: Sequence[str]) -> list[list[float]]:
        return [list(map(float, row)) for row in encoder.encode(list(batch))]

    store = InMemoryStore(index={"embed": embed, "dims": encoder.dim, "fields": ["description"]})
    for tool, text in zip(tools, texts, strict=True):
        store.put(NAMESPACE, tool.name, {"description": text})
    return store


__all__ = ["NAMESPACE", "bigtool_store"]
