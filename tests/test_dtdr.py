"""Behaviour specific to DTDR-C, DTDR-L and the static baselines."""

from __future__ import annotations

import numpy as np
import pytest

from dtdr_agents import DTDRC, DTDRL, END_OF_PLAN, Demonstration, StaticDR, StaticLR, Tool, Toolset
from dtdr_agents.evaluation.protocol import fit_and_evaluate
from dtdr_agents.foundation.selection import SelectionPolicy, select
from dtdr_agents.retrievers import linear
from dtdr_agents.retrievers.linear import init_linear, train_linear
from dtdr_agents.retrievers.markov import START, MarkovTables, history_key

OOD_QUERY = (
    "Derive the beta function of quantum chromodynamics at two loops in dimensional regularisation"
)


def test_history_key_pads_with_start():
    assert history_key([], 3) == (START, START, START)
    assert history_key([4, 5], 3) == (START, 4, 5)
    assert history_key([1, 2, 3, 4], 3) == (2, 3, 4)


def test_markov_tables_weighted_and_unweighted():
    tables = MarkovTables(4, orders=(1,))
    tables.add_sequence(0, [0, 1], end_label=3)
    tables.add_sequence(0, [0, 2], end_label=3)
    tables.add_sequence(0, [0, 1], end_label=3)
    tables.freeze()
    np.testing.assert_allclose(tables.distribution(0, (0,)), [0, 2 / 3, 1 / 3, 0])
    np.testing.assert_allclose(tables.distribution(0, (0,), weighted=False), [0, 0.5, 0.5, 0])
    np.testing.assert_allclose(tables.distribution(0, (START,)), [1, 0, 0, 0])
    assert tables.distribution(0, (3,)) is None
    rebuilt = MarkovTables.from_arrays(4, (1,), tables.to_arrays())
    np.testing.assert_allclose(rebuilt.distribution(0, (0,)), tables.distribution(0, (0,)))


TOOLS = Toolset(
    [
        Tool("open_file", "Open a file"),
        Tool("summarize_pdf", "Summarize a PDF document"),
        Tool("append_note", "Append text to a note"),
        Tool("get_email", "Look up a contact's email address"),
        Tool("compose_email", "Compose and send an email"),
    ]
)


def _branching_demos(n: int = 60) -> list[Demonstration]:
    demos = []
    for i in range(n):
        if i % 2:
            demos.append(
                Demonstration(
                    f"Summarize paper{i}.pdf and add it to my notes",
                    ("open_file", "summarize_pdf", "append_note"),
                )
            )
        else:
            demos.append(
                Demonstration(
                    f"Summarize paper{i}.pdf and email it to my boss",
                    ("open_file", "summarize_pdf", "get_email", "compose_email"),
                )
            )
    return demos


def test_dtdr_c_uses_query_and_history_where_dr_cannot(encoder):
    demos = _branching_demos()
    dtdr = DTDRC(encoder=encoder, n_clusters=2).fit(demos, TOOLS)
    dr = StaticDR(encoder=encoder).fit(demos, TOOLS)
    history = ["open_file", "summarize_pdf"]
    email = dtdr.rank("Summarize thesis.pdf and email it to my boss", history)
    notes = dtdr.rank("Summarize thesis.pdf and add it to my notes", history)
    assert email.top(1)[0].name == "get_email"
    assert notes.top(1)[0].name == "append_note"
    assert email.explanation["key"] == ("start", "open_file", "summarize_pdf")
    assert email.explanation["source"] == "cluster order 3"
    # DR sees only the last call: both continuations, whatever the request says
    flat = dr.rank("Summarize thesis.pdf and email it to my boss", history)
    assert flat.probability("get_email") == pytest.approx(0.5)
    assert flat.probability("append_note") == pytest.approx(0.5)


def test_auto_clusters_are_one_per_ten_demonstrations(encoder):
    model = DTDRC(encoder=encoder).fit(_branching_demos(60), TOOLS)
    assert model.n_clusters_ <= 6
    assert model.cluster_sizes_.sum() == 60


def test_backoff_versus_paper_behaviour_on_unseen_history(encoder):
    demos = _branching_demos()
    history = ["get_email", "open_file"]  # never seen in this order
    paper = DTDRC(encoder=encoder, n_clusters=2, backoff=False).fit(demos, TOOLS)
    ranking = paper.rank("Summarize x.pdf and email it", history)
    np.testing.assert_allclose(ranking.probabilities, 1 / 6)
    assert "uniform" in ranking.explanation["source"]
    backoff = DTDRC(encoder=encoder, n_clusters=2).fit(demos, TOOLS)
    ranking = backoff.rank("Summarize x.pdf and email it", history)
    assert ranking.explanation["source"] == "cluster order 1"
    assert ranking.top(1)[0].name == "summarize_pdf"


def test_unweighted_chain_is_uniform_over_successors(encoder):
    demos = _branching_demos()
    model = StaticDR(encoder=encoder, weighted=False).fit(demos, TOOLS)
    ranking = model.rank("anything", ["summarize_pdf"])
    assert ranking.probability("append_note") == pytest.approx(0.5)
    assert ranking.probability("get_email") == pytest.approx(0.5)


