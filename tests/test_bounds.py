"""Memory and size bounds (issue 11, item 5)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from dtdr_agents import DTDRC
from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.encoders import CachedEncoder
from dtdr_agents.retrievers.base import MEMO_KEY_CHARS


class HashEncoder:
    """A deterministic 16-dimensional stand-in encoder."""

    id = "hash16"
    dim = 16

    def encode(self, texts):
        rows = [np.random.default_rng(abs(hash(t)) % 2**32).normal(size=16) for t in texts]
        out = np.asarray(rows, dtype=np.float32).reshape(len(texts), 16)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_encoder_cache_is_bounded_by_bytes_not_by_request_size():
    cache = CachedEncoder(HashEncoder(), max_bytes=64 * 1024)
    big = [f"{i} " + "x" * 100_000 for i in range(200)]  # 200 distinct 100 KB requests
    first = cache.encode(big[:1])
    for text in big:
        cache.encode([text])
    assert cache.memory_bytes <= 64 * 1024
    assert all(len(key) <= CachedEncoder.LONG_TEXT for key in cache._memory)
    np.testing.assert_array_equal(cache.encode(big[:1]), first)  # same vector after eviction
    small = CachedEncoder(HashEncoder(), max_bytes=10**9, max_items=5)
    small.encode([str(i) for i in range(20)])
    assert len(small._memory) == 5


@pytest.fixture(scope="module")
def tiny_model():
    """A tiny TF-IDF DTDR-C model."""
    ds = make_demo_dataset(n=80, seed=2)
    return DTDRC(encoder="tfidf", n_clusters=2).fit(list(ds.demos), ds.tools)


def test_memo_keys_are_bounded_for_long_requests(tiny_model):
    for i in range(50):
        tiny_model.rank(f"{i} " + "email Anna the report " * 5_000)
    keys = [key for _, key in tiny_model._memo_store]
    assert keys and all(len(key) <= MEMO_KEY_CHARS for key in keys)


def test_long_request_is_cut_and_says_so(tiny_model):
    huge = "email Anna the report " * 200_000  # 4.4 MB
    start = time.perf_counter()
    ranking = tiny_model.rank(huge)
    assert time.perf_counter() - start < 5.0
    assert ranking.explanation["query_truncated_from"] == len(huge)
    cut = tiny_model.rank(huge[: tiny_model.max_query_chars])
    np.testing.assert_array_equal(ranking.probabilities, cut.probabilities)
    assert "query_truncated_from" not in tiny_model.rank("email Anna").explanation


def test_long_history_uses_the_most_recent_calls(tiny_model):
    names = tiny_model.tools_.names
    history = [names[i % len(names)] for i in range(100_000)]
    start = time.perf_counter()
    ranking = tiny_model.rank("email Anna the report", history)
    assert time.perf_counter() - start < 5.0
    recent = tiny_model.rank("email Anna the report", history[-tiny_model.max_history_calls :])
    np.testing.assert_array_equal(ranking.probabilities, recent.probabilities)
