"""Tests of the embedded, procedural demo dataset."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from dtdr_agents.datasets.base import Dataset
from dtdr_agents.datasets.synthetic import DEMO_INTENTS, DEMO_TOOLS, make_demo_dataset
from dtdr_agents.foundation.types import END_OF_PLAN, Demonstration, Toolset


@pytest.fixture(scope="module")
def data() -> Dataset:
    return make_demo_dataset(2000, seed=0)


def _as_dicts(data: Dataset) -> list[dict[str, object]]:
    return [d.to_dict() for d in data.demos]


def test_same_seed_same_data() -> None:
    a = make_demo_dataset(300, seed=7)
    b = make_demo_dataset(300, seed=7)
    assert _as_dicts(a) == _as_dicts(b)
    assert a.tools == b.tools


def test_different_seed_different_data() -> None:
    a = make_demo_dataset(300, seed=1)
    b = make_demo_dataset(300, seed=2)
    assert _as_dicts(a) != _as_dicts(b)


def test_does_not_touch_global_random_state() -> None:
    import random

    random.seed(123)
    expected = random.random()
    random.seed(123)
    make_demo_dataset(50, seed=3)
    assert random.random() == expected


def test_dataset_metadata(data: Dataset) -> None:
    assert data.name == "demo"
    assert data.source == "embedded"
    assert not data.set_valued
    assert len(data) == 2000
    ids = [d.id for d in data.demos]
    assert ids[0] == "demo-00001"
    assert ids[-1] == "demo-02000"
    assert len(set(ids)) == len(ids)


def test_small_n_and_defaults() -> None:
    one = make_demo_dataset(1)
    assert len(one) == 1
    assert one.demos[0].id == "demo-00001"
    assert len(make_demo_dataset()) == 2400


@pytest.mark.parametrize("bad", [0, -5])
def test_rejects_non_positive_n(bad: int) -> None:
    with pytest.raises(ValueError, match=r"\bn\b"):
        make_demo_dataset(bad)


def test_tool_catalogue() -> None:
    assert len(DEMO_TOOLS) >= 15
    tools = Toolset(DEMO_TOOLS)  # unique names
    assert len(tools) == len(DEMO_TOOLS)
    for tool in DEMO_TOOLS:
        assert tool.description.strip(), tool.name
        schema = tool.parameters
        assert schema["type"] == "object", tool.name
        assert isinstance(schema["properties"], dict), tool.name
        assert isinstance(schema["required"], list), tool.name
        assert set(schema["required"]) <= set(schema["properties"]), tool.name
        for pname, prop in schema["properties"].items():
            assert "type" in prop, (tool.name, pname)
            assert prop.get("description"), (tool.name, pname)
    with_args = [t for t in DEMO_TOOLS if t.parameters["properties"]]
    assert len(with_args) >= len(DEMO_TOOLS) - 1


def test_every_call_in_catalogue_and_every_tool_used(data: Dataset) -> None:
    used: set[str] = set()
    for demo in data.demos:
        demo.check_tools(data.tools)
        used.update(demo.calls)
    assert used == set(data.tools.names)


def test_edges_valid(data: Dataset) -> None:
    for demo in data.demos:
        assert demo.edges is not None
        n = len(demo.calls)
        for i, j in demo.edges:
            assert 0 <= i < j < n
        # Every step's recorded target is acceptable at that step.
        for step in demo.steps():
            assert step.target in step.acceptable
        # The edges survive a round trip through the plain-JSON form.
        again = Demonstration(**demo.to_dict())
        assert again.calls == demo.calls
        assert again.edges == demo.edges


def test_repeated_calls_driven_by_query(data: Dataset) -> None:
    repeats = [d for d in data.demos if max(Counter(d.calls).values()) >= 2]
    assert len(repeats) >= 100
    # A query naming three people with an email plan looks three addresses up.
    by_count: dict[int, int] = Counter()
    for demo in data.demos:
        if "compose_email" in demo.calls and "translate_text" not in demo.calls:
            by_count[demo.calls.count("get_email_address")] += 1
    assert {1, 2, 3} <= set(by_count)


def test_shared_prefix_then_diverging(data: Dataset) -> None:
    following: dict[tuple[str, ...], set[str]] = defaultdict(set)
    for demo in data.demos:
        for step in demo.steps():
            if len(step.history) >= 2:
                following[step.history].add(step.target)
    branching = [h for h, nxt in following.items() if len(nxt - {END_OF_PLAN}) >= 2]
    assert branching
    assert len(following["open_file", "summarize_pdf"] - {END_OF_PLAN}) >= 3


def test_last_call_alone_is_ambiguous(data: Dataset) -> None:
    nxt: dict[str, Counter[str]] = defaultdict(Counter)
    for demo in data.demos:
        for step in demo.steps():
            if step.history:
                nxt[step.history[-1]][step.target] += 1
    assert max(len(c) for c in nxt.values()) >= 3
    assert len(nxt["summarize_pdf"]) >= 3


def test_parallel_steps_have_several_acceptable_tools(data: Dataset) -> None:
    steps = [s for d in data.demos for s in d.steps()]
    multi = [s for s in steps if len(s.acceptable) >= 2]
    assert multi
    assert len(multi) / len(steps) > 0.05
    # The recorded order of parallel calls varies across demonstrations of one pattern.
    pattern = ("compose_email", "get_email_address", "get_phone_number", "send_sms")
    orders = {d.calls for d in data.demos if tuple(sorted(d.calls)) == pattern}
    assert len(orders) >= 2


def test_plan_lengths_and_query_variety(data: Dataset) -> None:
    lengths = Counter(len(d.calls) for d in data.demos)
    assert set(range(1, 6)) <= set(lengths)
    assert max(lengths) <= 8
    queries = {d.query for d in data.demos}
    assert len(queries) >= 500


def test_intent_frequencies_vary(data: Dataset) -> None:
    assert len(DEMO_INTENTS) >= 20
    assert len(set(DEMO_INTENTS)) == len(DEMO_INTENTS)
    # Plan shapes (tool multisets) are not uniform: some common, some rare.
    shapes = Counter(tuple(sorted(d.calls)) for d in data.demos)
    counts = sorted(shapes.values())
    assert counts[-1] >= 5 * counts[0]


def test_queries_are_clean_sentences(data: Dataset) -> None:
    for demo in data.demos:
        q = demo.query
        assert "{" not in q, q
        assert "}" not in q, q
        assert q[0].isupper() or q[0] == '"', q
        assert q.endswith((".", "?")), q


def test_shared_wording_is_ambiguous_between_intents(data: Dataset) -> None:
    # "Summarize X.pdf and send it to Bob" is answered by email in some demos, by text in others.
    ends = {
        d.calls[-1]
        for d in data.demos
        if "summarize_pdf" in d.calls and " and send it to " in d.query
    }
    assert {"compose_email", "send_sms"} <= ends


def test_demo_data_table_is_consistent():
    """Every template's plan names catalogue tools and earlier labels, and its slots exist."""
    import string

    from dtdr_agents.datasets.demo_data import INTENTS, POOLS

    names = {t.name for t in DEMO_TOOLS}
    slots = set(POOLS) | {f"{k}2" for k in POOLS} | {"pdf", "people"}
    for intent in INTENTS:
        labels: set[str] = set()
        for step in intent.plan.split():
            label, _, rest = step.rpartition("=")
            rest, _, needs = rest.partition("<")
            tool = rest.partition("@")[0].partition("*")[0]
            assert tool in names, (intent.name, tool)
            assert {n for n in needs.split(",") if n} <= labels, (intent.name, step)
            labels.add(label)
        for text in intent.paraphrases:
            used = {f for _, f, _, _ in string.Formatter().parse(text) if f}
            assert used <= slots, (intent.name, used - slots)
