"""Tests for dtdr_agents.datasets: loaders (fixtures and published files), plans, split, stats."""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from pathlib import Path

import pytest

from dtdr_agents.datasets import (
    DATASET_IDS,
    Dataset,
    DatasetNotFoundError,
    PlanCycleError,
    _json,
    dataset_stats,
    format_stats,
    load_dataset,
    load_jsonl,
    load_metatool,
    load_nestful,
    load_ptr,
    load_rectools,
    load_sealtools,
    load_taskbench,
    load_taskbench_catalogue,
    load_tinyagent,
    load_train_test,
    order_plan,
    split_dataset,
    split_demonstrations,
)
from dtdr_agents.foundation.errors import DatasetFormatError, InvalidDemonstrationError
from dtdr_agents.foundation.types import Demonstration, Toolset

FIX = Path(__file__).parent / "fixtures" / "datasets"
DATA = Path(__file__).resolve().parents[2] / "shared" / "datasets"

published = pytest.mark.skipif(
    not DATA.is_dir(), reason=f"the published datasets are not available at {DATA}"
)


def _count(ds: Dataset, text: str, action: str | None = None) -> int:
    return sum(
        1
        for p in ds.problems
        if text in p.message and (action is None or p.message.startswith(action + ":"))
    )


def _copy_with_line(src: Path, dst: Path, line_no: int, text: str) -> Path:
    lines = src.read_text(encoding="utf-8").splitlines()
    lines.insert(line_no - 1, text)
    dst.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dst


def _check_consistent(ds: Dataset) -> None:
    """Every call is in the catalogue and every edge points forward (Demonstration checks)."""
    for d in ds.demos:
        d.check_tools(ds.tools)
        for i, j in d.edges or ():
            assert i < j


# ============================================================================ plans


def test_order_plan_keeps_an_order_that_already_fits():
    plan = order_plan(["a", "b", "c"], [(0, 2), (1, 2)])
    assert plan.calls == ("a", "b", "c")
    assert plan.edges == ((0, 2), (1, 2))
    assert not plan.reordered


def test_order_plan_reorders_stably_and_remaps_edges():
    # listed alphabetically, but c -> a -> b
    plan = order_plan(["a", "b", "c", "d"], [(2, 0), (0, 1)])
    assert plan.calls == ("c", "a", "b", "d")
    assert plan.edges == ((0, 1), (1, 2))
    assert plan.order == (2, 0, 1, 3)
    assert plan.reordered
    # the result is a valid Demonstration
    Demonstration("q", plan.calls, plan.edges)


def test_order_plan_independent_calls_stay_in_recorded_order():
    plan = order_plan(["x", "y", "z"], [])
    assert plan.calls == ("x", "y", "z")
    assert plan.edges == ()


def test_order_plan_repeated_tools_and_duplicate_edges():
    plan = order_plan(["t", "s", "t"], [(1, 0), (1, 0), (0, 2)])
    assert plan.calls == ("s", "t", "t")
    assert plan.edges == ((0, 1), (1, 2))


def test_order_plan_none_edges_means_recorded_order():
    plan = order_plan(["b", "a"], None)
    assert plan.calls == ("b", "a")
    assert plan.edges is None


def test_order_plan_cycle_is_a_clear_error():
    with pytest.raises(PlanCycleError, match="cycle") as info:
        order_plan(["a", "b", "c"], [(0, 1), (1, 2), (2, 1)])
    assert "'b'" in str(info.value)
    assert "'c'" in str(info.value)
    assert info.value.cycle[0] == info.value.cycle[-1]
    assert set(info.value.cycle) == {1, 2}
    assert isinstance(info.value, InvalidDemonstrationError)


@pytest.mark.parametrize("edges", [[(0, 5)], [(1, 1)], [(-1, 0)]])
def test_order_plan_bad_edges(edges):
    with pytest.raises(InvalidDemonstrationError):
        order_plan(["a", "b"], edges)


# ============================================================================ generic JSONL


def test_jsonl_with_tools_file():
    ds = load_jsonl(FIX / "jsonl" / "demos.jsonl", FIX / "jsonl" / "tools.json")
    assert ds.name == "jsonl"
    assert ds.tools.names == ("search_flights", "book_flight", "get_weather")
    assert ds.tools.get("book_flight").description.startswith("Book a flight")  # OpenAI schema
    assert [d.id for d in ds.demos] == ["j1", "j2", "j3", "4"]
    assert ds.demos[0].edges == ((0, 1),)  # object calls read by "name"
    assert ds.demos[1].edges == ()  # [] -> independent
    assert ds.demos[2].calls == ("search_flights", "book_flight")  # reordered by its edge
    assert ds.demos[2].edges == ((0, 1),)
    assert ds.demos[3].edges is None  # no edges -> recorded order only
    assert ds.problems == ()


