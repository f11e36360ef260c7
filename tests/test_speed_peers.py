"""`dtdr-agents speed --peers`: hybrid beside graph-tool-call and bigtool's store, per step."""

from __future__ import annotations

import importlib.metadata
import json
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from dtdr_agents.cli import main
from dtdr_agents.evaluation import perf
from dtdr_agents.evaluation.docsync import render

ROOT = Path(__file__).resolve().parents[1]
TARGET = "langchain_dtdr.peers:make_peers"
PEERS = {"hybrid", "graph-tool-call", "bigtool store"}


def _registered(
    monkeypatch: pytest.MonkeyPatch, found: list[importlib.metadata.EntryPoint]
) -> None:
    """`entry_points(group=PEERS_GROUP)` finds `found` (the installed metadata may be older)."""
    real = importlib.metadata.entry_points

    def entry_points(**kwargs: object) -> object:
        if kwargs.get("group") == perf.PEERS_GROUP:
            return [ep for ep in found if kwargs.get("name") in (None, ep.name)]
        return real(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def _entry_point() -> importlib.metadata.EntryPoint:
    return importlib.metadata.EntryPoint(name="peers", value=TARGET, group=perf.PEERS_GROUP)


def test_pyproject_registers_the_peers_and_the_hint_names_real_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["entry-points"][perf.PEERS_GROUP] == {"peers": TARGET}
    extras = project["optional-dependencies"]
    assert "dtdr-agents[langgraph,peer]" in perf.PEERS_INSTALL_HINT
    assert any(r.startswith("graph-tool-call") for r in extras["peer"])
    assert any(r.startswith("langgraph") for r in extras["langgraph"])


def test_speed_peers_times_every_peer_on_a_tiny_catalogue(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("graph_tool_call")
    pytest.importorskip("langgraph.store.memory")
    _registered(monkeypatch, [_entry_point()])
    # the fit is not timed: skip the hybrid's choice of its pull (most of a tiny fit)
    monkeypatch.setattr("dtdr_agents.retrievers.hybrid.L2_SELECT_ROWS", 0)
    out = tmp_path / "peers.json"
    argv = ["speed", "--peers", "--limit", "40", "--queries", "3", "-k", "3", "--json", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["kind"] == "speed-peers"
    assert data["dataset"] == "demo" and data["k"] == 3 and data["n_tools"] == 21
    assert set(data["peers"]) == PEERS
    assert "--peers" in data["provenance"]["command"]
    assert set(data["passes"]) == set(perf.PEER_PASSES)
    for one in data["passes"].values():
        assert one["encoding"]
        assert set(one["peers"]) == PEERS
        for name, f in one["peers"].items():
            assert f["n"] == data["n_steps"] > data["n_test_requests"] > 0
            assert 0 < f["p50_ms"] <= f["p95_ms"]
            assert f["ratio_p50"] > 0 and f["ratio_p95"] > 0
            if name == "hybrid":
                assert f["ratio_p50"] == f["ratio_p95"] == 1.0
    for name in PEERS:  # a printed row per pass and peer
        assert sum(f"| {name} |" in line for line in printed.splitlines()) == 2
    body = render(f"peers {out.name}", tmp_path, where="test")  # the docs table
    assert all(f"| {name} |" in body for name in PEERS)


@pytest.mark.parametrize("missing", ["graph_tool_call", "langgraph.store.memory"])
def test_without_the_packages_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], missing: str
) -> None:
    _registered(monkeypatch, [_entry_point()])
    for module in ("langchain_dtdr.peers", "langchain_dtdr.bigtool"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setitem(sys.modules, missing, None)  # import fails as if not installed
    assert main(["speed", "--peers", "--limit", "20", "--queries", "1"]) == 2
    err = capsys.readouterr().err
    assert perf.PEERS_INSTALL_HINT in err and missing in err


def test_without_a_provider_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _registered(monkeypatch, [])
    assert main(["speed", "--peers", "--limit", "20"]) == 2
    assert perf.PEERS_INSTALL_HINT in capsys.readouterr().err


class _Counting:
    id = "counting"
    dim = 2

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.ones((len(texts), 2), dtype=np.float32)


def test_pass_encoder_encodes_every_call_until_cached() -> None:
    inner = _Counting()
    enc = perf.PassEncoder(inner)
    enc.encode(["a"])
    enc.encode(["a"])
    assert inner.calls == [["a"], ["a"]]  # the "encoding included" pass keeps nothing
    enc.cached = True
    enc.encode(["a", "b"])
    enc.encode(["a", "b"])
    assert inner.calls[2:] == [["a", "b"]]  # the "search only" pass: encoded once, then looked up
