"""Bad API inputs and bad dataset bytes give clear errors naming the argument, file and line."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from dtdr_agents import Demonstration, SelectionPolicy
from dtdr_agents.datasets.jsonl import load_jsonl
from dtdr_agents.foundation.errors import DatasetFormatError, InvalidDemonstrationError
from dtdr_agents.foundation.types import Ranking, as_history

FIX = Path(__file__).parent / "fixtures" / "datasets" / "jsonl"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"k": 2.5}, "k"),
        ({"k": math.nan}, "k"),
        ({"k": True}, "k"),
        ({"k": "3"}, "k"),
        ({"k": 0}, "k"),
        ({"min_k": 1.5}, "min_k"),
        ({"threshold": math.nan}, "threshold"),
        ({"threshold": "0.1"}, "threshold"),
        ({"coverage": math.nan}, "coverage"),
        ({"coverage": 1.5}, "coverage"),
    ],
)
def test_selection_policy_rejects_bad_numbers(kwargs, field):
    with pytest.raises(ValueError, match=rf"SelectionPolicy\.{field} "):
        SelectionPolicy(**kwargs)


def test_ranking_top_rejects_negative_and_fractional_k():
    ranking = Ranking(names=("a", "b"), probabilities=np.array([0.6, 0.4]))
    assert [t.name for t in ranking.top(1)] == ["a"]
    assert ranking.top(0) == []
    for bad in (-1, 2.5, "1"):
        with pytest.raises(ValueError, match=r"Ranking\.top: k"):
            ranking.top(bad)


@pytest.mark.parametrize("bad", [5, 2.5, {"a": 1}, b"ab", [1, "a"]])
def test_history_must_be_names(bad):
    with pytest.raises(TypeError, match="history"):
        as_history(bad)


@pytest.mark.parametrize("edges", [[("a", 1)], [(0,)], [(0, 1, 2)], "01", [(0.5, 1)], [None]])
def test_edges_must_be_integer_pairs(edges):
    with pytest.raises(InvalidDemonstrationError, match="field 'edges'"):
        Demonstration("q", ("a", "b"), edges=edges)


def _lines(*records: dict) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def test_latin1_byte_names_file_and_line_and_skip_bad_skips_it(tmp_path):
    good = {"query": "search flights", "calls": ["search_flights"]}
    path = tmp_path / "demos.jsonl"
    path.write_bytes(
        _lines(good) + b'{"query": "caf\xe9", "calls": ["get_weather"]}\n' + _lines(good)
    )
    with pytest.raises(DatasetFormatError, match=r"demos.jsonl:2: not UTF-8 text: byte 0xe9"):
        load_jsonl(path, FIX / "tools.json")
    ds = load_jsonl(path, FIX / "tools.json", skip_bad=True, keep_duplicates=True)
    assert len(ds.demos) == 2
    assert any(p.where.endswith(":2") and "UTF-8" in p.message for p in ds.problems)


def test_utf8_bom_is_accepted(tmp_path):
    demos = tmp_path / "demos.jsonl"
    demos.write_bytes(b"\xef\xbb\xbf" + (FIX / "demos.jsonl").read_bytes())
    tools = tmp_path / "tools.json"
    tools.write_bytes(b"\xef\xbb\xbf" + (FIX / "tools.json").read_bytes())
    plain = load_jsonl(FIX / "demos.jsonl", FIX / "tools.json", skip_bad=True)
    with_bom = load_jsonl(demos, tools, skip_bad=True)
    assert [d.query for d in with_bom.demos] == [d.query for d in plain.demos]
    assert len(with_bom.problems) == len(plain.problems)


def test_tools_file_not_utf8_names_the_line(tmp_path):
    tools = tmp_path / "tools.json"
    tools.write_bytes(b'[\n {"name": "a", "description": "caf\xe9"}\n]\n')
    with pytest.raises(DatasetFormatError, match=r"tools.json:2: not UTF-8"):
        load_jsonl(FIX / "demos.jsonl", tools)


# ------------------------------------------------------------------ recorder and kill -9

_WRITER = textwrap.dedent(
    """
    import sys
    from dtdr_agents.runtime.recording import DemonstrationRecorder
    rec = DemonstrationRecorder(sys.argv[1], dedupe=False)
    query = "x" * 200_000  # a long line, so that a kill lands inside a write often
    i = 0
    while True:
        rec.record(f"{i} {query}", ["a", "b"])
        i += 1
    """
)


def test_record_after_a_torn_line_starts_on_a_fresh_line(tmp_path):
    from dtdr_agents.runtime.recording import DemonstrationRecorder

    path = tmp_path / "runs.jsonl"
    path.write_text('{"query": "ok", "calls": ["a"]}\n{"query": "torn", "cal', encoding="utf-8")
    DemonstrationRecorder(path).record("next one", ["a"])
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[-1].startswith('{"query": "next one"') and lines[1].endswith('"cal')
    ds = load_jsonl(path, skip_bad=True)
    assert [d.query for d in ds.demos] == ["ok", "next one"]
    assert any(p.where.endswith(":2") for p in ds.problems)


def test_kill_9_during_appends_loses_no_later_record(tmp_path):
    from dtdr_agents.runtime.recording import DemonstrationRecorder

    path = tmp_path / "runs.jsonl"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    recorded_after = 0
    for trial in range(4):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], env=env)
        deadline = time.monotonic() + 20
        while (not path.exists() or path.stat().st_size < (trial + 1) * 400_000) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        DemonstrationRecorder(path, dedupe=False).record(f"after kill {trial}", ["a"])
        recorded_after += 1
    ds = load_jsonl(path, skip_bad=True, keep_duplicates=True)
    after = [d.query for d in ds.demos if d.query.startswith("after kill")]
    assert after == [f"after kill {t}" for t in range(recorded_after)]
    assert len(ds.demos) > recorded_after  # the killed writers did write
    torn = [p for p in ds.problems if "invalid JSON" in p.message or "UTF-8" in p.message]
    assert all(p.where.rsplit(":", 1)[1].isdigit() for p in torn)  # reported by line
