"""Recording demonstrations from runs into the JSONL format `dtdr-agents fit` reads."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from dtdr_agents.cli import main as cli_main
from dtdr_agents.datasets.jsonl import load_jsonl
from dtdr_agents.datasets.synthetic import DEMO_TOOLS
from dtdr_agents.foundation.errors import InvalidDemonstrationError
from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.retrievers import load_retriever
from dtdr_agents.runtime.recording import DemonstrationRecorder, plan_from_steps

TOOLS = Toolset(DEMO_TOOLS)


def test_plan_from_steps() -> None:
    assert plan_from_steps([["a"], ["b"], ["c"]]) == (("a", "b", "c"), None)
    calls, edges = plan_from_steps([["a", "b"], ["c"], [], ["d", "e"]])
    assert calls == ("a", "b", "c", "d", "e")
    assert edges == ((0, 2), (1, 2), (2, 3), (2, 4))
    assert plan_from_steps([]) == ((), None)
    # parallel calls of one step may come in any order; steps keep their order
    demo = Demonstration("q", calls, edges)
    assert demo.acceptable_next(0) == {"a", "b"}
    assert demo.acceptable_next(2) == {"c"}
    assert demo.acceptable_next(3) == {"d", "e"}


def test_recorder_writes_the_jsonl_format(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "runs.jsonl"
    rec = DemonstrationRecorder(path, tools=TOOLS)
    d1 = rec.record("  Email Bob the notes ", steps=[["get_email_address"], ["compose_email"]])
    d2 = rec.record(
        "Text Ann and Bob", steps=[["get_phone_number", "get_phone_number"], ["send_sms"]]
    )
    d3 = rec.record("Weather?", calls=["get_weather"], id="mine-1")
    assert d1 is not None and d2 is not None and d3 is not None
    lines = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    assert lines[0]["query"] == "Email Bob the notes"
    assert lines[0]["calls"] == ["get_email_address", "compose_email"]
    assert "edges" not in lines[0]  # strict order
    assert lines[0]["id"].startswith("run-")
    assert lines[1]["edges"] == [[0, 2], [1, 2]]
    assert lines[2] == {"query": "Weather?", "calls": ["get_weather"], "id": "mine-1"}
    assert set(lines[0]) <= {"query", "calls", "edges", "id"}
    assert len(rec) == 3

    data = load_jsonl(path)
    assert [d.calls for d in data.demos] == [d1.calls, d2.calls, d3.calls]
    assert data.demos[1].edges == d2.edges
    tools_path = rec.write_tools(tmp_path / "tools.json", TOOLS)
    assert Toolset(json.loads(tools_path.read_text("utf-8"))) == TOOLS
    loaded = rec.load()
    assert loaded.tools == TOOLS  # the recorder's catalogue is written next to the file
    assert len(loaded.demos) == 3


def test_recorder_skips_and_rejects(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    rec = DemonstrationRecorder(path, tools=TOOLS, min_calls=1)
    assert rec.record("hello", calls=[]) is None  # no calls: skipped
    assert rec.record("q", calls=["web_search"]) is not None
    assert rec.record("q ", calls=["web_search"]) is None  # duplicate
    assert rec.skipped == 2
    # a new recorder on the same file still knows the duplicates
    again = DemonstrationRecorder(path)
    assert again.record("q", calls=["web_search"]) is None
    assert again.record("q", calls=["web_search", "create_note"]) is not None
    with pytest.raises(InvalidDemonstrationError, match="not in the tool catalogue"):
        rec.record("q", calls=["teleport"])
    with pytest.raises(InvalidDemonstrationError, match="exactly one of"):
        rec.record("q", calls=["web_search"], steps=[["web_search"]])
    with pytest.raises(InvalidDemonstrationError, match="'query'"):
        rec.record("  ", calls=["web_search"])
    with pytest.raises(ValueError, match="min_calls"):
        DemonstrationRecorder(path, min_calls=-1)
    assert len(path.read_text("utf-8").splitlines()) == 2


def test_recorder_is_thread_safe(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    rec = DemonstrationRecorder(path)

    def work(worker: int) -> None:
        for i in range(50):
            rec.record(f"request {worker}-{i}", steps=[["a", "b"], ["c"]])

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = path.read_text("utf-8").splitlines()
    assert len(lines) == 200
    assert all(json.loads(line)["calls"] == ["a", "b", "c"] for line in lines)


def test_cli_fits_on_recorded_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """run -> record -> `dtdr-agents fit --dataset jsonl` (the loop the recorder exists for)."""
    from dtdr_agents.datasets.synthetic import make_demo_dataset

    rec = DemonstrationRecorder(tmp_path / "runs.jsonl", tools=TOOLS)
    for demo in make_demo_dataset(60, seed=3).demos:
        rec.record(demo.query, calls=demo.calls, edges=demo.edges)
    tools_path = rec.write_tools(tmp_path / "tools.json", TOOLS)
    out = tmp_path / "model"
    # The DR baseline (one cluster, order 1) keeps this test fast; any id works the same way.
    code = cli_main(
        [
            "fit",
            "--dataset",
            "jsonl",
            "--path",
            str(rec.path),
            "--tools",
            str(tools_path),
            "--retriever",
            "dr",
            "-o",
            str(out),
        ]
    )
    assert code == 0
    model = load_retriever(out)
    assert model.tools_ == TOOLS
    ranking = model.rank("email Bob", ["get_email_address"])
    assert ranking.ranked_names()[0] in TOOLS.names
    assert "saved dr" in capsys.readouterr().out
