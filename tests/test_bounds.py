"""Memory and size bounds (issue 11, item 5)."""

from __future__ import annotations

import numpy as np

from dtdr_agents.encoders import CachedEncoder


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
