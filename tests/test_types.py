from __future__ import annotations

import pytest

from dtdr_agents import (
    END_OF_PLAN,
    Demonstration,
    InvalidDemonstrationError,
    InvalidToolError,
    Tool,
    Toolset,
    UnknownToolError,
)


def test_tool_from_openai_schema_and_dict():
    schema = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    tool = Tool.from_any(schema)
    assert tool.name == "get_weather"
    assert tool.parameters["properties"]["city"]["type"] == "string"
    assert Tool.from_any(tool.to_dict()) == tool
    assert tool.to_openai()["function"]["name"] == "get_weather"


def test_tool_from_duck_typed_object_and_function():
    class Args:
        @staticmethod
        def model_json_schema():
            return {"type": "object", "properties": {"q": {"type": "string"}}}

    class LangChainLike:
        name = "search"
        description = "Search the web"
        args_schema = Args

    tool = Tool.from_any(LangChainLike())
    assert (tool.name, tool.description) == ("search", "Search the web")
    assert "q" in tool.parameters["properties"]

    def add(a: int, b: int = 1) -> int:
        """Add two numbers."""
        return a + b

    fn_tool = Tool.from_any(add)
    assert fn_tool.name == "add"
    assert fn_tool.description == "Add two numbers."
    assert fn_tool.parameters["required"] == ["a"]
    assert fn_tool.parameters["properties"]["a"]["type"] == "integer"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"description": "x"}, "name"),
        ({"name": ""}, "name"),
        ({"name": "a", "description": 3}, "description"),
    ],
)
def test_bad_tool_names_the_field(data, field):
    with pytest.raises(InvalidToolError, match=field):
        Tool.from_any(data)


def test_reserved_end_token_is_not_a_tool_name():
    with pytest.raises(InvalidToolError, match="reserved"):
        Tool(END_OF_PLAN)


def test_toolset_rejects_empty_and_duplicates():
    with pytest.raises(InvalidToolError, match="empty"):
        Toolset([])
    with pytest.raises(InvalidToolError, match="duplicate tool name 'a' at positions 0 and 2"):
        Toolset([Tool("a"), Tool("b"), Tool("a")])


def test_toolset_hash_is_content_based_and_order_free():
    a, b = Tool("a", "first"), Tool("b", "second")
    assert Toolset([a, b]).catalogue_hash == Toolset([b, a]).catalogue_hash
    assert Toolset([a, b]).catalogue_hash != Toolset([a, Tool("b", "changed")]).catalogue_hash
    ts = Toolset([a, b])
    assert ts.index("b") == 1
    assert ts.has("a") and not ts.has("zz")
    with pytest.raises(UnknownToolError, match="zz"):
        ts.index("zz")


def test_acceptable_next_follows_dependency_edges():
    # 0: get_email(A), 1: get_email(B), 2: compose (needs 0 and 1), 3: sms (independent)
    demo = Demonstration(
        "email A and B, text C",
        ("get_email", "get_email", "compose", "sms"),
        edges=((0, 2), (1, 2)),
    )
    assert demo.acceptable_next(0) == {"get_email", "sms"}
    assert demo.acceptable_next(1) == {"get_email", "sms"}
    assert demo.acceptable_next(2) == {"compose", "sms"}
    assert demo.acceptable_next(3) == {"sms"}
    assert demo.acceptable_next(4) == {END_OF_PLAN}
    steps = demo.steps()
    assert [s.target for s in steps] == ["get_email", "get_email", "compose", "sms", END_OF_PLAN]
    assert steps[2].history == ("get_email", "get_email")


def test_without_edges_only_the_recorded_order_is_acceptable():
    demo = Demonstration("q", ("a", "b"))
    assert demo.acceptable_next(0) == {"a"}
    independent = Demonstration("q", ("a", "b"), edges=())
    assert independent.acceptable_next(0) == {"a", "b"}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"query": " ", "calls": ("a",)}, "'query'"),
        ({"query": "q", "calls": "abc"}, "'calls'"),
        ({"query": "q", "calls": ("a", END_OF_PLAN)}, "end-of-plan"),
        ({"query": "q", "calls": ("a", "b"), "edges": ((1, 0),)}, "dependency order"),
        ({"query": "q", "calls": ("a", "b"), "edges": ((0, 5),)}, "outside"),
    ],
)
def test_bad_demonstrations_name_the_field(kwargs, match):
    with pytest.raises(InvalidDemonstrationError, match=match):
        Demonstration(id="d7", **kwargs)


def test_demo_calling_unknown_tool_is_reported():
    demo = Demonstration("q", ("a", "nope"), id="d1")
    with pytest.raises(InvalidDemonstrationError, match=r"'d1'.*calls\[1\] = 'nope'"):
        demo.check_tools(Toolset([Tool("a")]))


def test_tool_outputs_round_trip_and_stay_out_of_the_model_schema():
    """Declared outputs feed the tool graph and save with the tool; the model never sees them."""
    tool = Tool.from_dict(
        {
            "name": "find_bus",
            "description": "Find a bus",
            "outputSchema": {"type": "object", "properties": {"fare": {}, "station": {}}},
        }
    )
    assert tool.outputs == ("fare", "station")
    assert tool.to_dict()["outputs"] == ["fare", "station"]
    assert Tool.from_dict(tool.to_dict()) == tool
    assert "outputs" not in tool.to_openai()["function"]
    assert "outputs" not in Tool("plain").to_dict()  # old catalogues hash as before
    assert Tool("t", outputs=["a", "a", "b"]).outputs == ("a", "b")  # type: ignore[arg-type]
    with pytest.raises(InvalidToolError, match="'outputs' must be a list of strings"):
        Tool("t", outputs="fare")  # type: ignore[arg-type]
    with pytest.raises(InvalidToolError, match="'outputs' must hold non-empty strings"):
        Tool("t", outputs=("fare", 3))  # type: ignore[arg-type]
