"""Every bad command-line input ends in `error: ...` with exit status 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from dtdr_agents.cli import main

FIX = Path(__file__).parent / "fixtures" / "datasets" / "jsonl"
DEMOS, TOOLS = FIX / "demos.jsonl", FIX / "tools.json"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    return code, err


def _fit_args(out: Path, *extra: str, demos: Path = DEMOS) -> list[str]:
    return [
        "fit",
        "--dataset",
        "jsonl",
        "--path",
        str(demos),
        "--tools",
        str(TOOLS),
        "--skip-bad",
        "--retriever",
        "dtdr-c",
        "--encoder",
        "tfidf",
        "-o",
        str(out),
        *extra,
    ]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DTDR-C model fitted on the JSONL fixture with the CLI."""
    out = tmp_path_factory.mktemp("cli") / "model"
    assert main(_fit_args(out, "--param", "n_clusters=1")) == 0
    return out


def _bad_cases(model: Path, tmp: Path) -> dict[str, list[str]]:
    existing_file = tmp / "file.txt"
    existing_file.write_text("not a folder")
    latin1 = tmp / "latin1.jsonl"
    latin1.write_bytes(DEMOS.read_bytes() + b'{"query": "caf\xe9", "calls": ["get_weather"]}\n')
    rank = ["rank", "--model", str(model), "--query", "weather in Rome"]
    return {
        "rank -k 0": [*rank, "-k", "0"],
        "rank -k -1": [*rank, "-k", "-1"],
        "rank -k x": [*rank, "-k", "x"],
        'rank --query ""': ["rank", "--model", str(model), "--query", ""],
        "rank --query blank": ["rank", "--model", str(model), "--query", "   "],
        "rank unknown history": [*rank, "--history", "nosuch_tool"],
        "rank missing model": ["rank", "--model", str(tmp / "none"), "--query", "q"],
        "rank model is a file": ["rank", "--model", str(existing_file), "--query", "q"],
        "fit --retriever nosuch": [
            *_fit_args(tmp / "o1")[:-4],
            "--retriever",
            "nosuch",
            "-o",
            str(tmp / "o1"),
        ],
        "--param bogus=1": _fit_args(tmp / "o2", "--param", "bogus=1"),
        "--param order=abc": _fit_args(tmp / "o3", "--param", "order=abc"),
        "--param order=10**9": _fit_args(tmp / "o3b", "--param", "order=1000000000"),
        "--param n_clusters=0": _fit_args(tmp / "o4", "--param", "n_clusters=0"),
        "--param ood_quantile=1.5": _fit_args(tmp / "o5", "--param", "ood_quantile=1.5"),
        "--param without =": _fit_args(tmp / "o5b", "--param", "order"),
        "--limit -1": _fit_args(tmp / "o6", "--limit", "-1"),
        "-o existing file": _fit_args(existing_file),
        "latin-1 byte without --skip-bad": [
            a for a in _fit_args(tmp / "o7", demos=latin1) if a != "--skip-bad"
        ],
        "missing dataset file": _fit_args(tmp / "o8", demos=tmp / "missing.jsonl"),
        "unknown dataset": [
            "fit",
            "--dataset",
            "nosuch",
            "--path",
            str(DEMOS),
            "-o",
            str(tmp / "o9"),
        ],
    }


def test_bad_inputs_end_in_error_exit_2(model, tmp_path, capsys):
    counts = {"cases": 0, "clear error": 0, "crash": 0, "accepted": 0}
    problems = []
    for name, argv in _bad_cases(model, tmp_path).items():
        counts["cases"] += 1
        try:
            code, err = _run(argv, capsys)
        except Exception as exc:  # a traceback is what this test forbids
            counts["crash"] += 1
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if code == 2 and "error:" in err and "Traceback" not in err:
            counts["clear error"] += 1
        else:
            counts["accepted"] += 1
            problems.append(f"{name}: exit {code}, stderr {err[-200:]!r}")
    print(f"\nCLI bad inputs: {counts}")
    assert not problems, problems


def test_latin1_line_is_skipped_with_skip_bad(tmp_path, capsys):
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(DEMOS.read_bytes() + b'{"query": "caf\xe9", "calls": ["get_weather"]}\n')
    code, err = _run(_fit_args(tmp_path / "m", "--param", "n_clusters=1", demos=latin1), capsys)
    assert code == 0
    assert "UTF-8" in err or "skipped" in err


def test_bom_file_keeps_its_first_demonstration(tmp_path, capsys):
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + DEMOS.read_bytes())
    code_a, err_a = _run(_fit_args(tmp_path / "a", "--param", "n_clusters=1"), capsys)
    code_b, err_b = _run(_fit_args(tmp_path / "b", "--param", "n_clusters=1", demos=bom), capsys)
    assert code_a == code_b == 0
    fitting = [line for line in err_a.splitlines() if line.startswith("fitting")]
    assert fitting and fitting == [
        line for line in err_b.splitlines() if line.startswith("fitting")
    ]


def test_good_rank_still_works(model, capsys):
    code = main(["rank", "--model", str(model), "--query", "weather in Rome", "-k", "2"])
    assert code == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2
