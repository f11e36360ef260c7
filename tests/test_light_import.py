"""Issue 38, item 1: a light import.

`import dtdr_agents` imports no retriever, store or dataset module and no heavy library; loading
a saved model and ranking with it imports only its retrievers' modules, and no SQLAlchemy,
pydantic, scikit-learn, torch or transformers (TF-IDF models here: a sentence-transformers
model loads torch at its first `encode`, `tests/test_startup.py`). The TF-IDF encoder ranks
with numpy alone and gives the embeddings of the scikit-learn pipeline it was fitted with.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dtdr_agents
from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.encoders import TfidfEncoder
from dtdr_agents.foundation.encoders import tfidf as tfidf_module
from dtdr_agents.foundation.encoders.base import _normalise
from dtdr_agents.retrievers import make_retriever

HEAVY = (
    "sqlalchemy",
    "pydantic",
    "sklearn",
    "torch",
    "transformers",
    "sentence_transformers",
    "langchain_core",
    "langgraph",
    "llama_index",
    "mcp",
)
"""Top-level packages neither `import dtdr_agents` nor loading and ranking may import."""

NOT_ON_IMPORT = ("dtdr_agents.retrievers.", "dtdr_agents.store.", "dtdr_agents.datasets")
"""Package modules `import dtdr_agents` alone does not import."""

NEVER_TO_RANK = ("dtdr_agents.store.", "dtdr_agents.datasets", "dtdr_agents.evaluation")
"""Package modules loading and ranking a model does not import (the datasets use pydantic)."""

FAMILIES = ("hybrid", "dtdr-c", "dtdr-l", "bm25", "qts", "ptr")
"""Saved model families checked (each with a TF-IDF encoder: no torch is needed to rank)."""

FAST = {"hybrid": {"select_l2": False, "clauses": False, "n_folds": 2}}
"""Parameters that keep a fit short (the same modules load and rank)."""

QUERIES = [
    ("find Sam's email and write to him", ()),
    ("find Sam's email and write to him", ("get_email_address",)),
    ("summarize the quarterly report and send it to the team", ()),
    ("what is the weather in Paris tomorrow", ()),
]

_PROBE = """
import json, sys
heavy = set(json.loads(sys.argv[1]))
def loaded():
    return sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith('dtdr_agents'))
import dtdr_agents
out = {"import": loaded()}
if len(sys.argv) > 2:
    model = dtdr_agents.load_retriever(sys.argv[2])
    ranks = [model.rank(q, h) for q, h in json.loads(sys.argv[3])]
    out["rank"] = loaded()
    out["probabilities"] = [r.probabilities.tolist() for r in ranks]
print(json.dumps(out))
"""


def _probe(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(HEAVY), *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _heavy(modules: Sequence[str]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(HEAVY))


def _sklearn_encode(self: TfidfEncoder, texts: Sequence[str]) -> np.ndarray:
    """The TF-IDF encoder's `encode` as it was, through scikit-learn's `CountVectorizer`."""
    from sklearn.feature_extraction.text import CountVectorizer

    assert self.components_ is not None and self.idf_ is not None
    if len(texts) == 0:
        return np.zeros((0, self.dim), dtype=np.float32)
    vec = CountVectorizer(  # the encoder's own word pattern
        vocabulary=self.vocabulary_, ngram_range=(1, 2), token_pattern=tfidf_module._WORD.pattern
    )
    counts = vec.transform(list(texts)).astype(np.float32)
    counts.data = 1.0 + np.log(counts.data)
    tfidf = counts.multiply(self.idf_[None, :]).tocsr()
    row_norms = np.sqrt(np.asarray(tfidf.multiply(tfidf).sum(axis=1))).ravel()
    row_norms[row_norms == 0] = 1.0
    return _normalise(np.asarray(tfidf @ self.components_.T) / row_norms[:, None])


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[np.ndarray]]]:
    """Each family fitted and ranked through scikit-learn's vectoriser, then saved."""
    data = make_demo_dataset(n=24, seed=0)
    root = tmp_path_factory.mktemp("light")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TfidfEncoder, "encode", _sklearn_encode)
        for rid in FAMILIES:
            model = make_retriever(rid, encoder="tfidf", lenient=True, seed=0, **FAST.get(rid, {}))
            model.fit(data.demos, data.tools)
            ranks = [model.rank(q, h).probabilities for q, h in QUERIES]
            out[rid] = (model.save(root / rid), ranks)
    return out


def test_import_dtdr_agents_imports_no_retriever_store_or_heavy_module() -> None:
    found = _probe()["import"]
    assert _heavy(found) == []
    assert [m for m in found if m.startswith(NOT_ON_IMPORT)] == []


@pytest.mark.parametrize("rid", FAMILIES)
def test_loading_and_ranking_a_saved_model_stays_light_and_ranks_the_same(
    rid: str, saved: dict[str, tuple[Path, list[np.ndarray]]]
) -> None:
    folder, before = saved[rid]
    found = _probe(str(folder), json.dumps(QUERIES))
    assert _heavy(found["rank"]) == [], rid
    assert [m for m in found["rank"] if m.startswith(NEVER_TO_RANK)] == [], rid
    assert "dtdr_agents.retrievers.toolqp" not in found["rank"]  # only the modules it needs
    for was, now in zip(before, found["probabilities"], strict=True):
        # the same embeddings (bitwise here; float32 rounding may differ on another CPU)
        assert np.abs(np.asarray(now) - was).max() <= 1e-6, rid


