"""The TF-IDF encoder's out-of-distribution check: unknown words trigger the fallback (issue 11)."""

from __future__ import annotations

import pytest

from dtdr_agents import DTDRC, DTDRL, ToolRetriever
from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.encoders import TfidfEncoder, VocabularyCheck

OUT_OF_DISTRIBUTION = [
    "asdf",
    "qwx zzkp vvbl ghtr",
    "¿Puedes reservar una mesa para dos personas en el restaurante mañana?",
    "What is the molar mass of sulfuric acid and how does it react with sodium hydroxide?",
]


@pytest.fixture(scope="module")
def data():
    """A small demo dataset: 160 demonstrations to fit, 40 held-out requests."""
    ds = make_demo_dataset(n=200, seed=5)
    return list(ds.demos), ds.tools


@pytest.mark.parametrize(
    "make", [lambda: DTDRC(encoder="tfidf"), lambda: DTDRL(encoder="tfidf", history="structured")]
)
def test_tfidf_fallback_fires_for_unknown_words_only(data, make, tmp_path):
    demos, tools = data
    model = make().fit(demos[:160], tools)
    for query in OUT_OF_DISTRIBUTION:
        ranking = model.rank(query)
        assert ranking.fallback, query
        assert "TF-IDF vocabulary" in (ranking.fallback_reason or "")
    held_out = [d.query for d in demos[160:]]
    assert sum(model.rank(q).fallback for q in held_out) <= 2  # about 1% by calibration
    loaded = ToolRetriever.load(model.save(tmp_path / "m"))
    assert [loaded.rank(q).fallback for q in OUT_OF_DISTRIBUTION] == [True] * 4


def test_no_check_without_ood_quantile(data):
    demos, tools = data
    model = DTDRC(encoder="tfidf", ood_quantile=None).fit(demos[:160], tools)
    assert not model.rank("asdf").fallback


def test_known_fraction_and_calibration():
    enc = TfidfEncoder(dim=4).fit(["open the file", "send the email", "open my notes"])
    assert enc.known_fraction(["open the file", "zzz", "", "open zzz"]).tolist() == [
        1.0,
        0.0,
        0.0,
        0.5,
    ]
    # "file" appears in one request only: left out, that request has 2 of 3 known words
    check = VocabularyCheck.calibrate(enc, ["open the file", "open the notes"], [], 1.0)
    assert check.threshold == pytest.approx(2 / 3)
    assert check.reason(enc, "the zzz zzz") is not None
    assert check.reason(enc, "open the notes") is None
