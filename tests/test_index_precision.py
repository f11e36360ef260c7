"""The HNSW candidate stage in half precision: half the memory, the same candidates nearly."""

from __future__ import annotations

import numpy as np
import pytest

from dtdr_agents.foundation.errors import ModelLoadError
from dtdr_agents.retrievers.index import HNSW_DTYPE, CandidateIndex, hnsw_available

pytestmark = pytest.mark.skipif(not hnsw_available(), reason="usearch is not installed")


def _rows(n: int, seed: int, dim: int = 32) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _recall(idx: CandidateIndex, emb: np.ndarray, queries: np.ndarray, k: int = 10) -> float:
    hits = 0
    for q in queries:
        want = np.argsort(-(emb @ q))[:k]
        hits += len(set(idx.search(q, k)[0].tolist()) & set(want.tolist()))
    return hits / (k * len(queries))


def test_half_precision_is_the_default_holds_half_the_vectors_and_finds_the_same():
    emb, queries = _rows(3000, seed=2), _rows(50, seed=3)
    half = CandidateIndex(emb, kind="hnsw")
    single = CandidateIndex(emb, kind="hnsw", dtype="f32")
    assert HNSW_DTYPE == "f16" and half.dtype == "f16"
    # the index's own copy of the vectors, halved (as saved: its graph, then its vectors)
    saved = len(single.state()[1]["hnsw"]) - len(half.state()[1]["hnsw"])
    assert saved == emb.nbytes // 2
    assert _recall(half, emb, queries) >= _recall(single, emb, queries) - 0.03
    assert _recall(half, emb, queries) >= 0.9


def test_half_precision_candidates_come_with_their_float32_similarity_best_first():
    emb, queries = _rows(2000, seed=5), _rows(20, seed=6)
    idx = CandidateIndex(emb, kind="hnsw")
    for q in queries:
        ids, sims = idx.search(q, 15)
        assert sims.dtype == np.float32
        assert np.array_equal(sims, emb[ids] @ q)  # not the half-precision distance
        assert np.all(np.diff(sims) <= 0)


def test_the_precision_is_saved_and_a_state_without_it_loads_as_single_precision():
    emb, queries = _rows(500, seed=7), _rows(5, seed=8)
    half = CandidateIndex(emb, kind="hnsw")
    config, arrays = half.state()
    assert config["dtype"] == "f16"
    back = CandidateIndex.from_state(config, arrays, emb)
    assert back.dtype == "f16"
    for q in queries:
        assert np.array_equal(back.search(q, 10)[0], half.search(q, 10)[0])
    # a model saved before the precision was recorded holds a single-precision graph
    old = CandidateIndex(emb, kind="hnsw", dtype="f32")
    old_config, old_arrays = old.state()
    del old_config["dtype"]
    loaded = CandidateIndex.from_state(old_config, old_arrays, emb)
    assert loaded.dtype == "f32"
    for q in queries:
        got, want = loaded.search(q, 10), old.search(q, 10)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_a_state_whose_precision_does_not_match_its_graph_is_refused():
    emb = _rows(300, seed=9)
    config, arrays = CandidateIndex(emb, kind="hnsw").state()
    with pytest.raises(ModelLoadError, match="holds f16 vectors, its settings say f32"):
        CandidateIndex.from_state({**config, "dtype": "f32"}, arrays, emb)
    with pytest.raises(ModelLoadError, match="dtype 'i8'"):
        CandidateIndex.from_state({**config, "dtype": "i8"}, arrays, emb)
    with pytest.raises(ValueError, match="dtype must be"):
        CandidateIndex(emb, kind="hnsw", dtype="i8")  # type: ignore[arg-type]


def test_a_saved_hybrid_with_a_half_precision_index_loads_and_ranks_the_same(tmp_path):
    from dtdr_agents.datasets.synthetic import make_demo_dataset
    from dtdr_agents.foundation.types import Toolset
    from dtdr_agents.retrievers import load_retriever
    from dtdr_agents.retrievers.hybrid import HybridRetriever

    data = make_demo_dataset(n=80, seed=1)
    filler = [
        {"name": f"filler_{i}", "description": f"internal maintenance task number {i}"}
        for i in range(300)
    ]
    tools = Toolset([*data.tools.to_list(), *filler])
    model = HybridRetriever(encoder="tfidf", n_folds=2, candidates=30, exact_limit=100)
    model.fit(data.demos[:60], tools)
    assert model.index_.kind == "hnsw" and model.index_.dtype == "f16"
    model.save(tmp_path / "model")
    back = load_retriever(tmp_path / "model")
    assert back.index_.dtype == "f16"  # type: ignore[attr-defined]
    for demo in data.demos[60:]:
        for step in demo.steps():
            want = model.rank(demo.query, step.history).probabilities
            assert np.array_equal(back.rank(demo.query, step.history).probabilities, want)
