"""The cookbook scripts run offline and print the tools bound at each step.

The scripts are run in process (sharing the session's fitted retriever and encoder) with small
arguments; one runs as a real subprocess with the TF-IDF encoder (no model to load) to check
that ``python cookbook/<script>.py`` works from the repository root. Running every script with
no arguments as a subprocess is marked slow.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
COOKBOOK = ROOT / "cookbook"
MARKERS = {
    "react_agent.py": "bound:",
    "planner_graph.py": "bound:",
    "swap_retriever.py": "next planned tool among the bound tools",
    "record_refit.py": "seed + runs: MRR",
    "middleware_agent.py": "bound:",
    "fleet.py": "0 failed; each agent's first turn on v000002",
}
SCRIPTS = list(MARKERS)
TESTED_ELSEWHERE = {
    "cache_append.py": "tests/test_cache_append.py runs it on TaskBench-HF",
    "offline_agent.py": "tests/test_cookbook_offline.py runs it and checks docs/agents.md",
    "pydantic_ai_agent.py": "tests/test_pydantic_ai.py runs it with no network",
    "openai_agents_agent.py": "tests/test_openai_agents.py runs it with no network",
}


def load(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(COOKBOOK))
    spec = importlib.util.spec_from_file_location(f"cookbook_{name[:-3]}", COOKBOOK / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # typing.get_type_hints needs it
    spec.loader.exec_module(module)
    return module


def test_readme_lists_every_script() -> None:
    readme = (COOKBOOK / "README.md").read_text()
    scripts = sorted(p.name for p in COOKBOOK.glob("*.py") if not p.name.startswith("_"))
    assert scripts == sorted([*SCRIPTS, *TESTED_ELSEWHERE])
    for name in scripts:
        assert f"`{name}`" in readme


def test_react_agent(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert load("react_agent.py", monkeypatch).main(["--queries", "1"]) == 0
    out = capsys.readouterr().out
    assert "step 0: after (none)" in out
    assert "bound: get_email_address" in out
    assert "model answers: Done:" in out


def test_planner_graph(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert load("planner_graph.py", monkeypatch).main(["--queries", "2", "--mode", "soft"]) == 0
    out = capsys.readouterr().out
    assert out.count("===") == 2 and "bound:" in out and "model calls:" in out


def test_swap_retriever(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = load("swap_retriever.py", monkeypatch)
    assert script.main(["--queries", "1", "--retrievers", "dtdr-c,dr,no-such-retriever"]) == 0
    out = capsys.readouterr().out
    assert "skipping retrievers not in this installation: ['no-such-retriever']" in out
    assert "##### retriever dtdr-c" in out and "##### retriever dr" in out
    assert "dtdr-c: 5/5 steps" in out


def test_record_refit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = load("record_refit.py", monkeypatch)
    args = ["--seed-demos", "10", "--runs", "12", "--test", "10", "--out", str(tmp_path)]
    assert script.main(args) == 0
    out = capsys.readouterr().out
    assert "recorded 12 runs" in out
    assert (tmp_path / "runs.jsonl").read_text().count("\n") == 12
    assert (tmp_path / "model").is_dir()
    assert "seed + runs: MRR" in out


def test_fleet(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = load("fleet.py", monkeypatch)
    args = ["--encoder", "tfidf", "--agents", "2", "--runs", "12", "--after", "1.5"]
    assert script.main([*args, "--json", str(tmp_path / "fleet.json")]) == 0
    out = capsys.readouterr().out
    assert "0 failed; each agent's first turn on v000002" in out
    figures = json.loads((tmp_path / "fleet.json").read_text())
    assert figures["failed"] == 0 and all(s is not None for s in figures["takeup_s"].values())


def test_middleware_agent(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        load("middleware_agent.py", monkeypatch).main(["--queries", "1", "--mode", "hard_weighted"])
        == 0
    )
    out = capsys.readouterr().out
    assert "step 0: after (none)" in out and "answer: Done:" in out


def test_script_runs_standalone() -> None:
    """``python cookbook/react_agent.py`` from the repository root (TF-IDF: no model load)."""
    proc = subprocess.run(
        [sys.executable, "cookbook/react_agent.py", "--encoder", "tfidf", "--queries", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "step 0: after (none)" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", SCRIPTS)
def test_scripts_run_with_no_arguments(name: str) -> None:
    proc = subprocess.run(
        [sys.executable, f"cookbook/{name}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert MARKERS[name] in proc.stdout