def test_jsonl_round_trips_demonstration_to_dict(tmp_path):
    demos = [
        Demonstration("q one", ("a", "b"), ((0, 1),), id="x"),
        Demonstration("q two", ("b",), None),
        Demonstration("q three", ("a", "c"), ()),
    ]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(d.to_dict()) + "\n" for d in demos), encoding="utf-8")
    ds = load_jsonl(path)
    assert tuple(ds.demos) == tuple(demos)


def test_jsonl_without_tools_file_builds_catalogue_and_says_so():
    ds = load_jsonl(FIX / "jsonl" / "demos.jsonl")
    assert set(ds.tools.names) == {"search_flights", "book_flight", "get_weather"}
    assert all(t.description == "" for t in ds.tools)
    assert len(ds.problems) == 1
    assert "no tools file" in ds.problems[0].message


def test_jsonl_malformed_line_names_file_and_line():
    path = FIX / "jsonl" / "bad_demos.jsonl"
    with pytest.raises(DatasetFormatError) as info:
        load_jsonl(path, FIX / "jsonl" / "tools.json")
    assert info.value.line == 2
    assert info.value.path == str(path)
    assert f"{path}:2:" in str(info.value)


def test_jsonl_skip_bad_records_every_skipped_line():
    ds = load_jsonl(FIX / "jsonl" / "bad_demos.jsonl", FIX / "jsonl" / "tools.json", skip_bad=True)
    assert [d.id for d in ds.demos] == ["j1", "j2"]
    lines = [int(p.where.rsplit(":", 1)[1]) for p in ds.problems]
    assert lines == [2, 3, 5, 6, 7]  # line 4 is blank: not a record
    assert all(p.message.startswith("skipped:") for p in ds.problems)
    assert "cycle" in ds.problems[3].message
    assert "'teleport'" in ds.problems[4].message


def test_jsonl_unknown_tools_policies():
    path, tools = FIX / "jsonl" / "bad_demos.jsonl", FIX / "jsonl" / "tools.json"
    lenient = load_jsonl(path, tools, skip_bad=True, unknown_tools="add")
    assert "teleport" in lenient.tools
    assert _count(lenient, "'teleport'", "kept") == 1
    with pytest.raises(ValueError, match="unknown_tools"):
        load_jsonl(path, tools, unknown_tools="ignore")  # type: ignore[arg-type]


def test_jsonl_limit_and_duplicates(tmp_path):
    path = tmp_path / "d.jsonl"
    line = json.dumps({"query": "q", "calls": ["a"]})
    path.write_text("\n".join([line, line, json.dumps({"query": "r", "calls": ["a"]})]))
    ds = load_jsonl(path)
    assert len(ds) == 2
    assert _count(ds, "exact duplicate", "skipped") == 1
    assert len(load_jsonl(path, keep_duplicates=True)) == 3
    assert len(load_jsonl(path, limit=1)) == 1
    with pytest.raises(ValueError, match="limit"):
        load_jsonl(path, limit=-1)


def test_jsonl_tools_file_as_jsonl_and_mapping(tmp_path):
    demos = tmp_path / "d.jsonl"
    demos.write_text(json.dumps({"query": "q", "calls": ["a", "b"]}) + "\n")
    as_lines = tmp_path / "tools.jsonl"
    as_lines.write_text(
        json.dumps({"name": "a", "description": "A"})
        + "\n"
        + json.dumps({"type": "function", "function": {"name": "b", "description": "B"}})
        + "\n"
    )
    as_map = tmp_path / "tools_map.json"
    as_map.write_text(json.dumps({"a": "A", "b": "B"}))
    for tools in (as_lines, as_map):
        ds = load_jsonl(demos, tools)
        assert [t.description for t in ds.tools] == ["A", "B"]


def test_jsonl_bad_or_duplicate_tool_names_line(tmp_path):
    demos = tmp_path / "d.jsonl"
    demos.write_text(json.dumps({"query": "q", "calls": ["a"]}) + "\n")
    tools = tmp_path / "tools.jsonl"
    tools.write_text(json.dumps({"name": "a"}) + "\n" + json.dumps({"name": "a"}) + "\n")
    with pytest.raises(DatasetFormatError, match="duplicate tool name") as info:
        load_jsonl(demos, tools)
    assert info.value.line == 2
    assert len(load_jsonl(demos, tools, skip_bad=True).tools) == 1


def test_missing_files_are_clear(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="demonstrations file not found") as info:
        load_jsonl(tmp_path / "nope.jsonl")
    assert isinstance(info.value, FileNotFoundError)
    assert isinstance(info.value, DatasetFormatError)
    assert "nope.jsonl" in str(info.value)