def test_out_of_distribution_query_falls_back_to_all_tools(encoder, demo_data, demo_split):
    train, test = demo_split
    for model in (DTDRC(encoder=encoder), DTDRL(encoder=encoder, history="structured")):
        model.fit(train, demo_data.tools)
        ranking = model.rank(OOD_QUERY)
        assert ranking.fallback, type(model).__name__
        assert ranking.fallback_reason
        chosen = select(ranking, SelectionPolicy(k=3))
        assert chosen.fallback and len(chosen.names) == len(demo_data.tools)
        in_dist = sum(model.rank(d.query).fallback for d in test) / len(test)
        assert in_dist < 0.1, (type(model).__name__, in_dist)


@pytest.mark.parametrize("block_bytes", [linear.BLOCK_BYTES, 4 * 8 * 3])
def test_train_linear_matches_torch_adam(monkeypatch, block_bytes):
    """Also when the labels are trained in blocks (here of 3 and then 1 label)."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(linear, "BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 8)).astype(np.float32)
    y = (rng.random((60, 4)) < 0.3).astype(np.float32)
    for batch_size in (1, 7):
        w0, b0 = init_linear(8, 4, seed=0)
        w, b = train_linear(
            x,
            y,
            epochs=3,
            lr=1e-2,
            lr_decay=0.9,
            weight_decay=1e-3,
            batch_size=batch_size,
            seed=0,
            init=(w0, b0),
        )
        layer = torch.nn.Linear(8, 4)
        layer.weight.data, layer.bias.data = torch.tensor(w0), torch.tensor(b0)
        opt = torch.optim.Adam(layer.parameters(), lr=1e-2, weight_decay=1e-3)
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, 0.9)
        order = np.random.default_rng(1)  # the permutation stream train_linear uses (seed + 1)
        for _ in range(3):
            perm = order.permutation(60)
            for start in range(0, 60, batch_size):
                idx = perm[start : start + batch_size]
                opt.zero_grad()
                logits = layer(torch.tensor(x[idx]))
                loss = torch.nn.functional.binary_cross_entropy_with_logits(
                    logits, torch.tensor(y[idx]), reduction="sum"
                ) / len(idx)
                loss.backward()
                opt.step()
            sched.step()
        np.testing.assert_allclose(w, layer.weight.detach().numpy(), atol=1e-5)
        np.testing.assert_allclose(b, layer.bias.detach().numpy(), atol=1e-5)


class CountingEncoder:
    """Wraps an encoder and counts the texts it is asked to embed."""

    def __init__(self, inner):
        self.inner = inner
        self.texts: list[str] = []

    @property
    def id(self):
        return self.inner.id

    @property
    def dim(self):
        return self.inner.dim

    def encode(self, texts):
        self.texts.extend(texts)
        return self.inner.encode(texts)


def test_structured_history_needs_no_encoder_call_after_the_first_step(
    encoder, demo_data, demo_split
):
    counting = CountingEncoder(encoder)
    model = DTDRL(encoder=counting, history="structured").fit(demo_split[0], demo_data.tools)
    counting.texts.clear()
    query = "Summarize budget.pdf and email the summary to Anna and Bo"
    model.rank(query)
    encoded_first = len(counting.texts)
    for history in (
        ["open_file"],
        ["open_file", "summarize_pdf"],
        ["open_file", "summarize_pdf", "get_email_address"],
    ):
        model.rank(query, history)
    assert encoded_first >= 1
    # the cached query embedding is looked up, nothing new is computed
    assert encoder.inner is not None
    text_model = DTDRL(encoder=counting, history="text").fit(demo_split[0][:60], demo_data.tools)
    counting.texts.clear()
    text_model.rank(query, ["open_file"])
    assert any("Calls so far: open_file" in t for t in counting.texts)


def test_static_lr_ignores_history(encoder, demo_data, demo_split):
    model = StaticLR(encoder=encoder).fit(demo_split[0], demo_data.tools)
    a = model.rank("Email Anna the report", [])
    b = model.rank("Email Anna the report", ["get_email_address", "compose_email"])
    np.testing.assert_allclose(a.probabilities, b.probabilities)


def test_dtdr_beats_static_baselines_on_demo_data(encoder, demo_data, demo_split):
    train, test = demo_split
    scores = {
        name: fit_and_evaluate(model, train, test, demo_data.tools).metrics["mrr"]
        for name, model in {
            "dr": StaticDR(encoder=encoder),
            "lr": StaticLR(encoder=encoder),
            "dtdr-c": DTDRC(encoder=encoder),
            "dtdr-l-s": DTDRL(encoder=encoder, history="structured"),
        }.items()
    }
    assert scores["dtdr-c"] > scores["dr"] > scores["lr"], scores
    assert scores["dtdr-l-s"] > scores["dr"], scores


def test_end_of_plan_is_predicted_after_a_complete_plan(encoder):
    model = DTDRC(encoder=encoder, n_clusters=2).fit(_branching_demos(), TOOLS)
    ranking = model.rank(
        "Summarize a.pdf and add it to my notes", ["open_file", "summarize_pdf", "append_note"]
    )
    assert ranking.top(1)[0].name == END_OF_PLAN