def test_naming_a_retriever_imports_its_module_only() -> None:
    code = (
        "import sys\n"
        "from dtdr_agents import make_retriever\n"
        "make_retriever('bm25')\n"
        "print(sorted(m for m in sys.modules if m.startswith('dtdr_agents.retrievers.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = ast.literal_eval(done.stdout.strip())
    assert "dtdr_agents.retrievers.bm25" in loaded
    for other in ("hybrid", "dtdr_c", "linear", "ptr", "toolqp", "lim", "refit"):
        assert f"dtdr_agents.retrievers.{other}" not in loaded


def test_tfidf_embeddings_are_those_of_the_scikit_learn_vectoriser() -> None:
    data = make_demo_dataset(n=200, seed=1)
    texts = [d.query for d in data.demos] + [t.description for t in data.tools]
    encoder = TfidfEncoder(dim=64).fit(texts)
    rng = np.random.default_rng(0)
    words = " ".join(texts).split()
    probes = [
        *texts[:50],
        *(" ".join(rng.choice(words, size=int(rng.integers(0, 80)))) for _ in range(300)),
        "",
        "xyzzy plugh",  # no known word: the zero vector
        "Find FIND find the the the",  # repeated words and pairs
        "Ünïcödé café 東京 naïve " + "a" * 150,  # non-ASCII words; a word over the length cap
    ]
    new, old = encoder.encode(probes), _sklearn_encode(encoder, probes)
    assert new.dtype == old.dtype == np.float32 and new.shape == old.shape
    assert np.abs(new - old).max() <= 1e-6
    assert not new[len(probes) - 3].any()
    for text in probes[:20]:  # one at a time, as `rank` encodes
        assert np.abs(encoder.encode([text]) - _sklearn_encode(encoder, [text])).max() <= 1e-6
    assert encoder.encode([]).shape == (0, encoder.dim)


# ----------------------------------------------------------------- the public names, lazily


def test_public_names_are_pinned_and_resolve() -> None:
    assert sorted(dtdr_agents.__all__) == sorted(
        [
            "DTDRC",
            "DTDRL",
            "END_OF_PLAN",
            "BM25Retriever",
            "CachedEncoder",
            "DTDRError",
            "DatasetFormatError",
            "Demonstration",
            "Encoder",
            "EncoderUnavailableError",
            "GraphToolCallRetriever",
            "InvalidDemonstrationError",
            "InvalidToolError",
            "LessIsMoreRetriever",
            "ModelLoadError",
            "NotFittedError",
            "QTSRetriever",
            "RandomRetriever",
            "RankedTool",
            "Ranking",
            "Selection",
            "SelectionPolicy",
            "SentenceTransformerEncoder",
            "StaticDR",
            "StaticLR",
            "Step",
            "TfidfEncoder",
            "Tool",
            "ToolGraphRetriever",
            "ToolRetriever",
            "Toolset",
            "UnknownToolError",
            "__version__",
            "get_encoder",
            "load_retriever",
            "make_retriever",
            "retriever_ids",
            "select",
        ]
    )
    for package in ("dtdr_agents", "dtdr_agents.retrievers", "dtdr_agents.store"):
        module = importlib.import_module(package)
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{package}.{name}"
            assert name in dir(module)
        with pytest.raises(AttributeError, match="has no attribute 'nope'"):
            getattr(module, "nope")  # noqa: B009
    assert dtdr_agents.DTDRC is importlib.import_module("dtdr_agents.retrievers.dtdr_c").DTDRC
    from dtdr_agents.retrievers import registry  # a submodule still imports by name

    assert registry.class_by_name("DTDRC") is dtdr_agents.DTDRC


@pytest.mark.parametrize("package", ["dtdr_agents", "dtdr_agents.retrievers"])
def test_type_checkers_see_the_names_the_package_gives(package: str) -> None:
    """The `TYPE_CHECKING` imports name exactly the lazy names, each from where it is got."""
    module = importlib.import_module(package)
    tree = ast.parse(Path(module.__file__ or "").read_text())
    typed: dict[str, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                for alias in imp.names:
                    typed[alias.name] = getattr(importlib.import_module(imp.module), alias.name)
    assert sorted(typed) == sorted(n for n in module.__all__ if n != "__version__")
    for name, value in typed.items():
        assert getattr(module, name) is value, name


def test_the_mcp_proxy_imports_no_database_layer() -> None:
    """The proxy keeps its sessions in memory unless given a store: no SQLAlchemy to start.

    Importing `mcp_dtdr` (what ``python -m mcp_dtdr`` does first) loaded SQLAlchemy through
    the session store: about a quarter of the proxy's import.
    """
    pytest.importorskip("mcp")
    code = (
        "import sys, mcp_dtdr, mcp_dtdr.stored, dtdr_agents.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sqlalchemy'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"