# ============================================================================ JSON streaming


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_streaming_json_readers_survive_any_chunk_boundary(monkeypatch, chunk):
    expected_obj = json.loads((FIX / "tinyagent" / "training_data.json").read_text())
    expected_arr = json.loads((FIX / "nestful" / "non-executable-tiny-data.json").read_text())
    monkeypatch.setattr(_json, "_CHUNK", chunk)
    obj = {k: v for k, _, v in _json.iter_json_object(FIX / "tinyagent" / "training_data.json")}
    arr = [
        v for _, _, v in _json.iter_json_array(FIX / "nestful" / "non-executable-tiny-data.json")
    ]
    assert obj == expected_obj
    assert arr == expected_arr


def test_streaming_reports_line_numbers(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('[\n  {"a": 1},\n\n  {"a": 2.5}, 3\n]\n')
    assert [(i, line) for i, line, _ in _json.iter_json_array(path)] == [(0, 2), (1, 4), (2, 4)]
    assert [v for _, _, v in _json.iter_json_array(path)] == [{"a": 1}, {"a": 2.5}, 3]


@pytest.mark.parametrize(
    ("text", "line"),
    [('[\n {"a": 1},\n {"a": }\n]', 3), ('[\n {"a": 1}\n {"a": 2}\n]', 3), ('[\n{"a": 1}', 2)],
)
def test_streaming_syntax_errors_name_the_line(tmp_path, text, line):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(DatasetFormatError) as info:
        list(_json.iter_json_array(path))
    assert info.value.line == line


# ============================================================================ TaskBench (fixture)


def test_taskbench_fixture_quirks_are_reported_not_fatal():
    ds = load_taskbench(FIX / "taskbench" / "data_tiny")
    assert ds.name == "taskbench"
    assert ds.tools.names == ("Image Captioning", "Translation", "Text-to-Speech")
    # the graph link to an unknown tool is dropped and reported
    assert ds.tool_graph == (
        ("Image Captioning", "Translation"),
        ("Translation", "Text-to-Speech"),
    )
    assert _count(ds, "'Summarisation'", "repaired") == 1
    by_id = {d.id: d for d in ds.demos}
    assert list(by_id) == ["101", "102", "104", "105", "108", "109", "101#2"]
    # nodes listed out of dependency order are reordered
    assert by_id["102"].calls == ("Image Captioning", "Translation")
    assert by_id["102"].edges == ((0, 1),)
    assert by_id["102"].query == "Caption photo.jpg and translate it to French."
    # links by index are read as positions
    assert by_id["104"].edges == ((0, 1),)
    # a link to a non-node is dropped, the sample kept
    assert by_id["105"].edges == ()
    # a repeated task: both calls kept, links to the nearest occurrences
    assert by_id["108"].calls == (
        "Image Captioning",
        "Translation",
        "Translation",
        "Text-to-Speech",
    )
    assert by_id["108"].edges == ((0, 1), (1, 2), (2, 3))
    # no user request: the instruction is the query; a DAG with two sources
    assert by_id["109"].query == "Caption and translate, then speak both."
    assert by_id["109"].calls == ("Image Captioning", "Translation", "Text-to-Speech")
    assert by_id["109"].edges == ((0, 2), (1, 2))
    assert _count(ds, "not in tool_desc.json", "skipped") == 1
    assert _count(ds, "exact duplicate", "skipped") == 1
    assert _count(ds, "cycle", "skipped") == 1
    assert _count(ds, "n_tools", "kept") == 2
    assert _count(ds, "by index", "repaired") == 1
    assert _count(ds, "not one of the task nodes", "repaired") == 1
    assert _count(ds, "occur more than once", "repaired") == 1
    assert _count(ds, "renamed to '101#2'", "repaired") == 1
    _check_consistent(ds)


def test_taskbench_unknown_tools_add_and_error():
    added = load_taskbench(FIX / "taskbench" / "data_tiny", unknown_tools="add")
    assert "Image Enhancement" in added.tools
    assert added.tools.get("Image Enhancement").description == ""
    assert _count(added, "not in tool_desc.json", "kept") == 1
    _check_consistent(added)
    with pytest.raises(DatasetFormatError, match="Image Enhancement") as info:
        load_taskbench(FIX / "taskbench" / "data_tiny", unknown_tools="error")
    assert info.value.line == 3


def test_taskbench_malformed_line_and_skip_bad(tmp_path):
    folder = tmp_path / "data_tiny"
    shutil.copytree(FIX / "taskbench" / "data_tiny", folder)
    _copy_with_line(folder / "data.json", folder / "data.json", 3, '{"id": "x", "task_nodes": 5}')
    with pytest.raises(DatasetFormatError, match="task_nodes") as info:
        load_taskbench(folder)
    assert info.value.line == 3
    assert str(folder / "data.json") in str(info.value)
    ds = load_taskbench(folder, skip_bad=True)
    assert len(ds) == 7
    assert ds.problems[1].where == f"{folder / 'data.json'}:3"


def test_taskbench_folder_without_labels_points_to_catalogue_loader(tmp_path):
    folder = tmp_path / "data_tiny"
    shutil.copytree(FIX / "taskbench" / "data_tiny", folder)
    (folder / "data.json").unlink()
    with pytest.raises(DatasetNotFoundError, match="load_taskbench_catalogue"):
        load_taskbench(folder)
    cat = load_taskbench_catalogue(folder)
    assert len(cat.tools) == 3
    assert len(cat) == 0
    assert cat.tool_graph is not None
    via_registry = load_dataset("taskbench", tmp_path, split="tiny", catalogue_only=True)
    assert via_registry.tools == cat.tools


# ============================================================================ Seal-Tools (fixture)


def test_sealtools_fixture_dependencies_from_output_labels():
    ds = load_sealtools(FIX / "sealtools")
    assert ds.tools.names == ("findRestaurant", "bookTable", "getWeather", "unusedTool")
    book = ds.tools.get("bookTable")
    assert book.parameters["required"] == ["restaurant_id", "people"]
    assert book.parameters["properties"]["people"]["type"] == "integer"
    by_id = {d.id: d for d in ds.demos}
    # dev first, then test_in_domain
    assert list(by_id)[:3] == ["dev-easy-0", "dev-difficult-0", "dev-difficult-1"]
    assert by_id["dev-difficult-0"].edges == ((0, 2),)  # weather is independent
    # "API_call_0 response" refers to a *later* call: reordered
    assert by_id["dev-difficult-1"].calls == ("findRestaurant", "bookTable")
    assert by_id["dev-difficult-1"].edges == ((0, 1),)
    assert by_id["dev-easy-0"].edges == ()
    assert _count(ds, "'teleport'", "skipped") == 1
    _check_consistent(ds)


def test_sealtools_recorded_order_and_splits():
    ds = load_sealtools(FIX / "sealtools", split="dev", order="recorded")
    assert all(d.edges is None for d in ds.demos)
    assert ds.demos[2].calls == ("bookTable", "findRestaurant")
    assert len(load_sealtools(FIX / "sealtools" / "test_in_domain.jsonl")) == 2
    with pytest.raises(DatasetNotFoundError, match="'train'"):
        load_sealtools(FIX / "sealtools", split="train")
    train, test = load_train_test(
        "sealtools", FIX / "sealtools", train_split="dev", test_split="test_in_domain"
    )
    assert (len(train), len(test)) == (3, 2)
    assert train.tools == test.tools


def test_sealtools_malformed_line(tmp_path):
    shutil.copy(FIX / "sealtools" / "tool.jsonl", tmp_path / "tool.jsonl")
    _copy_with_line(FIX / "sealtools" / "dev.jsonl", tmp_path / "dev.jsonl", 2, '{"id": 1}')
    with pytest.raises(DatasetFormatError, match="calling") as info:
        load_sealtools(tmp_path)
    assert info.value.line == 2
    assert len(load_sealtools(tmp_path, skip_bad=True)) == 3


# ============================================================================ NESTFUL (fixture)


def test_nestful_fixture_var_references():
    ds = load_nestful(FIX / "nestful")
    assert ds.tools.names == ("get_stock_price", "convert_currency", "send_sms")  # repeat ignored
    sms = ds.tools.get("send_sms").parameters
    assert sms["properties"]["kind"] == {
        "description": "Kind",
        "enum": ["plain", "urgent"],
        "default": "plain",
    }
    assert sms["required"] == ["to"]
    first, second = ds.demos
    assert first.id == "tiny-0"
    assert first.calls == ("get_stock_price", "convert_currency", "send_sms")  # var_result dropped
    assert first.edges == ((0, 1), (1, 2))  # "$var2.converted$" inside a longer string counts
    # label var1 used twice: the reference goes to the nearest earlier one; "$100-$200" is text
    assert second.edges == ((0, 1), (2, 3))
    assert _count(ds, "label 'var1' is given to calls 0, 1", "repaired") == 1
    assert _count(ds, "'book_flight'", "skipped") == 1
    recorded = load_nestful(FIX / "nestful", split="tiny", order="recorded")
    assert all(d.edges is None for d in recorded.demos)
    _check_consistent(ds)


def test_nestful_syntax_error_always_raises(tmp_path):
    shutil.copy(FIX / "nestful" / "non-executable-tiny-spec.json", tmp_path / "x-spec.json")
    (tmp_path / "x-data.json").write_text('[\n {"input": "q", "output": []},\n {"input": ]\n')
    for skip_bad in (False, True):
        with pytest.raises(DatasetFormatError) as info:
            load_nestful(tmp_path / "x-data.json", skip_bad=skip_bad)
        assert info.value.line == 3


def test_nestful_missing_spec_is_named(tmp_path):
    shutil.copy(FIX / "nestful" / "non-executable-tiny-data.json", tmp_path / "a-data.json")
    with pytest.raises(DatasetNotFoundError, match=r"a-spec\.json"):
        load_nestful(tmp_path)


# ============================================================================ PTR (fixture)


def test_ptr_fixture_sets():
    ds = load_ptr(FIX / "ptr" / "Tiny_QT.json")
    assert ds.name == "ptr"
    assert ds.set_valued
    assert ds.tools.names == ("WeatherTool", "FlightTool", "HotelTool", "MusicTool")
    assert [d.id for d in ds.demos] == ["Tiny-0", "Tiny-1", "Tiny-2", "Tiny-4"]
    assert all(d.edges == () for d in ds.demos)
    assert ds.demos[0].calls == ("FlightTool", "HotelTool", "WeatherTool")  # file order
    assert ds.demos[3].calls == ("MusicTool", "HotelTool")  # listed twice, kept once
    assert _count(ds, "has no words", "kept") == 1
    assert _count(ds, "exact duplicate", "skipped") == 1
    assert _count(ds, "listed twice", "repaired") == 1
    assert _count(ds, "'PizzaTool'", "skipped") == 1
    assert len(load_ptr(FIX / "ptr" / "Tiny_QT.json", keep_duplicates=True)) == 5


def test_ptr_folder_needs_variant_and_names_missing_files(tmp_path):
    with pytest.raises(ValueError, match="variant"):
        load_ptr(FIX / "ptr")
    with pytest.raises(DatasetNotFoundError, match=r"RecTools_QT\.json"):
        load_rectools(FIX / "ptr")
    shutil.copy(FIX / "ptr" / "Tiny_QT.json", tmp_path / "MetaTool_QT.json")
    with pytest.raises(DatasetNotFoundError, match=r"MetaTool_tool\.json"):
        load_metatool(tmp_path)
    ds = load_metatool(tmp_path, tools_path=FIX / "ptr" / "Tiny_tool.json")
    assert ds.name == "metatool"


# ============================================================================ TinyAgent (fixture)


def test_tinyagent_fixture_llmcompiler_plans():
    ds = load_tinyagent(FIX / "tinyagent")
    assert ds.name == "tinyagent"
    by_id = {d.id: d for d in ds.demos}
    assert list(by_id) == ["a1f0c3e2-0001", "a1f0c3e2-0002", "a1f0c3e2-0003", "b2e1d4f3-0001"]
    # join is the end of the plan, not a call; "$5" in a message is not step 5
    assert by_id["a1f0c3e2-0001"].calls == ("get_phone_number", "send_sms")
    assert by_id["a1f0c3e2-0001"].edges == ((0, 1),)
    # "$1" inside a list and "${2}" both count
    assert by_id["a1f0c3e2-0002"].edges == ((0, 1), (0, 2), (1, 2))
    # steps after join are dropped (and reported)
    assert by_id["a1f0c3e2-0003"].calls == ("open_and_get_file_path", "summarize_pdf")
    assert by_id["b2e1d4f3-0001"].edges == ((0, 2), (1, 2))
    assert _count(ds, "after join()", "repaired") == 1
    assert _count(ds, "no 'plan' entry", "skipped") == 1
    assert _count(ds, "exact duplicate", "skipped") == 1
    # the catalogue comes from the planner prompts (string or chat messages)
    assert ds.tools.names == (
        "get_phone_number",
        "send_sms",
        "get_email_address",
        "create_calendar_event",
        "compose_new_email",
        "open_and_get_file_path",
        "summarize_pdf",
    )
    assert ds.tools.get("get_phone_number").description == (
        "Look up a contact by name. Returns the contact's phone number."
    )
    send = ds.tools.get("send_sms").parameters
    assert send["properties"]["recipients"] == {"type": "array", "items": {"type": "string"}}
    assert ds.tools.get("summarize_pdf").description == ""
    assert _count(ds, "'summarize_pdf'", "kept") == 1
    _check_consistent(ds)


def test_tinyagent_splits_and_tools_path(tmp_path):
    assert len(load_tinyagent(FIX / "tinyagent", split="test")) == 1
    assert len(load_tinyagent(FIX / "tinyagent" / "training_data.json")) == 3
    assert len(load_dataset("tinyagent", FIX / "tinyagent", split="train", limit=2)) == 2
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"name": "get_phone_number"}, {"name": "send_sms"}]))
    ds = load_tinyagent(FIX / "tinyagent", tools_path=tools)
    assert len(ds.tools) == 2
    assert [d.id for d in ds.demos] == ["a1f0c3e2-0001", "b2e1d4f3-0001"]
    assert _count(ds, "calls tools not in", "skipped") == 2


