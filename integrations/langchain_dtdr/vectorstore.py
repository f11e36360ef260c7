"""Candidates from a shared LangChain `VectorStore` (Chroma, pgvector, Qdrant, Elasticsearch, ...).

Teams whose tool catalogue lives in a shared vector database can let it supply the candidate
stage of the `hybrid` retriever: the store returns the tools most similar to the request, and
the hybrid scores those (plus BM25's and the learned parts' candidates) for every step.

    store = Chroma(client=chromadb.HttpClient(host, port), collection_name="tools",
                   embedding_function=EncoderEmbeddings(encoder))
    add_tools(store, tools)                      # once, when the catalogue changes
    hybrid.set_candidate_source(VectorStoreCandidates(store))

Any `VectorStore` works: `PGVector` (langchain-postgres), `QdrantVectorStore`
(langchain-qdrant) or `ElasticsearchStore` (langchain-elasticsearch) built with the same
`EncoderEmbeddings` and the tools added by `add_tools`.

Bad input never crashes an agent step: names the store returns that are not in the catalogue
are skipped and noted, and an unreachable store falls back to the retriever's local index with
a note in the ranking's explanation. Call `VectorStoreCandidates.check()` at start-up to get a
clear `VectorStoreError` instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from dtdr_agents.foundation.encoders import Encoder, get_encoder
from dtdr_agents.foundation.errors import DTDRError
from dtdr_agents.foundation.types import Toolset

NAME_KEY = "tool_name"
"""Metadata field that holds a tool's name in the store."""


class VectorStoreError(DTDRError, RuntimeError):
    """The vector store could not be reached or answered something unusable."""


class EncoderEmbeddings(Embeddings):
    """A LangChain `Embeddings` over a dtdr-agents encoder (MiniLM by default).

    Use it for the store so that its similarities match the retriever's own.

    Args:
        encoder: Encoder spec or object (see `dtdr_agents.foundation.encoders.get_encoder`).
    """

    def __init__(self, encoder: str | Encoder | None = "default") -> None:
        self.encoder = get_encoder(encoder)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed tool texts."""
        rows: list[list[float]] = self.encoder.encode(texts).tolist()
        return rows

    def embed_query(self, text: str) -> list[float]:
        """Embed a request."""
        row: list[float] = self.encoder.encode([text])[0].tolist()
        return row


def add_tools(
    store: VectorStore, tools: Toolset | Iterable[Any], *, name_key: str = NAME_KEY
) -> list[str]:
    """Add every tool's `name: description` text to `store`, its name in `name_key`.

    The document ids are the tool names, so adding a catalogue again updates it in stores that
    upsert by id. Returns the ids the store reports.
    """
    toolset = tools if isinstance(tools, Toolset) else Toolset(tools)
    docs = [Document(page_content=t.text(), metadata={name_key: t.name}) for t in toolset]
    try:
        return store.add_documents(docs, ids=list(toolset.names))
    except Exception as exc:
        raise VectorStoreError(f"could not add tools to the vector store: {exc}") from exc


class VectorStoreCandidates:
    """A candidate source for `HybridRetriever.set_candidate_source` backed by a `VectorStore`.

    Called with (query, k), it returns up to k (tool name, similarity) pairs, best first. The
    tool name is read from each document's metadata field `name_key` (or, failing that, the
    text before the first colon of the document, as `add_tools` writes it).

    Args:
        store: Any LangChain vector store holding the tools (see `add_tools`).
        name_key: Metadata field with the tool name.
        catalogue: Optional catalogue to check names against here; unknown names are then
            dropped before the retriever sees them, and listed in `last_skipped`.
    """

    def __init__(
        self,
        store: VectorStore,
        *,
        name_key: str = NAME_KEY,
        catalogue: Toolset | Iterable[Any] | None = None,
    ) -> None:
        self.store = store
        self.name_key = name_key
        self.catalogue: Toolset | None = (
            None
            if catalogue is None
            else catalogue
            if isinstance(catalogue, Toolset)
            else Toolset(catalogue)
        )
        self.last_skipped: tuple[str, ...] = ()

    def _name(self, doc: Document) -> str | None:
        name = doc.metadata.get(self.name_key) if doc.metadata else None
        if isinstance(name, str) and name:
            return name
        head = doc.page_content.split(":", 1)[0].strip()
        return head or None

    def __call__(self, query: str, k: int) -> Sequence[tuple[str, float]]:
        """Up to `k` (tool name, similarity) pairs for `query`, best first.

        Raises:
            VectorStoreError: The store could not be queried (the hybrid falls back to its
                local index and notes why).
        """
        try:
            hits = self.store.similarity_search_with_score(query, k=k)
        except Exception as exc:
            raise VectorStoreError(
                f"vector store {type(self.store).__name__} is unreachable or failed: {exc}"
            ) from exc
        out: list[tuple[str, float]] = []
        skipped: list[str] = []
        for doc, score in hits:
            name = self._name(doc)
            if name is None:
                skipped.append(repr(doc.page_content[:40]))
                continue
            if self.catalogue is not None and not self.catalogue.has(name):
                skipped.append(name)
                continue
            out.append((name, float(score)))
        self.last_skipped = tuple(skipped)
        return out

    def check(self) -> None:
        """Query the store once; raise `VectorStoreError` with the reason if it fails."""
        self("tool", 1)


__all__ = [
    "NAME_KEY",
    "EncoderEmbeddings",
    "VectorStoreCandidates",
    "VectorStoreError",
    "add_tools",
]
