"""The per-query memo of `ToolRetriever` (a `cachetools.LRUCache` of `MEMO_SIZE` keys)."""

from __future__ import annotations

import pytest

from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.retrievers import base
from dtdr_agents.retrievers.bm25 import BM25Retriever


@pytest.fixture
def bm25() -> BM25Retriever:
    pytest.importorskip("bm25s")
    ds = make_demo_dataset(n=20, seed=1)
    return BM25Retriever().fit(list(ds.demos), ds.tools)


def test_memo_keeps_the_most_recently_used_keys(bm25, monkeypatch):
    monkeypatch.setattr(base, "MEMO_SIZE", 3)
    bm25._memo_store = None  # the next lookup builds a memo of the patched size
    calls: list[str] = []

    def compute(query: str) -> str:
        calls.append(query)
        return query.upper()

    for q in ("a", "b", "c"):
        assert bm25._memo(q, "test", compute) == q.upper()
    assert bm25._memo("a", "test", compute) == "A"  # a hit: "a" is now the most recent
    assert calls == ["a", "b", "c"]
    bm25._memo("d", "test", compute)  # evicts "b", the least recently used
    assert len(bm25._memo_store) == 3
    assert {key for _, key in bm25._memo_store} == {"a", "c", "d"}
    bm25._memo("b", "test", compute)
    assert calls == ["a", "b", "c", "d", "b"]


def test_memo_keys_by_kind_and_query(bm25):
    first = bm25.bm25_scores("email the report to Anna")
    again = bm25.bm25_scores("email the report to Anna")
    assert first is again  # remembered
    assert ("bm25", "email the report to Anna") in bm25._memo_store
    assert bm25.bm25_scores("email Anna", remember=False) is not bm25.bm25_scores("email Anna")