def test_tinyagent_malformed_sample(tmp_path):
    data = json.loads((FIX / "tinyagent" / "testing_data.json").read_text())
    data["broken"] = {"input": "q", "output": [{"type": "plan", "parsed_output": [{"x": 1}]}]}
    path = tmp_path / "testing_data.json"
    path.write_text(json.dumps(data, indent=1))
    with pytest.raises(DatasetFormatError, match="tool_name") as info:
        load_tinyagent(path)
    assert info.value.line is not None
    assert len(load_tinyagent(path, skip_bad=True)) == 1


# ============================================================================ registry


def test_registry_ids_and_aliases():
    assert DATASET_IDS == (
        "demo",
        "taskbench",
        "tinyagent",
        "sealtools",
        "nestful",
        "rectools",
        "metatool",
        "toolret",
        "jsonl",
    )
    ds = load_dataset("Seal-Tools", FIX / "sealtools", split="dev")
    assert ds.name == "sealtools"
    with pytest.raises(ValueError, match="known ids"):
        load_dataset("toolbench", FIX)
    with pytest.raises(ValueError, match="needs a path"):
        load_dataset("nestful")
    with pytest.raises(TypeError, match="does not take order"):
        load_dataset("rectools", FIX / "ptr" / "Tiny_QT.json", order="recorded")
    with pytest.raises(ValueError, match="no splits"):
        load_dataset("jsonl", FIX / "jsonl" / "demos.jsonl", split="dev")


