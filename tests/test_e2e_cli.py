"""`dtdr-agents e2e` end to end: exit status without an endpoint, --dry-run offline, a run
against the loopback server with --json, and `dtdr-agents report` reading the e2e JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_server import OpenAIChatServer, clear_proxies, history_of

from dtdr_agents import cli
from dtdr_agents.datasets import load_train_test
from dtdr_agents.evaluation.e2e import api_names
from dtdr_agents.evaluation.e2e.protocol import END_TOOL

FIXTURE = str(Path(__file__).parent / "fixtures" / "datasets" / "taskbench" / "data_tiny")
BASE = ["e2e", "--dataset", "taskbench", "--path", FIXTURE, "--encoder", "tfidf", "--no-cache"]


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_proxies(monkeypatch)


@pytest.fixture
def server() -> Iterator[OpenAIChatServer]:
    _, test = load_train_test("taskbench", FIXTURE, seed=0)
    names = api_names(test.tools.names)
    plans = {d.query: [names[c] for c in d.calls] for d in test.demos}

    def perfect(body: dict[str, Any]) -> dict[str, Any]:
        query, history = history_of(body)
        plan = plans[query]
        name = plan[len(history)] if len(history) < len(plan) else END_TOOL
        return {"tool_calls": [{"name": name, "arguments": {}}]}

    with OpenAIChatServer(perfect) as srv:
        yield srv


def test_without_base_url_says_an_endpoint_is_needed(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(BASE) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "needs an OpenAI-compatible chat endpoint" in err
    assert "--dry-run" in err
    assert cli.main([*BASE, "--base-url", "http://127.0.0.1:9/v1"]) == 2
    assert "--model is required" in capsys.readouterr().err


def test_dry_run_prints_calls_and_tokens(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_json = tmp_path / "dry.json"
    code = cli.main(
        [
            *BASE,
            "--retrievers",
            "none,dtdr-c",
            "--modes",
            "no_icl,hard,soft",
            "--dry-run",
            "--tokens",
            "approx",
            "--json",
            str(out_json),
            "-q",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "| none | no_icl | 6 | 0 |" in out
    assert "| dtdr-c | hard | 6 | 0 |" in out
    assert "total: 18 calls" in out
    report = json.loads(out_json.read_text())
    assert report["kind"] == "e2e" and report["dry_run"] and report["calls"] == 18
    assert cli.main(["report", str(out_json)]) == 0
    assert "total: 18 calls" in capsys.readouterr().out


def test_e2e_is_a_registered_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert "dtdr_agents.cli.e2e" in cli.GROUPS
    with pytest.raises(SystemExit):
        cli.main(["e2e", "--help"])
    out = capsys.readouterr().out
    assert "--base-url" in out and "--dry-run" in out and "--concurrency" in out


def test_bad_mode_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*BASE, "--modes", "medium", "--dry-run"]) == 2
    assert "unknown mode 'medium'" in capsys.readouterr().err
    assert cli.main([*BASE, "--retrievers", "lim", "--modes", "hard", "--dry-run"]) == 2
    assert "no retriever could run (lim:" in capsys.readouterr().err


def test_run_writes_json_plot_and_report_reads_it(
    server: OpenAIChatServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_json = tmp_path / "e2e.json"
    argv = [
        *BASE,
        "--retrievers",
        "none,dtdr-c",
        "--modes",
        "no_icl,hard_weighted",
        "--k",
        "2",
        "--base-url",
        server.base_url,
        "--model",
        "scripted",
        "--tokens",
        "approx",
        "--json",
        str(out_json),
        "--plot",
        str(tmp_path / "fig.png"),
        "-q",
        "--max-retries",
        "1",
        "--concurrency",
        "2",
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "| none | no_icl | 100.0 | 100.0 | - | - | 100.0 |" in out
    assert len(server.requests) == 12
    report = json.loads(out_json.read_text())
    assert report["kind"] == "e2e" and report["model"] == "scripted"
    assert Path(f"{out_json}.steps.jsonl").is_file()
    assert (tmp_path / "fig.png").read_bytes()[:4] == b"\x89PNG"
    assert cli.main(["report", str(out_json)]) == 0
    assert "| none | no_icl | 100.0 | 100.0 | - | - | 100.0 |" in capsys.readouterr().out
    # run again: every step comes from the step cache
    assert cli.main(argv) == 0
    assert len(server.requests) == 12
    assert "0 calls made, 12 steps reused from the cache" in capsys.readouterr().out


def test_unreachable_endpoint_exits_1_without_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = [
        *BASE,
        "--retrievers",
        "none",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--model",
        "m",
        "--max-retries",
        "0",
        "--no-step-cache",
        "--tokens",
        "approx",
        "-q",
    ]
    # by default the run stops at the first unreachable step, with a clear error (exit 2)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "error: the endpoint http://127.0.0.1:9/v1 is unreachable" in err
    assert "none/no_icl plan 0 step 0" in err and "Traceback" not in err
    # --on-unreachable record: every step is recorded as failed, exit 1
    assert cli.main([*argv, "--on-unreachable", "record"]) == 1
    captured = capsys.readouterr()
    assert "6 unreachable" in captured.out
    assert "6 step(s) got no answer" in captured.err


def test_missing_openai_package_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "openai", None)  # import openai -> ImportError
    argv = [*BASE, "--retrievers", "none", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"]
    assert cli.main([*argv, "--no-step-cache", "--tokens", "approx", "-q"]) == 2
    assert "pip install 'dtdr-agents[openai]'" in capsys.readouterr().err


def test_an_error_body_exits_1_and_caches_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    error = json.dumps({"error": {"message": "quota exceeded", "type": "insufficient_quota"}})
    out_json = tmp_path / "e2e.json"
    with OpenAIChatServer(lambda body: {"raw": error}) as server:
        argv = [
            *BASE,
            *("--retrievers", "none", "--base-url", server.base_url, "--model", "m"),
            *("--max-retries", "1", "--tokens", "approx", "-q", "--json", str(out_json)),
        ]
        assert cli.main(argv) == 1
        assert cli.main([*argv, "--max-error-rate", "1"]) == 0  # allowed explicitly
    err = capsys.readouterr().err
    assert "6 step(s) got no answer" in err and "6 endpoint fault(s)" in err
    assert json.loads(out_json.read_text())["results"][0]["n_endpoint_errors"] == 6
    steps = Path(f"{out_json}.steps.jsonl")
    assert not steps.exists() or steps.read_text() == ""
    assert cli.main([*argv, "--max-error-rate", "2"]) == 2
