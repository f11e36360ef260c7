"""The candidate stage: exact search, HNSW search, persistence, and the missing-package error."""

from __future__ import annotations

import numpy as np
import pytest

from dtdr_agents.foundation.errors import ModelLoadError
from dtdr_agents.retrievers import index as index_module
from dtdr_agents.retrievers.index import CandidateIndex, IndexUnavailableError, hnsw_available


def _rows(n: int, d: int = 32, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_exact_search_matches_brute_force():
    emb = _rows(500)
    idx = CandidateIndex(emb)
    assert idx.kind == "exact"
    q = emb[7] + 0.1 * emb[8]
    ids, sims = idx.search(q, 10)
    expected = np.argsort(-(emb @ q), kind="stable")[:10]
    assert ids.tolist() == expected.tolist()
    assert np.allclose(sims, (emb @ q)[expected], atol=1e-6)
    assert np.all(np.diff(sims) <= 1e-7)  # best first


def test_search_k_larger_than_catalogue_and_zero():
    idx = CandidateIndex(_rows(5))
    ids, _ = idx.search(_rows(1, seed=1)[0], 50)
    assert sorted(ids.tolist()) == [0, 1, 2, 3, 4]
    assert len(idx.search(_rows(1)[0], 0)[0]) == 0


def test_bad_shape_is_rejected():
    with pytest.raises(ValueError, match="2-D"):
        CandidateIndex(np.zeros(4, dtype=np.float32))


@pytest.mark.skipif(not hnsw_available(), reason="usearch is not installed")
def test_hnsw_recall_and_state_roundtrip():
    emb = _rows(3000, seed=2)
    idx = CandidateIndex(emb, exact_limit=1000)
    assert idx.kind == "hnsw"
    queries = _rows(50, seed=3)
    hits = 0
    for q in queries:
        got, sims = idx.search(q, 10)
        want = np.argsort(-(emb @ q))[:10]
        hits += len(set(got.tolist()) & set(want.tolist()))
        assert np.allclose(sims, emb[got] @ q, atol=1e-4)
    assert hits / (10 * len(queries)) >= 0.9
    config, arrays = idx.state()
    assert config["kind"] == "hnsw" and arrays["hnsw"].dtype == np.uint8
    back = CandidateIndex.from_state(config, arrays, emb)
    assert back.search(queries[0], 10)[0].tolist() == idx.search(queries[0], 10)[0].tolist()


@pytest.mark.skipif(not hnsw_available(), reason="usearch is not installed")
def test_hnsw_state_that_does_not_match_the_catalogue_is_refused():
    emb = _rows(300, seed=4)
    config, arrays = CandidateIndex(emb, kind="hnsw").state()
    with pytest.raises(ModelLoadError, match="does not match"):
        CandidateIndex.from_state(config, arrays, emb[:100])
    with pytest.raises(ModelLoadError, match="missing"):
        CandidateIndex.from_state(config, {}, emb)


def test_too_large_without_package_names_the_extra(monkeypatch):
    monkeypatch.setattr(index_module, "_import_usearch", lambda: None)
    with pytest.raises(IndexUnavailableError, match=r"dtdr-agents\[index\]") as info:
        CandidateIndex(_rows(200), exact_limit=100)
    assert "200 tools" in str(info.value)
    assert CandidateIndex(_rows(200), exact_limit=None).kind == "exact"  # forced exact works