def test_registry_dispatches_every_loader():
    assert len(load_dataset("jsonl", FIX / "jsonl" / "demos.jsonl")) == 4
    assert len(load_dataset("taskbench", FIX / "taskbench", split="tiny")) == 7
    assert len(load_dataset("nestful", FIX / "nestful", tools_path=None, limit=1)) == 1
    assert load_dataset("rectools", FIX / "ptr" / "Tiny_QT.json").name == "rectools"
    assert load_dataset("metatool", FIX / "ptr" / "Tiny_QT.json").set_valued
    assert len(load_dataset("jsonl", FIX / "jsonl" / "bad_demos.jsonl", skip_bad=True)) == 3


def test_registry_demo_uses_the_synthetic_generator():
    ds = load_dataset("demo", n=60, seed=3, limit=10)
    assert len(ds) == 10
    with pytest.raises(ValueError, match="generated"):
        load_dataset("demo", FIX)


# ============================================================================ split


def _zipf_demos(n: int = 1200, seed: int = 0) -> list[Demonstration]:
    rng = random.Random(seed)
    tools = [f"t{k}" for k in range(30)]
    weights = [1.0 / (k + 1) for k in range(30)]
    demos = []
    for i in range(n):
        calls = rng.choices(tools, weights, k=rng.randint(1, 4))
        demos.append(Demonstration(f"query {i}", tuple(calls), id=str(i)))
    return demos


