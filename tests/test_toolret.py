"""The ToolRet loader: set-valued tasks, kept instructions, file-and-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dtdr_agents.datasets import ToolRetDataset, load_dataset, load_toolret, load_train_test
from dtdr_agents.foundation.errors import DatasetFormatError

TOOLS: list[dict[str, Any]] = [
    {
        "id": "t_0",
        "documentation": {
            "name": "GetUserToken",
            "description": "Get a user token from a username and a password.",
            "parameters": [
                {"name": "username", "schema": {"type": "str"}, "description": "The user."},
                {"name": "password", "schema": {"type": "str"}, "description": "The secret."},
            ],
        },
        "type": "web",
    },
    {
        "id": "t_1",
        "documentation": {
            "name": "kronecker",
            "func_description": "def kronecker(shape1, shape2): ...",
            "description": "",
        },
        "type": "code",
    },
    {"id": "t_2", "documentation": {"name": "GetUserToken", "description": "A second one."}},
    {"id": "t_3", "documentation": {"description": "No name at all."}},
]


def _query(qid: str, labels: list[Any], **extra: Any) -> dict[str, Any]:
    return {"id": qid, "query": f"request {qid}", "labels": labels, "category": "x", **extra}


def _label(tid: str, relevance: int = 1) -> dict[str, Any]:
    return {"id": tid, "doc": {}, "relevance": relevance}


def write_task(folder: Path, queries: list[Any], tools: list[Any] = TOOLS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tools.json").write_text(json.dumps(tools, indent=2))
    (folder / "queries.json").write_text(json.dumps(queries, indent=2))
    return folder


def test_loads_a_task_as_a_set_valued_dataset_with_instructions(tmp_path: Path) -> None:
    queries = [
        _query("q0", [_label("t_0"), _label("t_1")], instruction="Given a `login` task, ..."),
        _query("q1", [_label("t_1"), _label("t_2", relevance=0)], instruction="Compute shapes"),
        _query("q2", [_label("t_3")]),
    ]
    data = load_dataset("toolret", write_task(tmp_path / "task", queries))
    assert isinstance(data, ToolRetDataset) and data.set_valued and data.name == "toolret"
    assert data.tools.names == ("GetUserToken", "kronecker", "t_2", "t_3")
    assert data.tools.get("GetUserToken").parameters["properties"]["username"] == {
        "type": "string",
        "description": "The user.",
    }
    assert "def kronecker" in data.tools.get("kronecker").description  # no description: signature
    assert [d.calls for d in data.demos] == [
        ("GetUserToken", "kronecker"),
        ("kronecker",),
        ("t_3",),
    ]
    assert all(d.edges == () for d in data.demos)
    assert data.instruction(data.demos[0]) == "Given a `login` task, ..."
    assert data.instruction(data.demos[2]) is None
    messages = [str(p) for p in data.problems]
    assert any("tools.json:" in m and "'GetUserToken' is taken" in m for m in messages)
    assert any("no documentation name" in m for m in messages)
    assert any("q2" in m and "no instruction" in m for m in messages)


def test_malformed_query_names_file_and_line(tmp_path: Path) -> None:
    queries = [_query("q0", [_label("t_0")]), _query("q1", "not a list")]
    folder = write_task(tmp_path / "task", queries)
    with pytest.raises(DatasetFormatError, match=r"queries\.json:\d+: field 'labels'") as err:
        load_toolret(folder)
    text = (folder / "queries.json").read_text().splitlines()
    assert '"id": "q1"' in text[err.value.line] or '"id": "q1"' in "".join(
        text[err.value.line - 1 : err.value.line + 2]
    )
    skipped = load_toolret(folder, skip_bad=True)
    assert len(skipped.demos) == 1
    assert any("skipped: field 'labels'" in str(p) for p in skipped.problems)


def test_bad_instruction_and_unknown_label(tmp_path: Path) -> None:
    folder = write_task(tmp_path / "a", [_query("q0", [_label("t_0")], instruction=3)])
    with pytest.raises(DatasetFormatError, match=r"field 'instruction': .*valid string, got int"):
        load_toolret(folder)
    folder = write_task(
        tmp_path / "b", [_query("q0", [_label("nope")]), _query("q1", [_label("t_0")])]
    )
    data = load_toolret(folder)
    assert len(data.demos) == 1 and any("'nope'" in str(p) for p in data.problems)
    with pytest.raises(DatasetFormatError, match="'nope'"):
        load_toolret(folder, unknown_tools="error")


def test_missing_files_are_named(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetFormatError, match=r"queries\.json"):
        load_toolret(tmp_path / "empty")
    (tmp_path / "empty" / "queries.json").write_text("[]")
    with pytest.raises(DatasetFormatError, match=r"tools\.json"):
        load_toolret(tmp_path / "empty")
    bad_tool = write_task(tmp_path / "c", [], tools=[{"id": "t", "documentation": "text"}])
    with pytest.raises(DatasetFormatError, match=r"tools\.json:2: tool 't': field 'documentation'"):
        load_toolret(bad_tool)


def test_split_keeps_the_instructions(tmp_path: Path) -> None:
    queries = [
        _query(f"q{i}", [_label(f"t_{i % 2}")], instruction=f"instruction {i}") for i in range(10)
    ]
    train, test = load_train_test("toolret", write_task(tmp_path / "task", queries), seed=1)
    assert isinstance(test, ToolRetDataset) and test.set_valued
    assert len(train.demos) + len(test.demos) == 10
    for demo in test.demos:
        assert test.instruction(demo) == "instruction " + demo.query.split("q")[-1]


@pytest.mark.parametrize(
    ("task", "n_queries", "n_tools"), [("apibank", 101, 101), ("toolink", 497, 1804)]
)
def test_published_tasks(shared_datasets: Path, task: str, n_queries: int, n_tools: int) -> None:
    data = load_toolret(shared_datasets / "toolret" / task)
    assert len(data.demos) == n_queries and len(data.tools) == n_tools
    assert len(data.instructions) == n_queries
    sizes = {len(d.calls) for d in data.demos}
    assert min(sizes) == 1 and max(sizes) <= 5
    assert data.demos[0].id == f"{task}_query_0"
