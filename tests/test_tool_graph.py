"""`ToolGraph`: dependencies from the catalogue (types, schemas, descriptions) or given."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from dtdr_agents.datasets import load_dataset
from dtdr_agents.foundation.errors import UnknownToolError
from dtdr_agents.foundation.types import Tool
from dtdr_agents.retrievers.tool_graph import WEIGHTS, ToolGraph, read_outputs

SEAL = Path(__file__).parent / "fixtures" / "datasets" / "sealtools"


def _inputs(*kinds: str) -> dict:
    """A TaskBench-loader-style schema: one string argument per input, named by its type."""
    props = {}
    for kind in kinds:
        name, n = kind, 1
        while name in props:
            n += 1
            name = f"{kind}_{n}"
        props[name] = {
            "type": "string",
            "description": f"the input {kind}: a file name or text, or <node-j> for the output",
        }
    return {"type": "object", "properties": props}


@pytest.fixture
def media():
    tools = [
        Tool("Text-to-Image", "Draws a picture from a prompt.", _inputs("text")),
        Tool("Image Captioning", "Describes a picture in words.", _inputs("image")),
        Tool("Image Compare", "Compares two pictures.", _inputs("image", "image")),
        Tool("Translation", "Translates a sentence.", _inputs("text")),
        Tool("Speech", "Reads a sentence aloud.", _inputs("text")),
    ]
    outputs = {
        "Text-to-Image": ["image"],
        "Image Captioning": ["text"],
        "Image Compare": ["text"],
        "Translation": ["text"],
        "Speech": ["audio"],
    }
    return tools, outputs


def test_types_link_producers_to_consumers(media):
    tools, outputs = media
    graph = ToolGraph.from_catalogue(tools, outputs)
    assert set(graph.successors("Text-to-Image")) == {"Image Captioning", "Image Compare"}
    # image_2 counts as an image input; its description names the image too
    assert graph.evidence("Text-to-Image", "Image Compare") == ["param:image", "param-desc:image"]
    assert graph.successors("Text-to-Image")["Image Compare"] == (
        WEIGHTS["param"] + WEIGHTS["param-desc"]
    )
    assert set(graph.successors("Image Captioning")) == {"Text-to-Image", "Translation", "Speech"}
    # no derived self-loop (Translation takes and makes text), nothing consumes audio
    assert "Translation" not in graph.successors("Translation")
    assert graph.successors("Speech") == {}
    assert graph.predecessors("Image Captioning") == {"Text-to-Image": 1.5}
    # the parameter template says "text" everywhere: no evidence there
    assert graph.evidence("Translation", "Image Captioning") == []


def test_descriptions_give_edges_without_schemas():
    tools = [
        Tool("geocode", "Turns an address into coordinates."),
        Tool("route", "Plans a route between the coordinates that geocode returns."),
        Tool("mystery"),
        Tool("weather", "Weather at the coordinates.", {"type": "object"}),
        Tool("translate", "Translates a sentence."),
        Tool("calendar", "Lists the meetings of a day."),
    ]
    graph = ToolGraph.from_catalogue(tools, {"geocode": ["coordinates"]})
    assert graph.evidence("geocode", "route") == ["desc-tool", "desc-output:coordinates"]
    assert graph.successors("geocode")["route"] == WEIGHTS["desc-tool"] + WEIGHTS["desc-output"]
    assert graph.successors("geocode")["weather"] == WEIGHTS["desc-output"]
    assert graph.successors("mystery") == {} and graph.predecessors("mystery") == {}
    # a term in more than half of the descriptions is no evidence there
    crowded = [*tools, Tool("map", "Shows coordinates."), Tool("pin", "Saves coordinates.")]
    assert "weather" not in ToolGraph.from_catalogue(
        crowded, {"geocode": ["coordinates"]}
    ).successors("geocode")
    # without declared outputs only the description naming the tool remains
    bare = ToolGraph.from_catalogue(tools)
    assert [(s, t) for s, t, _ in bare.edges()] == [("geocode", "route")]


def test_a_term_too_many_tools_take_is_no_evidence(monkeypatch):
    """A term consumed by more than MAX_TERM_TOOLS tools links none: it cannot rank them."""
    from dtdr_agents.retrievers import tool_graph

    monkeypatch.setattr(tool_graph, "MAX_TERM_TOOLS", 3)

    def takes(name: str, param: str) -> Tool:
        return Tool(name, f"Uses a {param}", {"type": "object", "properties": {param: {}}})

    tools = [
        Tool("find_city", "Find a city", outputs=("city", "user_id")),
        *[takes(f"weather_{i}", "city") for i in range(3)],  # three take "city": evidence
        *[takes(f"profile_{i}", "user_id") for i in range(4)],  # four take "user_id": none
    ]
    graph = ToolGraph.from_catalogue(tools)
    assert sorted(graph.successors("find_city")) == ["weather_0", "weather_1", "weather_2"]


def test_seal_tools_responses_feed_parameters():
    data = load_dataset("sealtools", str(SEAL), split="dev")
    outputs = read_outputs(SEAL / "tool.jsonl")
    assert outputs["findRestaurant"] == ("restaurant_id",)
    assert "unusedTool" not in outputs
    graph = ToolGraph.from_catalogue(data.tools, outputs)
    assert graph.edges() == [("findRestaurant", "bookTable", 1.5)]
    # the loader already put them on the tools: the catalogue alone gives the same graph
    assert data.tools.get("findRestaurant").outputs == ("restaurant_id",)
    assert ToolGraph.from_catalogue(data.tools).edges() == graph.edges()
    assert graph.evidence("findRestaurant", "bookTable") == [
        "param:restaurant_id",
        "param-desc:restaurant_id",
    ]


def test_nestful_output_parameters_are_the_tools_outputs():
    root = Path(__file__).parent / "fixtures" / "datasets" / "nestful"
    data = load_dataset("nestful", str(root))
    assert data.tools.get("get_stock_price").outputs == ("price",)
    assert data.tools.get("send_sms").outputs == ()


def test_mcp_output_schema_and_taskbench_nodes_are_read():
    mcp = {
        "tools": [
            {"name": "search", "outputSchema": {"type": "object", "properties": {"doc_id": {}}}},
            {"name": "fetch", "inputSchema": {"type": "object"}},
        ]
    }
    assert read_outputs(mcp) == {"search": ("doc_id",)}
    nodes = {"nodes": [{"id": "A", "output-type": ["image", "image"]}, {"id": "B"}]}
    assert read_outputs(nodes) == {"A": ("image",)}


def _tools(*names: str) -> list[Tool]:
    return [Tool(n, f"tool {n}") for n in names]


class _NxLike:
    """Duck-typed like a networkx DiGraph: only `edges(data=True)`."""

    def edges(self, data: bool = False) -> list[tuple[str, str, dict]]:
        assert data
        return [("a", "b", {"weight": 2.0}), ("b", "a", {})]


def test_given_graphs_in_every_shape(tmp_path):
    tools = _tools("a", "b", "c")
    desc = {"nodes": [{"id": "a"}], "links": [{"source": "a", "target": "b"}]}
    path = tmp_path / "graph_desc.json"
    path.write_text(json.dumps(desc))
    for given in (desc, path, [("a", "b")], [{"source": "a", "target": "b"}]):
        graph = ToolGraph.from_given(given, tools)
        assert graph.successors("a") == {"b": 1.0}
        assert graph.evidence("a", "b") == ["given"]
    nx = ToolGraph.from_given(_NxLike(), tools)
    assert nx.successors("a") == {"b": 2.0} and nx.successors("b") == {"a": 1.0}  # a cycle
    loop = ToolGraph.from_given([("c", "c", 0.5)], tools)
    assert loop.successors("c") == {"c": 0.5}
    with pytest.raises(ValueError, match="edge 0"):
        ToolGraph.from_given([("a",)], tools)


def test_given_graph_with_unknown_tools():
    tools = _tools("a", "b")
    with pytest.raises(UnknownToolError, match=r"\['ghost', 'zed'\]") as info:
        ToolGraph.from_given([("a", "ghost"), ("zed", "b"), ("a", "b")], tools)
    assert info.value.names == ("ghost", "zed")
    with pytest.warns(UserWarning, match="ghost"):
        graph = ToolGraph.from_given([("a", "ghost"), ("a", "b")], tools, strict=False)
    assert graph.edges() == [("a", "b", 1.0)]
    with pytest.raises(UnknownToolError, match="ghost"):
        graph.successors("ghost")


def test_round_trip_through_plain_json(media):
    tools, outputs = media
    graph = ToolGraph.from_catalogue(tools, outputs)
    text = json.dumps(graph.to_dict())
    again = ToolGraph.from_dict(json.loads(text))
    assert again.tools == graph.tools
    assert sorted(again.edges()) == sorted(graph.edges())
    for s, t, _ in graph.edges():
        assert again.evidence(s, t) == graph.evidence(s, t)
    with pytest.raises(ValueError, match="format"):
        ToolGraph.from_dict({"tools": []})
    bad = {**graph.to_dict(), "edges": [{"source": "Speech"}]}
    with pytest.raises(ValueError, match=r"edges\[0\]"):
        ToolGraph.from_dict(bad)


def _precision_recall(derived: ToolGraph, published: set[tuple[str, str]]) -> tuple[float, float]:
    found = {(s, t) for s, t, _ in derived.edges()}
    hits = len(found & published)
    return hits / max(1, len(found)), hits / max(1, len(published))


@pytest.mark.datasets
def test_taskbench_hf_graph_is_recovered(shared_datasets):
    root = shared_datasets / "taskbench_hf_subset"
    if not (root / "graph_desc.json").is_file():
        pytest.skip(f"{root} has no graph_desc.json")
    data = load_dataset("taskbench", str(root))
    published = set(data.tool_graph or ())
    assert len(published) == 225
    assert sum(1 for t in data.tools if t.outputs) == 22  # the loader reads output-type
    precision, recall = _precision_recall(ToolGraph.from_catalogue(data.tools), published)
    assert precision >= 0.99 and recall >= 0.99  # measured: 1.0000 and 1.0000 (225 of 225)
    bare = [Tool(t.name, t.description, t.parameters) for t in data.tools]  # outputs dropped
    graph = ToolGraph.from_catalogue(bare, read_outputs(root / "tool_desc.json"))
    assert set(graph.edges()) == set(ToolGraph.from_catalogue(data.tools).edges())
    # descriptions alone: few edges, but right ones (measured: 3 edges, precision 1.0)
    bare_precision, bare_recall = _precision_recall(ToolGraph.from_catalogue(bare), published)
    assert bare_precision >= 0.99 and 0.0 < bare_recall < 0.1
    given = ToolGraph.from_given(root / "graph_desc.json", data.tools)
    assert {(s, t) for s, t, _ in given.edges()} == published


def synthetic_catalogue(n: int, seed: int = 0) -> tuple[list[Tool], dict[str, list[str]]]:
    """`n` tools over 300 resource kinds: 1-3 inputs, 1-2 outputs, descriptions naming tools."""
    rng = random.Random(seed)
    kinds = [f"resource_{i}" for i in range(300)]
    tools, outputs = [], {}
    for i in range(n):
        ins = rng.sample(kinds, rng.randint(1, 3))
        props = {k: {"type": "string", "description": f"the {k.replace('_', ' ')}"} for k in ins}
        words = " ".join(rng.choice(["fast", "image", "text", "table", "query"]) for _ in range(25))
        desc = f"Tool {i} often runs after tool {rng.randrange(n)}. {words}"
        tools.append(Tool(f"tool_{i}", desc, {"type": "object", "properties": props}))
        outputs[f"tool_{i}"] = rng.sample(kinds, rng.randint(1, 2))
    return tools, outputs


@pytest.mark.benchmark
def test_build_time_at_10000_tools():
    tools, outputs = synthetic_catalogue(10_000)
    t0 = time.perf_counter()
    graph = ToolGraph.from_catalogue(tools, outputs)
    elapsed = time.perf_counter() - t0
    print(f"tool graph: 10,000 tools, {len(graph)} edges in {elapsed:.2f} s")
    assert len(graph) > 100_000
    assert elapsed <= 10.0