def test_split_is_deterministic_complete_and_disjoint():
    demos = _zipf_demos()
    train, test = split_demonstrations(demos, 0.3, seed=7)
    again = split_demonstrations(demos, 0.3, seed=7)
    assert (train, test) == again
    assert split_demonstrations(demos, 0.3, seed=8) != (train, test)
    assert sorted(d.id for d in train + test) == sorted(d.id for d in demos)
    assert not {d.id for d in train} & {d.id for d in test}
    # input order is kept on each side
    assert [int(d.id) for d in test] == sorted(int(d.id) for d in test)


def test_split_keeps_overall_and_per_tool_ratio():
    demos = _zipf_demos()
    _, test = split_demonstrations(demos, 0.3, seed=0)
    assert len(test) / len(demos) == pytest.approx(0.3, abs=0.01)
    total = Counter(c for d in demos for c in d.calls)
    in_test = Counter(c for d in test for c in d.calls)
    for tool, k in total.items():
        # within 1.5 calls, or 2% for the frequent tools
        assert abs(in_test[tool] - 0.3 * k) <= max(1.5, 0.02 * k), (tool, k, in_test[tool])


def test_split_other_ratio_and_edge_cases():
    demos = _zipf_demos(500)
    _, test = split_demonstrations(demos, test_size=0.2, seed=1)
    assert len(test) == pytest.approx(100, abs=5)
    assert split_demonstrations([], 0.3) == ([], [])
    no_calls = [Demonstration(f"q{i}", ()) for i in range(10)]
    assert len(split_demonstrations(no_calls, 0.3)[1]) == 3
    for bad in (0, 1, 1.5, -0.1):
        with pytest.raises(ValueError, match="test_size"):
            split_demonstrations(demos, bad)


