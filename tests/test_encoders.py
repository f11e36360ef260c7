"""Encoders: offline default, clear errors, TF-IDF, caches."""

from __future__ import annotations

import numpy as np
import pytest

from dtdr_agents.foundation.encoders import (
    CachedEncoder,
    SentenceTransformerEncoder,
    TfidfEncoder,
    bundled_minilm_path,
    get_encoder,
)
from dtdr_agents.foundation.errors import EncoderUnavailableError, NotFittedError


def test_default_resolves_to_the_bundled_minilm(encoder):
    assert bundled_minilm_path() is not None
    assert encoder.id == "sentence-transformers/all-MiniLM-L6-v2"
    assert encoder.dim == 384
    vecs = encoder.encode(["send an email to Bob", "email Bob", "weather in Paris"])
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2]  # a real model: related sentences are closer


def test_model_name_aliases_and_paths():
    path = bundled_minilm_path()
    assert SentenceTransformerEncoder("all-MiniLM-L6-v2").id == SentenceTransformerEncoder().id
    assert SentenceTransformerEncoder(str(path)).id == "path:model"


def test_unloadable_model_lists_the_options(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    enc = SentenceTransformerEncoder("no-such-org/no-such-model-xyz")
    with pytest.raises(EncoderUnavailableError) as err:
        enc.encode(["hello"])
    message = str(err.value)
    assert "no-such-org/no-such-model-xyz" in message
    assert "dtdr-agents[model]" in message and "tfidf" in message


def test_tfidf_needs_fit_then_round_trips():
    enc = TfidfEncoder(dim=8)
    with pytest.raises(NotFittedError):
        enc.encode(["x"])
    corpus = [
        "send an email",
        "send a text message",
        "open a file",
        "summarize a pdf file",
        "weather today",
    ]
    enc.fit(corpus)
    vecs = enc.encode(["send an email now"])
    assert vecs.shape == (1, enc.dim) and enc.dim <= 8
    config, arrays = enc.state()
    again = TfidfEncoder.from_state(config, arrays)
    np.testing.assert_allclose(again.encode(["send an email now"]), vecs, atol=1e-6)
    assert again.id == enc.id and enc.id.startswith("tfidf:")


class Counting:
    id = "counting-test-encoder"
    dim = 3

    def __init__(self):
        self.seen = []

    def encode(self, texts):
        self.seen.extend(texts)
        return np.tile(np.array([[1.0, 0.0, 0.0]], dtype=np.float32), (len(texts), 1))


def test_cache_in_memory_and_on_disk(tmp_path):
    inner = Counting()
    cached = CachedEncoder(inner, cache_dir=tmp_path)
    cached.encode(["a", "b", "a"])
    cached.encode(["b"])
    assert inner.seen == ["a", "b"]
    fresh_inner = Counting()
    again = CachedEncoder(fresh_inner, cache_dir=tmp_path)
    out = again.encode(["a", "c"])
    assert fresh_inner.seen == ["c"]  # "a" came from the SQLite file
    assert out.shape == (2, 3)
    assert (tmp_path / "embeddings.sqlite").is_file()


def test_get_encoder_shares_models_within_a_process():
    assert get_encoder("default") is get_encoder(None)
    assert isinstance(get_encoder("tfidf"), TfidfEncoder)
    with pytest.raises(TypeError, match="encoder"):
        get_encoder(42)  # type: ignore[arg-type]


def test_the_memory_cache_drops_the_least_recently_used_text():
    calls: list[list[str]] = []

    class Counting:
        id = "counting"
        dim = 2

        def encode(self, texts):
            calls.append(list(texts))
            return np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (len(texts), 1))

    cache = CachedEncoder(Counting(), max_items=2)
    cache.encode(["a", "b"])
    cache.encode(["a"])  # a is now more recent than b
    cache.encode(["c"])  # evicts b, not a
    cache.encode(["a", "b"])
    assert calls == [["a", "b"], ["c"], ["b"]]
    assert (cache.hits, cache.misses) == (2, 4)
    assert CachedEncoder(Counting(), max_bytes=10).encode(["x"]).shape == (1, 2)  # too big to keep
