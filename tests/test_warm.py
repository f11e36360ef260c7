"""`ToolRetriever.warm`: the encoder work of many steps in batches, rankings unchanged.

The demo's time went to per-request encoder calls (the hybrid's clauses at fit and at every
request's first step, DTDR-L's history text at every step); `warm` does them in batches so
each `rank` finds its vectors in the encoder's cache.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
import pytest

from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.encoders import CachedEncoder, TfidfEncoder
from dtdr_agents.foundation.progress import progress_bar, ticking
from dtdr_agents.retrievers import make_retriever


class Counting:
    """An encoder that counts the texts it is asked to encode (wraps a fitted TF-IDF)."""

    def __init__(self, inner: TfidfEncoder) -> None:
        self.inner = inner
        self.calls = 0
        self.texts = 0

    @property
    def id(self) -> str:
        return self.inner.id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        return self.inner.encode(texts)


@pytest.fixture(scope="module")
def data():  # type: ignore[no-untyped-def]
    return make_demo_dataset(n=240, seed=0)


def _encoder(data) -> tuple[CachedEncoder, Counting]:  # type: ignore[no-untyped-def]
    tfidf = TfidfEncoder()
    tfidf.fit([d.query for d in data.demos] + [t.text() for t in data.tools])
    counting = Counting(tfidf)
    return CachedEncoder(counting), counting


@pytest.mark.parametrize(
    ("rid", "params"), [("hybrid", {}), ("dtdr-l", {"history": "text"}), ("dtdr-c", {})]
)
def test_warm_batches_the_encoder_work_and_rankings_do_not_change(data, rid, params) -> None:  # type: ignore[no-untyped-def]
    train, test = data.demos[:180], data.demos[180:]
    steps = [(d.query, s.history) for d in test for s in d.steps()]
    enc_a, count_a = _encoder(data)
    enc_b, _ = _encoder(data)
    warmed = make_retriever(rid, encoder=enc_a, seed=0, **params).fit(train, data.tools)
    cold = make_retriever(rid, encoder=enc_b, seed=0, **params).fit(train, data.tools)
    before = count_a.calls
    warmed.warm(steps)
    assert count_a.calls - before <= 2  # one batch (two for DTDR-L: requests, then texts)
    after_warm = count_a.calls
    for query, history in steps:
        a = warmed.rank(query, history)
        b = cold.rank(query, history)
        np.testing.assert_allclose(a.probabilities, b.probabilities, rtol=0, atol=1e-12)
    assert count_a.calls == after_warm  # every step found its vectors in the cache


def test_the_hybrid_fit_encodes_its_clauses_in_one_batch(data) -> None:  # type: ignore[no-untyped-def]
    enc, counting = _encoder(data)
    make_retriever("hybrid", encoder=enc, seed=0).fit(data.demos[:180], data.tools)
    # Before: one encoder call per multi-clause request (over a hundred here); now a handful.
    assert counting.calls < 20


def test_ticking_shows_a_bar_after_the_delay_and_nothing_without_progress(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    import dtdr_agents.foundation.progress as progress

    monkeypatch.setattr(progress, "TICK_DELAY_S", 0.0)
    out = io.StringIO()
    monkeypatch.setattr("sys.stderr", out)
    with ticking(progress_bar(True), "fit slow"):
        time.sleep(2.3)
    assert "fit slow: " in out.getvalue() and " s" in out.getvalue()
    quiet = io.StringIO()
    monkeypatch.setattr("sys.stderr", quiet)
    with ticking(None, "fit slow"):
        time.sleep(1.2)
    assert quiet.getvalue() == ""