def test_split_dataset_shares_catalogue():
    ds = load_dataset("taskbench", FIX / "taskbench", split="tiny")
    train, test = split_dataset(ds, 0.3, seed=0)
    assert train.tools == test.tools == ds.tools
    assert len(train) + len(test) == len(ds)
    a, b = load_train_test("taskbench", FIX / "taskbench", split="tiny", seed=0)
    assert (a.demos, b.demos) == (train.demos, test.demos)
    with pytest.raises(ValueError, match="both"):
        load_train_test("sealtools", FIX / "sealtools", train_split="dev")


# ============================================================================ stats


def test_stats_on_a_hand_made_dataset():
    tools = Toolset([{"name": n} for n in "abcd"])
    ds = Dataset(
        name="tiny",
        tools=tools,
        demos=(
            Demonstration("q1", ("a", "b", "c"), ((0, 1), (1, 2))),
            Demonstration("q2", ("a",), ()),
            Demonstration("q3", ("b", "a"), None),
        ),
    )
    s = dataset_stats(ds)
    assert s["plans"] == 3
    assert s["tools"] == 4
    assert s["tools_with_end"] == 5
    assert s["tools_used"] == 3
    assert s["calls_mean"] == pytest.approx(2.0)
    assert s["calls_std"] == pytest.approx((2 / 3) ** 0.5)  # population std of 3, 1, 2
    assert s["max_calls"] == 3
    assert s["plans_with_edges"] == 2
    assert s["dependencies_mean"] == pytest.approx(1.0)  # (2 + 0) / 2: q3 has no edges
    assert s["dependencies_std"] == pytest.approx(1.0)
    assert s["problems"] == 0
    text = format_stats(s)
    assert "# Tool calls per plan" in text
    assert "2.00±0.82" in text
    assert "1.00±1.00 (2 plans)" in text


def test_stats_sets_and_problems():
    ds = load_ptr(FIX / "ptr" / "Tiny_QT.json")
    s = dataset_stats(ds)
    assert s["set_valued"]
    assert s["dependencies_mean"] is None
    assert s["problems_by_action"] == {"kept": 1, "repaired": 1, "skipped": 2}
    text = format_stats([s, dataset_stats(load_sealtools(FIX / "sealtools"))])
    lines = text.splitlines()
    assert len(lines) == 4
    assert lines[2].startswith("ptr (sets)")
    assert " - " in lines[2]


# ============================================================================ published files


@pytest.mark.datasets
@published
def test_published_taskbench_hf_subset():
    path = DATA / "taskbench_hf_subset"
    ds = load_taskbench(path)
    assert len(ds.tools) == 23
    assert len(ds.tool_graph or ()) == 225
    # 1,030 lines = 891 kept + 138 naming tasks outside tool_desc.json + 1 duplicate
    assert len(ds) == 891
    assert _count(ds, "not in tool_desc.json", "skipped") == 138
    assert _count(ds, "exact duplicate", "skipped") == 1
    assert _count(ds, "'Conversations' is not one of the task nodes", "repaired") == 1
    assert _count(ds, "n_tools", "kept") == 24  # of the 45, the others name unknown tasks
    assert _count(ds, "by index") == 0  # both such samples also name unknown tasks
    assert _count(ds, "cycle") == 0
    by_id = {d.id: d for d in ds.demos}
    assert by_id["57993067"].query.startswith("I need to identify and label objects")
    # listed alphabetically in the file, Summarization feeds Question Answering
    assert by_id["25775436"].calls == ("Summarization", "Question Answering")
    assert by_id["25775436"].edges == ((0, 1),)
    _check_consistent(ds)
    everything = load_taskbench(path, unknown_tools="add")
    assert len(everything) == 1029
    assert _count(everything, "not in tool_desc.json", "kept") == 138
    assert _count(everything, "n_tools", "kept") == 45
    assert _count(everything, "by index", "repaired") == 2
    assert _count(everything, "'Conversations'", "repaired") == 1
    assert _count(everything, "exact duplicate", "skipped") == 1
    _check_consistent(everything)
    assert len(load_taskbench(path, keep_duplicates=True, unknown_tools="add")) == 1030


@pytest.mark.datasets
@published
@pytest.mark.parametrize(
    ("domain", "tools", "links"),
    [("dailylifeapis", 40, 1560), ("huggingface", 23, 225), ("multimedia", 40, 449)],
)
def test_published_taskbench_catalogues(domain, tools, links):
    cat = load_taskbench_catalogue(DATA / "taskbench", split=domain)
    assert (len(cat.tools), len(cat.tool_graph or ()), len(cat)) == (tools, links, 0)
    assert cat.problems == ()
    with pytest.raises(DatasetNotFoundError, match="load_taskbench_catalogue"):
        load_taskbench(DATA / "taskbench" / f"data_{domain}")


