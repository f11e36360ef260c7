"""Run a cookbook script in process with every socket refused and no API key (tests only)."""

from __future__ import annotations

import os
import runpy
import socket
from pathlib import Path

import pytest

COOKBOOK = Path(__file__).resolve().parents[1] / "cookbook"


def _no_network(*args: object, **kwargs: object) -> None:
    raise OSError("the cookbook example tried to open a network connection")


def run_offline(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> list[str]:
    """The lines `cookbook/<name>` prints, run with no network and no ``*_API_KEY``."""
    for key in [k for k in os.environ if k.endswith("_API_KEY")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket.socket, "connect", _no_network)
    monkeypatch.setattr(socket, "create_connection", _no_network)
    monkeypatch.syspath_prepend(str(COOKBOOK))  # the scripts import their shared data
    runpy.run_path(str(COOKBOOK / name), run_name="__main__")
    return capsys.readouterr().out.splitlines()
