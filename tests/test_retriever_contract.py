"""One contract, run over every retriever class in the registry."""

from __future__ import annotations

import numpy as np
import pytest

from dtdr_agents import END_OF_PLAN, NotFittedError, Tool, Toolset, UnknownToolError
from dtdr_agents.foundation.selection import SelectionPolicy, select
from dtdr_agents.retrievers import composite_ids, make_retriever, retriever_ids
from dtdr_agents.retrievers.registry import entry, tree


class ScriptedChat:
    """A minimal chat model (the core's protocol: invoke(messages) -> object with .content)."""

    def __init__(self) -> None:
        self.calls = 0

    def invoke(self, messages):
        self.calls += 1

        class Reply:
            content = "A tool that looks up a contact's email address and composes an email."

        return Reply()


def _ids():
    """Every registered id and variant, and each composite over `qts`."""
    composites = [pattern.replace("<base>", "qts") for pattern in composite_ids()]
    return [*retriever_ids(), *composites]


def _build(rid, encoder):
    """The retriever of `rid`, with what every class of its tree needs to run offline."""
    context = {"encoder": encoder, "chat_model": ScriptedChat(), "seed": 7}
    for head in rid.split(":"):
        context.update(entry(head).cls.example_params())
    return make_retriever(rid, lenient=True, **context)


def _fit(rid, encoder, train, tools):
    return _build(rid, encoder).fit(train, tools)


def _runtime_params(model):
    return {name: getattr(node, name) for node in tree(model) for name in node.runtime_params}


IDS = _ids()
QUERIES = [
    ("Summarize report.pdf and email the summary to Anna", ()),
    ("Summarize report.pdf and email the summary to Anna", ("open_file", "summarize_pdf")),
    ("Text Bob and Carol that the meeting moved to 3pm", ("get_phone_number",)),
]


@pytest.fixture(scope="module")
def fitted(encoder, demo_data, demo_split):
    cache = {}

    def get(rid):
        if rid not in cache:
            cache[rid] = _fit(rid, encoder, demo_split[0], demo_data.tools)
        return cache[rid]

    return get


@pytest.mark.parametrize("rid", IDS)
class TestRetrieverContract:
    def test_fit_returns_self_and_sets_learned_attributes(
        self, rid, encoder, demo_data, demo_split
    ):
        model = _build(rid, encoder)
        assert model.fit(demo_split[0][:80], demo_data.tools) is model
        assert model.labels_[-1] == END_OF_PLAN
        assert len(model.labels_) == len(demo_data.tools) + 1

    def test_init_only_stores_params(self, rid, encoder):
        model = _build(rid, encoder)
        cls = type(model)
        assert not [a for a in vars(model) if a.endswith("_") and not a.startswith("_")]
        clone = cls(**model.get_params())
        assert clone.get_params() == model.get_params()

    def test_unfitted_use_raises(self, rid, encoder):
        with pytest.raises(NotFittedError, match="not fitted"):
            _build(rid, encoder).rank("send an email")

    def test_probabilities_form_a_distribution(self, rid, fitted, demo_data):
        model = fitted(rid)
        for query, history in QUERIES:
            ranking = model.rank(query, history)
            assert ranking.names == (*demo_data.tools.names, END_OF_PLAN)
            p = ranking.probabilities
            assert p.shape == (len(demo_data.tools) + 1,)
            assert np.all(p >= 0)
            assert p.sum() == pytest.approx(1.0, abs=1e-9)
            assert [t.rank for t in ranking.top(3)] == [1, 2, 3]

    def test_same_seed_same_ranking(self, rid, fitted, encoder, demo_data, demo_split):
        again = _fit(rid, encoder, demo_split[0], demo_data.tools)
        for query, history in QUERIES:
            np.testing.assert_allclose(
                fitted(rid).rank(query, history).probabilities,
                again.rank(query, history).probabilities,
                rtol=0,
                atol=1e-9,
            )

    def test_save_load_gives_identical_rankings(self, rid, fitted, tmp_path):
        model = fitted(rid)
        path = model.save(tmp_path / "model")
        expected = {"arrays.safetensors", "manifest.json", *model.parts()}
        assert {p.name for p in path.iterdir()} == expected
        loaded = type(model).load(path, params=_runtime_params(model))
        assert type(loaded) is type(model)
        assert [type(n) for n in tree(loaded)] == [type(n) for n in tree(model)]
        for query, history in QUERIES:
            np.testing.assert_allclose(
                model.rank(query, history).probabilities,
                loaded.rank(query, history).probabilities,
                rtol=0,
                atol=1e-6,
            )

    def test_unknown_history_is_an_error_unless_ignored(self, rid, fitted):
        model = fitted(rid)
        with pytest.raises(UnknownToolError, match="no_such_tool"):
            model.rank("email Anna", ["get_email_address", "no_such_tool"])
        ranking = model.rank(
            "email Anna", ["get_email_address", "no_such_tool"], ignore_unknown=True
        )
        assert ranking.probabilities.sum() == pytest.approx(1.0)

    def test_empty_query_is_an_error(self, rid, fitted):
        with pytest.raises(ValueError, match="query"):
            fitted(rid).rank("   ")

    def test_recommend_is_a_sized_explained_set(self, rid, fitted, demo_data):
        model = fitted(rid)
        for query, history in QUERIES:
            rec = model.recommend(query, history)
            if rec.fallback:  # out of distribution: empty, and it says why
                assert rec.names == () and rec.reason
                continue
            assert rec.names and len(set(rec.names)) == len(rec.names)
            assert set(rec.names) <= set(demo_data.tools.names)
            assert set(history) <= set(rec.names)
            assert set(rec.stages) == set(rec.names) == set(rec.why)
            assert all(0.0 <= p <= 1.0 for p in rec.probabilities)
            assert rec.policy
        with pytest.raises(UnknownToolError, match="no_such_tool"):
            model.recommend("email Anna", ["no_such_tool"])

    def test_removed_tool_is_never_returned(self, rid, encoder, demo_data, demo_split):
        model = _fit(rid, encoder, demo_split[0], demo_data.tools)
        removed = "compose_email"
        model.set_tools([t for t in demo_data.tools if t.name != removed])
        ranking = model.rank("Email the report to Anna", ["get_email_address"])
        assert removed not in ranking.names
        assert ranking.probabilities.sum() == pytest.approx(1.0)
        everything = select(ranking, SelectionPolicy(k=None))
        assert removed not in everything.names

    def test_tool_added_after_fit_can_be_retrieved(self, rid, encoder, demo_data, demo_split):
        model = _fit(rid, encoder, demo_split[0], demo_data.tools)
        new = Tool("book_flight", "Book a plane ticket for a flight between two airports")
        model.set_tools(Toolset([*demo_data.tools, new]))
        ranking = model.rank("Book me a flight from Paris to Rome on Friday")
        assert ranking.probability("book_flight") > 0
        assert "added after fit" in ranking.why("book_flight")
