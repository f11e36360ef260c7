"""A live recording (issue 20, item 3): its last line may be partial while a refit reads it.

A last line without a trailing newline that does not parse is being written: it is skipped
with a warning and a problem. Any other bad line (in the middle, or last but ended by a
newline) is still an error naming the file and the line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtdr_agents.foundation.errors import DatasetFormatError
from dtdr_agents.retrievers import make_retriever
from dtdr_agents.runtime.recording import DemonstrationRecorder, PartialLineWarning, load_recording

TOOLS = [
    {"name": "get_weather", "description": "Weather forecast for a city."},
    {"name": "web_search", "description": "Search the web."},
    {"name": "create_note", "description": "Create a note."},
]


def recorder(tmp_path: Path) -> tuple[DemonstrationRecorder, Path]:
    """A recording of two runs, and its tools file."""
    rec = DemonstrationRecorder(tmp_path / "runs.jsonl", tools=TOOLS)
    tools = rec.write_tools(tmp_path / "tools.json", TOOLS)
    rec.record("weather in Oslo", ["get_weather"])
    rec.record("search the web and note it", ["web_search", "create_note"])
    return rec, tools


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(text)


def test_a_partial_last_line_is_skipped_with_a_warning(tmp_path: Path) -> None:
    rec, tools = recorder(tmp_path)
    torn = json.dumps({"query": "note the weather", "calls": ["get_weather", "create_note"]})
    append(rec.path, torn[:25])  # a writer is half-way through the third line
    with pytest.warns(PartialLineWarning, match=r"runs\.jsonl:3: .*no trailing newline"):
        data = rec.load(tools)
    assert [d.query for d in data.demos] == ["weather in Oslo", "search the web and note it"]
    notes = [p for p in data.problems if p.where == f"{rec.path}:3"]
    assert len(notes) == 1 and "skipped" in notes[0].message
    assert "being written" in notes[0].message
    refit = make_retriever("bm25").fit(data.demos, data.tools)  # the refit goes through
    assert set(refit.tools_.names) == {t["name"] for t in TOOLS}

    with pytest.warns(PartialLineWarning):  # another process reading the same file
        again = load_recording(rec.path, tools)
    assert again.demos == data.demos

    append(rec.path, torn[25:] + "\n")  # the writer finishes the line
    done = load_recording(rec.path, tools)
    assert [d.query for d in done.demos][-1] == "note the weather"
    assert not [p for p in done.problems if p.where == f"{rec.path}:3"]


def test_a_complete_last_line_without_a_newline_is_read(tmp_path: Path) -> None:
    rec, tools = recorder(tmp_path)
    append(rec.path, json.dumps({"query": "weather in Rome", "calls": ["get_weather"]}))
    data = rec.load(tools)
    assert [d.query for d in data.demos][-1] == "weather in Rome"


def test_a_bad_line_in_the_middle_is_still_an_error(tmp_path: Path) -> None:
    rec, tools = recorder(tmp_path)
    lines = rec.path.read_text(encoding="utf-8").splitlines(keepends=True)
    rec.path.write_text(lines[0] + '{"query": "torn\n' + lines[1], encoding="utf-8")
    with pytest.raises(DatasetFormatError, match=r"runs\.jsonl:2: invalid JSON") as caught:
        rec.load(tools)
    assert caught.value.path == str(rec.path) and caught.value.line == 2

    append(rec.path, '{"query": "partial')  # a partial last line does not hide it
    with pytest.raises(DatasetFormatError, match=r"runs\.jsonl:2: invalid JSON"):
        load_recording(rec.path, tools)


def test_a_bad_last_line_ended_by_a_newline_is_still_an_error(tmp_path: Path) -> None:
    rec, tools = recorder(tmp_path)
    append(rec.path, '{"query": "broken"\n')  # complete (ends with a newline), not JSON
    with pytest.raises(DatasetFormatError, match=r"runs\.jsonl:3: invalid JSON"):
        rec.load(tools)


def test_fit_on_a_live_recording_from_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`dtdr-agents fit` reads a recording that a running agent is appending to."""
    from dtdr_agents import cli

    rec, tools = recorder(tmp_path)
    append(rec.path, '{"query": "note the wea')  # a writer is half-way through line 3
    out = tmp_path / "model"
    argv = ["fit", "--dataset", "jsonl", "--path", str(rec.path), "--tools", str(tools)]
    assert cli.main([*argv, "--retriever", "bm25", "-o", str(out)]) == 0
    assert (out / "manifest.json").is_file()
    rec.path.write_text(
        rec.path.read_text(encoding="utf-8").replace('{"query": "note the wea', '{"q\n'),
        encoding="utf-8",
    )  # a bad line ended by a newline is an error naming the file and line
    assert cli.main([*argv, "--retriever", "bm25", "-o", str(tmp_path / "m2")]) == 2
    assert "runs.jsonl:3" in capsys.readouterr().err
