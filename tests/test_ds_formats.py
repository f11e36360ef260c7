"""The loaders' raw formats (pydantic models) and the ijson stream reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtdr_agents.datasets import _json, load_dataset
from dtdr_agents.foundation.errors import DatasetFormatError

FIX = Path(__file__).parent / "fixtures" / "datasets"


def test_stream_numbers_are_read_as_json_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    text = '[1, 12345678901234567890, 0.1, -0.0, 1E400, 2.5e-3, true, null, "x"]'
    path.write_text(text)
    got = [v for _, _, v in _json.iter_json_array(path)]
    assert got == json.loads(text)
    assert [type(v) for v in got] == [type(v) for v in json.loads(text)]


def test_stream_lines_in_a_file_with_long_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_json, "_CHUNK", 7)  # a record spans many pieces of one line
    path = tmp_path / "a.json"
    path.write_text('{"a": {"x": "' + "y" * 50 + '"},\n\n "b": [1, 2],\n "c": 3}\n')
    assert [(k, line) for k, line, _ in _json.iter_json_object(path)] == [
        ("a", 1),
        ("b", 3),
        ("c", 4),
    ]


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("", 1, "expected '[' at the start of the file (a JSON array), got end of file"),
        ('\n\n{"a": 1}', 3, "expected '[' at the start of the file (a JSON array), got '{'"),
        ("[1,\n2]\n\nx", 4, "unexpected data after the end of the document"),
        ("[1,\n2", 2, "unexpected end of file"),
    ],
)
def test_stream_errors_name_the_line(tmp_path: Path, text: str, line: int, reason: str) -> None:
    path = tmp_path / "a.json"
    path.write_text(text)
    with pytest.raises(DatasetFormatError) as info:
        list(_json.iter_json_array(path))
    assert info.value.line == line
    assert str(info.value) == f"{path}:{line}: invalid JSON: {reason}"


def _sealtools(tmp_path: Path, sample: dict[str, object]) -> Path:
    folder = tmp_path / "seal"
    folder.mkdir()
    tool = {"api_name": "a", "api_description": "d", "parameters": {}, "required": []}
    (folder / "tool.jsonl").write_text(json.dumps(tool) + "\n")
    (folder / "dev.jsonl").write_text(json.dumps(sample) + "\n")
    return folder


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        ({"query": "q"}, "missing field 'calling' (a list of calls)"),
        ({"query": "q", "calling": [{"api": 3}]}, "field 'calling[0].api'"),
        (
            {"query": "q", "calling": [{"api": "a", "responses": [1]}]},
            "field 'calling[0].responses[0]'",
        ),
    ],
)
def test_bad_records_name_file_line_and_field(
    tmp_path: Path, sample: dict[str, object], message: str
) -> None:
    folder = _sealtools(tmp_path, sample)
    with pytest.raises(DatasetFormatError) as info:
        load_dataset("sealtools", folder, split="dev")
    assert str(info.value).startswith(f"{folder / 'dev.jsonl'}:1: ")
    assert message in str(info.value)
    skipped = load_dataset("sealtools", folder, split="dev", skip_bad=True)
    assert len(skipped) == 0
    assert [p.where for p in skipped.problems] == [f"{folder / 'dev.jsonl'}:1"]
    assert message in skipped.problems[0].message


def test_whole_document_records_are_named_by_position(tmp_path: Path) -> None:
    folder = tmp_path / "tb"
    folder.mkdir()
    nodes = [{"id": "A", "desc": "a"}, {"id": 7}]
    (folder / "tool_desc.json").write_text(json.dumps({"nodes": nodes}))
    with pytest.raises(DatasetFormatError, match=r"field 'nodes\[1\]\.id'"):
        load_dataset("taskbench", folder, catalogue_only=True)
    ds = load_dataset("taskbench", folder, catalogue_only=True, skip_bad=True)
    assert [t.name for t in ds.tools] == ["A"]


def test_tinyagent_errors_name_the_sample(tmp_path: Path) -> None:
    data = json.loads((FIX / "tinyagent" / "training_data.json").read_text())
    key = next(iter(data))
    plan = next(o for o in data[key]["output"] if o.get("type") == "plan")
    plan["parsed_output"][0]["tool_name"] = ""
    path = tmp_path / "training_data.json"
    path.write_text(json.dumps(data, indent=1))
    with pytest.raises(DatasetFormatError) as info:
        load_dataset("tinyagent", path)
    assert f"sample {key!r}: field 'output[" in str(info.value)
    assert "].parsed_output[0].tool_name'" in str(info.value)


def test_loaders_check_their_common_options(tmp_path: Path) -> None:
    from dtdr_agents.datasets import load_jsonl, load_rectools

    tiny = FIX / "ptr" / "Tiny_QT.json"
    unexpected = r"load_rectools\(\) got an unexpected keyword argument 'x'"
    with pytest.raises(TypeError, match=unexpected):
        load_rectools(tiny, x=1)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="unknown_tools"):
        load_rectools(tiny, unknown_tools="drop")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit"):
        load_rectools(FIX / "ptr" / "Tiny_QT.json", limit=-1)
    with pytest.raises(TypeError, match="it takes keep_duplicates, limit, skip_bad, tools_path"):
        load_dataset("rectools", FIX / "ptr" / "Tiny_QT.json", order="recorded")
    # load_jsonl keeps its own default: a call to a tool missing from the tools file is an error
    demos = tmp_path / "demos.jsonl"
    demos.write_text('{"query": "q", "calls": ["nope"]}\n')
    with pytest.raises(DatasetFormatError, match=r"demos\.jsonl:1: calls\[0\] = 'nope' is not in"):
        load_jsonl(demos, FIX / "jsonl" / "tools.json")
