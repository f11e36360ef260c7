"""Issue 22, "the first hour": `dtdr-agents rank` and the MCP proxy start without needless work.

1. Loading a saved MiniLM model imports no torch, transformers, sentence-transformers,
   scikit-learn or agent framework: the encoder's dimension is read from its folder, and the model
   is loaded when the first request is encoded. Rankings are those of the fitted model.
2. A declared dimension is used only for the plain transformer + pooling stack, and checked
   against the model's output at the first `encode`.
3. The CLI process tunes the garbage collector (`process_gc`); `python -m dtdr_agents` works.
4. `dtdr-agents speed --startup` prints the cold start of `rank` (measured, never asserted
   against a time here: the target is printed by the benchmark).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dtdr_agents.cli import PROCESS_GC_THRESHOLD, main
from dtdr_agents.foundation.encoders import (
    SentenceTransformerEncoder,
    bundled_minilm_path,
    declared_dim,
)
from dtdr_agents.foundation.errors import EncoderUnavailableError
from dtdr_agents.retrievers import make_retriever
from dtdr_agents.retrievers.base import ToolRetriever

HEAVY = (  # scipy.sparse is not here: BM25 (bm25s) needs it to rank
    "torch",
    "transformers",
    "sentence_transformers",
    "sklearn",
    "langchain",
    "langchain_core",
    "langgraph",
    "llama_index",
    "mcp",
)
QUERY = "Summarize q3.pdf and email it to Ana"


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.fixture(scope="module")
def saved_hybrid(
    tmp_path_factory: pytest.TempPathFactory, encoder: Any, demo_data: Any, demo_split: Any
) -> tuple[ToolRetriever, Path]:
    model = make_retriever("hybrid", encoder=encoder).fit(demo_split[0][:80], demo_data.tools)
    return model, model.save(tmp_path_factory.mktemp("startup") / "hybrid")


# ------------------------------------------------------------ 1. loading imports nothing heavy


def test_loading_a_saved_minilm_model_imports_no_torch(
    saved_hybrid: tuple[ToolRetriever, Path],
) -> None:
    code = (
        "import sys\n"
        "from dtdr_agents.cli import build_parser\n"
        "from dtdr_agents.retrievers import load_retriever\n"
        "build_parser()\n"
        "model = load_retriever(sys.argv[1])\n"
        f"heavy = {HEAVY!r}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
        "model.rank(sys.argv[2], ())\n"
        "print('torch' in sys.modules)\n"
    )
    done = _python(code, str(saved_hybrid[1]), QUERY)
    assert done.returncode == 0, done.stderr
    loaded, after_rank = done.stdout.splitlines()[-2:]
    assert loaded == "[]"  # nothing heavy until a request is encoded
    assert after_rank == "True"  # the request itself is encoded by the real model


def test_the_cli_ranks_a_saved_model_as_the_fitted_one(
    saved_hybrid: tuple[ToolRetriever, Path],
) -> None:
    model, path = saved_hybrid
    argv = ["-m", "dtdr_agents", "rank", "--model", str(path), "--query", QUERY]
    done = subprocess.run(
        [sys.executable, *argv, "--history", "open_file", "-k", "8", "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)["ranking"]
    expected = model.rank(QUERY, ["open_file"]).top(8)
    assert [r["name"] for r in shown] == [t.name for t in expected]
    assert [r["probability"] for r in shown] == pytest.approx(
        [t.probability for t in expected], abs=1e-6
    )


# --------------------------------------------------------------- 2. the declared dimension


def test_the_bundled_minilm_declares_its_dimension(encoder: Any) -> None:
    path = bundled_minilm_path()
    assert path is not None
    assert declared_dim(path) == 384 == encoder.encode(["a request"]).shape[1]
    assert SentenceTransformerEncoder("default").dim == 384


def _model_folder(folder: Path, modules: Any, pooling: Any) -> Path:
    folder.mkdir()
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return folder


PLAIN = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
]
MEAN = {"word_embedding_dimension": 256, "pooling_mode_mean_tokens": True}


@pytest.mark.parametrize(
    ("modules", "pooling", "expected"),
    [
        (PLAIN, MEAN, 256),
        (PLAIN, {"embedding_dimension": 128, "pooling_mode": "mean"}, 128),  # newer format
        (PLAIN, {**MEAN, "pooling_mode_max_tokens": True}, None),  # two modes: 2 x 256
        (  # a Dense layer changes the dimension
            [*PLAIN, {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}],
            MEAN,
            None,
        ),
        (PLAIN[:1], MEAN, None),  # no pooling module
        (PLAIN, {"pooling_mode_mean_tokens": True}, None),  # no dimension
        (PLAIN, {**MEAN, "word_embedding_dimension": "256"}, None),
        (PLAIN, ["not", "an", "object"], None),
        ({"not": "a list"}, MEAN, None),
    ],
)
def test_a_dimension_is_declared_only_by_the_plain_stack(
    tmp_path: Path, modules: Any, pooling: Any, expected: int | None
) -> None:
    assert declared_dim(_model_folder(tmp_path / "m", modules, pooling)) == expected


def test_missing_or_broken_files_declare_nothing(tmp_path: Path) -> None:
    assert declared_dim(tmp_path) is None  # no modules.json
    (tmp_path / "modules.json").write_text("{not json")
    assert declared_dim(tmp_path) is None
    (tmp_path / "modules.json").write_text(json.dumps(PLAIN))
    assert declared_dim(tmp_path) is None  # no pooling config


def test_a_wrong_declared_dimension_is_caught_at_the_first_encode(tmp_path: Path) -> None:
    bundled = bundled_minilm_path()
    assert bundled is not None
    folder = tmp_path / "minilm"
    folder.mkdir()
    for item in bundled.iterdir():
        if item.name != "1_Pooling":
            (folder / item.name).symlink_to(item)
    pooling = json.loads((bundled / "1_Pooling" / "config.json").read_text())
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({**pooling, "word_embedding_dimension": 128})
    )
    enc = SentenceTransformerEncoder(str(folder))
    assert enc.dim == 128  # read from the folder, not from the model
    with pytest.raises(EncoderUnavailableError, match="declares embedding dimension 128"):
        enc.encode(["a request"])


# ------------------------------------------------------------------- 3. the CLI process


def test_a_cli_process_tunes_the_collector_and_freezes_at_the_end() -> None:
    code = (
        "import gc\n"
        "from dtdr_agents.cli import process_gc\n"
        "before = gc.get_threshold()\n"
        "with process_gc():\n"
        "    inside = gc.get_threshold()\n"
        "print(before == gc.get_threshold(), list(inside), gc.get_freeze_count() > 0)\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"True {list(PROCESS_GC_THRESHOLD)} True"


def test_python_dash_m_runs_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dtdr_agents", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("dtdr-agents ")


# --------------------------------------------------------------- 4. the startup benchmark


@pytest.fixture
def tfidf_model(tmp_path: Path, demo_data: Any, demo_split: Any) -> Path:
    """A saved DTDR-C on TF-IDF (no sentence encoder to load)."""
    model = make_retriever("dtdr-c", encoder="tfidf").fit(demo_split[0][:100], demo_data.tools)
    return model.save(tmp_path / "dtdr-c")


def test_speed_startup_prints_the_cold_start_of_rank(
    tmp_path: Path, tfidf_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tfidf_model
    report = tmp_path / "startup.json"
    argv = ["speed", "--startup", "--model", str(path), "--repeats", "2", "--json", str(report)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "startup benchmark: `python -m dtdr_agents rank`" in out
    assert "interpreter + CLI (--version): p50" in out
    assert "rank, end to end: p50" in out
    assert "encoder alone" not in out  # a TF-IDF encoder is part of the model
    assert "target: rank p50 at most 5 s:" in out  # no sentence encoder: torch's target
    assert "import dtdr_agents: p50" in out and "target: import p50 at most 0.5 s:" in out
    figures = json.loads(report.read_text())
    assert figures["kind"] == "startup" and figures["encoder_backend"] is None
    assert figures["provenance"]["command"].startswith("dtdr-agents speed --startup")
    assert len(figures["import_s"]) == 2 and figures["mcp"] is None
    assert figures["retriever"] == "dtdr-c" and figures["repeats"] == 2
    assert len(figures["rank_s"]) == 2 and len(figures["cli_s"]) == 2
    assert figures["encoder_s"] is None
    assert figures["cli_p50_s"] > 0 and figures["rank_p50_s"] > 0
    assert figures["rank_p50_s"] == pytest.approx(sum(figures["rank_s"]) / 2)  # the median


def test_a_startup_block_is_generated_from_its_json_and_names_a_bad_one(
    tmp_path: Path, tfidf_model: Path
) -> None:
    from dtdr_agents.evaluation.docsync import ResultsError, render

    argv = ["speed", "--startup", "--model", str(tfidf_model), "--repeats", "1"]
    assert main([*argv, "--json", str(tmp_path / "startup.json")]) == 0
    body = render("startup startup.json", tmp_path, where="doc.md:1")
    assert body.startswith("```\nstartup benchmark:") and "rank, end to end: p50" in body
    assert "`startup.json`: `dtdr-agents speed --startup" in body
    figures = json.loads((tmp_path / "startup.json").read_text())
    del figures["rank_s"]
    (tmp_path / "bad.json").write_text(json.dumps(figures))
    with pytest.raises(ResultsError, match="rank_s"):
        render("startup bad.json", tmp_path, where="doc.md:1")


@pytest.mark.slow
def test_speed_startup_times_the_mcp_proxy_to_its_first_set_task(
    tmp_path: Path, tfidf_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "startup.json"
    argv = ["speed", "--startup", "--mcp", "--model", str(tfidf_model), "--repeats", "1"]
    assert main([*argv, "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "MCP proxy, start to first set_task answered: p50" in out
    mcp = json.loads(report.read_text())["mcp"]
    assert mcp["transport"] == "stdio" and len(mcp["set_task_s"]) == 1
    assert 0 < mcp["initialize_p50_s"] <= mcp["set_task_p50_s"]


def test_speed_startup_refuses_a_missing_model_and_a_failing_process(tmp_path: Path) -> None:
    from dtdr_agents.evaluation.perf import _wall_times, run_startup
    from dtdr_agents.foundation.errors import ModelLoadError

    with pytest.raises(ModelLoadError):
        run_startup(tmp_path / "no-model", repeats=1)
    with pytest.raises(ValueError, match="repeats"):
        run_startup(tmp_path / "no-model", repeats=0)
    with pytest.raises(RuntimeError, match="exited 3: boom"):
        _wall_times([sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"], 1)


def test_the_mcp_proxy_warms_its_encoder_in_a_thread_while_the_upstream_starts(
    demo_data: Any, demo_split: Any
) -> None:
    pytest.importorskip("mcp")
    from mcp_dtdr.proxy import _warm_encoder

    model = make_retriever("dtdr-c", encoder="tfidf").fit(demo_split[0][:50], demo_data.tools)
    seen: list[list[str]] = []
    inner = model.encoder_

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(inner, name)

        def encode(self, texts: list[str]) -> Any:
            seen.append(list(texts))
            return inner.encode(texts)

    model.encoder_ = Counting()
    thread = _warm_encoder(model)
    assert thread is not None and thread.name == "dtdr-encoder-warm-up"
    thread.join(60)
    assert seen == [["warm-up"]]
    assert _warm_encoder(None) is None  # a zero-shot proxy fits its retriever later

    class Failing(Counting):
        def encode(self, texts: list[str]) -> Any:
            raise RuntimeError("no model here")

    model.encoder_ = Failing()
    failing = _warm_encoder(model)  # the failure is the first request's to report
    assert failing is not None
    failing.join(60)
    assert not failing.is_alive()
