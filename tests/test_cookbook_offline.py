"""docs/agents.md's offline agent is `cookbook/offline_agent.py`, and it runs offline.

The docs block is the file verbatim and the output shown is what the file prints, so neither
can drift. In process the script runs with every socket refused; the slow test runs it as
``python cookbook/offline_agent.py`` with no API key in its environment.
"""

from __future__ import annotations

import os
import re
import runpy
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "cookbook" / "offline_agent.py"
DOCS = ROOT / "docs" / "agents.md"
PLAN = ("open_file", "summarize_pdf", "get_email_address", "compose_email")
UPDATE = "run `python cookbook/offline_agent.py` and paste its output into docs/agents.md"


def _block(marker: str, language: str) -> str:
    found = re.findall(
        rf"<!-- {marker}[^>]*-->\n```{language}\n(.*?)```\n<!-- /{marker} -->",
        DOCS.read_text(encoding="utf-8"),
        flags=re.S,
    )
    assert len(found) == 1, f"docs/agents.md needs exactly one {marker} block"
    return str(found[0])


def test_the_docs_show_the_cookbook_file_verbatim() -> None:
    assert _block("offline-agent", "python") == SCRIPT.read_text(encoding="utf-8")


def _check_output(out: str) -> None:
    lines = out.splitlines()
    steps = [line for line in lines if line.startswith("step ")]
    assert len(steps) == len(PLAN) + 1  # one selection per model call
    for i, line in enumerate(steps[: len(PLAN)]):
        assert line.startswith(f"step {i}, after {(['the request', *PLAN])[i]}: bound ")
        assert PLAN[i] in line.split(": bound ")[1].split(", ")  # the next tool was bound
    assert lines[-1] == f"answer: Done: {' -> '.join(PLAN)}."
    assert out == _block("offline-agent-output", "text"), UPDATE


def _no_network(*args: Any, **kwargs: Any) -> Any:
    raise OSError("the offline agent tried to open a network connection")


def test_the_offline_agent_runs_with_no_network_and_no_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key in [k for k in os.environ if k.endswith("_API_KEY")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket.socket, "connect", _no_network)
    monkeypatch.setattr(socket, "create_connection", _no_network)
    runpy.run_path(str(SCRIPT), run_name="__main__")
    _check_output(capsys.readouterr().out)


@pytest.mark.slow
def test_the_offline_agent_runs_as_a_script() -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update({"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    done = subprocess.run(
        [sys.executable, str(SCRIPT.relative_to(ROOT))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    _check_output(done.stdout)