@pytest.mark.datasets
@published
def test_published_taskbench_dailylife_parameters():
    cat = load_taskbench_catalogue(DATA / "taskbench" / "data_dailylifeapis")
    weather = cat.tools.get("get_weather").parameters
    assert weather["properties"]["date"] == {
        "type": "string",
        "format": "date",
        "description": "The date to get the weather for",
    }
    with pytest.raises(DatasetNotFoundError, match="several TaskBench domains"):
        load_taskbench_catalogue(DATA / "taskbench")


@pytest.mark.datasets
@published
def test_published_sealtools():
    path = DATA / "sealtools"
    dev = load_sealtools(path, split="dev")
    assert len(dev.tools) == 4076
    assert len(dev) == 700
    assert dev.problems == ()
    assert len({c for d in dev.demos for c in d.calls}) == 1355
    # 34 of the 1,804 calls (in 28 plans) take an earlier call's output
    assert sum(len(d.edges or ()) for d in dev.demos) == 34
    assert sum(1 for d in dev.demos if d.edges) == 28
    assert Counter(len(d.calls) for d in dev.demos)[1] == 200
    test = load_sealtools(path, split="test_in_domain")
    assert len(test) == 700
    assert sum(len(d.edges or ()) for d in test.demos) == 38
    assert len(load_sealtools(path)) == 1400
    recorded = load_sealtools(path, split="dev", order="recorded")
    assert all(d.edges is None for d in recorded.demos)
    _check_consistent(dev)


@pytest.mark.datasets
@published
def test_published_nestful():
    path = DATA / "nestful"
    glaive = load_nestful(path, split="glaive")
    # 169 samples: 10 call tools missing from the spec
    assert len(glaive) == 159
    assert _count(glaive, "not in the spec file", "skipped") == 10
    assert len(glaive.tools) == 64
    assert glaive.demos[0].edges == ((0, 2),)
    assert len(load_nestful(path, split="glaive", unknown_tools="add")) == 169
    sgd = load_nestful(path, split="sgd")
    assert (len(sgd), len(sgd.tools)) == (46, 30)
    assert _count(sgd, "label", "repaired") == 2
    both = load_nestful(path)
    assert (len(both), len(both.tools)) == (205, 94)
    assert all(d.edges is not None for d in both.demos)
    _check_consistent(both)


@pytest.mark.datasets
@published
def test_published_rectools_and_metatool():
    rec = load_rectools(DATA / "ptr")
    assert rec.set_valued
    assert len(rec.tools) == 47
    # 1,000 queries: two are exact repeats of the one before them
    assert len(rec) == 998
    assert _count(rec, "exact duplicate", "skipped") == 2
    assert _count(rec, "has no words", "kept") == 2
    full = load_rectools(DATA / "ptr" / "RecTools_QT.json", keep_duplicates=True)
    assert len(full) == 1000
    assert Counter(len(d.calls) for d in full.demos) == {k: 100 for k in range(1, 11)}
    meta = load_metatool(DATA / "ptr")
    assert (len(meta), len(meta.tools)) == (497, 47)
    assert all(len(d.calls) == 2 for d in meta.demos)
    own = load_metatool(DATA / "metatool")
    # MetaTool's own file holds the same 497 (query, tool set) pairs, in another order
    assert {(d.query, frozenset(d.calls)) for d in own.demos} == {
        (d.query, frozenset(d.calls)) for d in meta.demos
    }
    assert own.tools == meta.tools
    _check_consistent(rec)


@pytest.mark.datasets
@published
def test_published_split_and_stats():
    ds = load_dataset("taskbench", DATA / "taskbench_hf_subset")
    _, test = split_dataset(ds, 0.3, seed=0)
    assert len(test) / len(ds) == pytest.approx(0.3, abs=0.01)
    total = Counter(c for d in ds.demos for c in d.calls)
    in_test = Counter(c for d in test.demos for c in d.calls)
    for tool, k in total.items():
        assert abs(in_test[tool] / k - 0.3) < 0.05, tool
    s = dataset_stats(ds)
    assert (s["plans"], s["tools"], s["tools_used"], s["max_calls"]) == (891, 23, 23, 8)
    seal = dataset_stats(load_dataset("sealtools", DATA / "sealtools", split="dev"))
    assert (seal["plans"], seal["tools"], seal["plans_with_edges"]) == (700, 4076, 700)
    assert "taskbench" in format_stats([s, seal])
