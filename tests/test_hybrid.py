"""`hybrid`: zero-shot relevance plus learned dependencies, mixed by a cross-fitted combiner."""

from __future__ import annotations

import numpy as np
import pytest

from dtdr_agents.evaluation.protocol import fit_and_evaluate
from dtdr_agents.foundation.types import END_OF_PLAN, Demonstration, Tool, Toolset
from dtdr_agents.retrievers import hybrid, hybrid_features
from dtdr_agents.retrievers.baselines import BM25Retriever
from dtdr_agents.retrievers.dtdr_c import DTDRC
from dtdr_agents.retrievers.hybrid import FEATURES, HybridRetriever
from dtdr_agents.retrievers.index import hnsw_available
from dtdr_agents.retrievers.linear import DTDRL


@pytest.fixture(scope="module")
def fitted(encoder, demo_data, demo_split):
    train, _ = demo_split
    return HybridRetriever(encoder=encoder, n_folds=2).fit(train[:200], demo_data.tools)


def test_ranks_every_tool_and_end_of_plan(fitted, demo_data, demo_split):
    _, test = demo_split
    demo = test[0]
    ranking = fitted.rank(demo.query, demo.calls[:1])
    assert set(ranking.names) == {*demo_data.tools.names, END_OF_PLAN}
    assert ranking.probabilities.sum() == pytest.approx(1.0)
    assert np.all(ranking.probabilities > 0)
    assert ranking.explanation["method"] == "hybrid"
    assert ranking.explanation["index"] == "exact"


def test_cross_fitting_records_held_out_figures(fitted):
    cv = fitted.cv_
    assert cv["n_demos"] == 200 and cv["held_out_steps"] > 200
    assert 0.0 < cv["held_out_mrr"]["hybrid"] <= 1.0
    mix = fitted.mix()
    assert list(mix) == list(FEATURES)
    # the learned parts earned a positive weight on held-out data
    assert mix["dtdr_l"] + mix["dtdr_l_fine"] > 0


def test_end_of_plan_is_scored_explicitly(fitted, demo_split):
    _, test = demo_split
    demo = next(d for d in test if len(d.calls) >= 2)
    first = fitted.rank(demo.query, ())
    last = fitted.rank(demo.query, demo.calls)
    assert first.rank_of(END_OF_PLAN) > 1
    assert last.probability(END_OF_PLAN) > first.probability(END_OF_PLAN)


@pytest.mark.slow
def test_at_least_as_good_as_its_parts_on_held_out_plans(encoder, demo_data, demo_split):
    train, test = demo_split
    tools = demo_data.tools
    mrr = {
        name: fit_and_evaluate(model, train, test, tools).metrics["mrr"]
        for name, model in {
            "hybrid": HybridRetriever(encoder=encoder, n_folds=3),
            "bm25": BM25Retriever(),
            "dtdr-l-s": DTDRL(history="structured", encoder=encoder),
        }.items()
    }
    assert mrr["hybrid"] >= max(mrr["bm25"], mrr["dtdr-l-s"]) - 0.01, mrr


def test_tools_without_demonstrations_rely_on_zero_shot(encoder):
    tools = Toolset(
        [
            {"name": "get_weather", "description": "Current weather forecast for a city"},
            {"name": "send_email", "description": "Send an email message to a contact"},
            {"name": "book_flight", "description": "Book a plane ticket between two airports"},
            {"name": "translate_text", "description": "Translate text into another language"},
        ]
    )
    demos = [
        Demonstration(f"what is the weather in city {i}", ("get_weather",)) for i in range(6)
    ] + [Demonstration(f"email my colleague number {i}", ("send_email",)) for i in range(6)]
    model = HybridRetriever(encoder=encoder, n_folds=3).fit(demos, tools)
    ranking = model.rank("please translate this text into French", ())
    assert ranking.top(1)[0].name == "translate_text"  # never demonstrated
    assert model.rank("weather in Paris", ()).top(1)[0].name == "get_weather"


def test_save_and_load_give_the_same_ranking(fitted, demo_split, tmp_path):
    _, test = demo_split
    demo = test[3]
    fitted.save(tmp_path / "hybrid")
    back = HybridRetriever.load(tmp_path / "hybrid", encoder=fitted.encoder_)
    assert isinstance(back, HybridRetriever)
    for t in range(len(demo.calls) + 1):
        a = fitted.rank(demo.query, demo.calls[:t])
        b = back.rank(demo.query, demo.calls[:t])
        assert np.allclose(a.probabilities, b.probabilities, atol=1e-9)
    # a model fitted when its features meant something else is refused, not loaded
    import json

    from dtdr_agents.foundation.errors import ModelLoadError
    from dtdr_agents.foundation.manifest import manifest_digest

    manifest_path = tmp_path / "hybrid" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert manifest["state"]["feature_revision"] == hybrid.FEATURE_REVISION
    manifest["state"]["feature_revision"] = hybrid.FEATURE_REVISION - 1
    manifest["integrity"]["manifest_sha256"] = manifest_digest(manifest)  # as a real save
    manifest_path.write_text(json.dumps(manifest))
    revision = hybrid.FEATURE_REVISION
    with pytest.raises(
        ModelLoadError, match=f"feature_revision {revision - 1} is not this version's {revision}"
    ):
        HybridRetriever.load(tmp_path / "hybrid", encoder=fitted.encoder_)


def test_zero_demonstrations_is_pure_zero_shot_and_demonstrations_help(
    encoder, demo_data, demo_split
):
    train, test = demo_split
    zero = HybridRetriever(encoder=encoder).fit([], demo_data.tools)
    assert zero.chains_ is None and zero.linear_ is None and zero.cv_["n_demos"] == 0
    assert zero.mix()["dtdr_l"] == zero.mix()["dtdr_l_fine"] == 0.0
    ranking = zero.rank(test[0].query, ())
    assert ranking.probabilities.sum() == pytest.approx(1.0)
    assert ranking.rank_of(END_OF_PLAN) > 1  # no call yet: end-of-plan is unlikely
    score_zero = fit_and_evaluate(zero, [], test[:40], demo_data.tools).metrics["mrr"]
    learned = HybridRetriever(encoder=encoder, n_folds=2)
    score_learned = fit_and_evaluate(learned, train[:120], test[:40], demo_data.tools)
    assert score_learned.metrics["mrr"] > score_zero


def test_zero_demonstrations_follow_the_history_and_stop_on_the_clauses(encoder, demo_data):
    """With nothing to cross-fit the hybrid still uses the calls so far: a tool already called
    drops, the open sub-goal's tool rises, and end-of-plan comes from calls against clauses."""
    from dtdr_agents.foundation.clauses import zero_shot_stop_probability

    tools = Toolset(
        [
            Tool("image_caption", "Generate a text caption describing an image"),
            Tool("translate_text", "Translate text from one language into another language"),
            Tool("text_to_speech", "Read a text aloud as synthesized speech audio"),
            Tool("weather_lookup", "Current weather forecast for a city"),
        ]
    )
    query = "Describe the image photo.jpg in a caption, then translate the caption into French"
    zero = HybridRetriever(encoder=encoder).fit([], tools)
    first = zero.rank(query, ())
    assert first.top(1)[0].name == "image_caption"
    assert first.rank_of(END_OF_PLAN) > 1
    after = zero.rank(query, ("image_caption",))
    assert after.top(1)[0].name == "translate_text"  # the open sub-goal, not the same tool again
    assert after.rank_of("image_caption") > 1
    assert after.explanation["zero_shot"].startswith("0 demonstrations")
    done = zero.rank(query, ("image_caption", "translate_text"))
    assert done.top(1)[0].name == END_OF_PLAN  # both clauses have a call
    assert done.probability(END_OF_PLAN) == pytest.approx(zero_shot_stop_probability(query, 2))
    assert "open_sub_goal_rank=" in after.why("translate_text")


def test_zero_demonstrations_follow_a_given_tool_graph_and_save_it(encoder, tmp_path):
    """With nothing to cross-fit, the edge from the last call raises its consumer; a graph
    given as a networkx-like object saves as a plain edge list and loads to the same ranks."""
    from dtdr_agents.retrievers import load_retriever

    tools = Toolset(
        [
            Tool("fetch_page", "Download a web page"),
            Tool("summarize_text", "Summarize a text"),
            Tool("translate_text", "Translate a text"),
        ]
    )
    query = (
        "Download the page https://example.org, then give me a short version of the text in French"
    )

    class Graph:  # networkx-like: .edges(data=True)
        def edges(self, data: bool = False):
            return [("fetch_page", "summarize_text", {"weight": 2.0})]

    plain = HybridRetriever(encoder=encoder).fit([], tools)
    given = HybridRetriever(encoder=encoder, graph=Graph()).fit([], tools)
    history = ("fetch_page",)
    assert given.graph == [["fetch_page", "summarize_text", 2.0]]
    # the tools with no edge from the last call pay for it: the consumer gains
    assert "graph_rank" in given.rank(query, history).why("translate_text")
    assert "graph_rank" not in plain.rank(query, history).why("translate_text")
    assert given.rank(query, history).probability("summarize_text") > plain.rank(
        query, history
    ).probability("summarize_text")
    given.save(tmp_path / "m")
    loaded = load_retriever(tmp_path / "m")
    np.testing.assert_allclose(
        loaded.rank(query, history).probabilities, given.rank(query, history).probabilities
    )
    with pytest.warns(UserWarning, match="not in the catalogue"):
        HybridRetriever(encoder=encoder, graph=[["fetch_page", "nowhere"]]).fit([], tools).rank(
            query, history
        )


def test_bad_parameters_are_named(encoder, demo_data, demo_split):
    train, _ = demo_split
    with pytest.raises(ValueError, match="n_folds"):
        HybridRetriever(encoder=encoder, n_folds=1).fit(train[:20], demo_data.tools)
    with pytest.raises(ValueError, match="candidates"):
        HybridRetriever(encoder=encoder, candidates=0).fit(train[:20], demo_data.tools)


@pytest.mark.skipif(not hnsw_available(), reason="usearch is not installed")
def test_large_catalogue_uses_the_hnsw_candidate_stage(encoder, demo_data, demo_split):
    train, test = demo_split
    filler = [
        {"name": f"filler_{i}", "description": f"internal maintenance task number {i}"}
        for i in range(300)
    ]
    tools = Toolset([*demo_data.tools.to_list(), *filler])
    model = HybridRetriever(encoder=encoder, n_folds=2, candidates=30, exact_limit=100)
    model.fit(train[:150], tools)
    demo = test[0]
    ranking = model.rank(demo.query, demo.calls[:1])
    assert ranking.explanation["index"] == "hnsw"
    assert ranking.explanation["candidates"] < len(tools)
    assert ranking.probabilities.sum() == pytest.approx(1.0)
    assert not ranking.top(1)[0].name.startswith("filler_")


def _synthetic_held_out(seed: int, steps: int = 400) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Steps of varying width whose acceptable candidate is drawn from a known conditional logit."""
    rng = np.random.default_rng(seed)
    true_w = np.zeros(len(hybrid.FEATURES))
    true_w[:4] = [2.0, -1.0, 0.5, 1.5]
    feats, targets = [], []
    for _ in range(steps):
        x = rng.normal(size=(int(rng.integers(2, 30)), len(hybrid.FEATURES)))
        p = np.exp(x @ true_w - (x @ true_w).max())
        mask = np.zeros(len(x), dtype=bool)
        mask[rng.choice(len(x), p=p / p.sum())] = True
        feats.append(x)
        targets.append(mask)
    return feats, targets


def test_combiner_recovers_the_weights_that_generated_the_choices():
    feats, targets = _synthetic_held_out(0, steps=3000)
    held = hybrid._HeldOut.stack(feats, targets)
    assert not feats and not targets  # emptied: the stacked copy is the only one
    w = hybrid._fit_combiner(held, np.zeros(len(hybrid.FEATURES)), l2=0.0)
    np.testing.assert_allclose(w[:4], [2.0, -1.0, 0.5, 1.5], atol=0.15)
    assert np.abs(w[4:]).max() < 0.15


def _badly_scaled_held_out(seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Steps whose features are far apart in scale, nearly collinear, rare or coarse."""
    rng = np.random.default_rng(seed)
    feats, targets = [], []
    for _ in range(600):
        n = int(rng.integers(2, 30))
        x = np.zeros((n, len(hybrid.FEATURES)))
        x[:, 0] = rng.normal(size=n)
        x[:, 1] = 30.0 * x[:, 0] + 0.3 * rng.normal(size=n)  # nearly collinear, 30x the scale
        x[:, 2] = 5.0 * (rng.random(n) < 0.02)  # rare
        x[:, 3] = 0.01 * rng.normal(size=n)  # tiny
        x[:, 4] = -np.log1p(rng.permutation(n))  # a rank
        x[:, 5] = 100.0 * (rng.random(n) < 0.2)  # large and coarse
        x[:, 6] = x[:, 4] + 0.05 * rng.normal(size=n)  # nearly the rank again
        s = x[:, 0] + 0.02 * x[:, 1] + 0.3 * x[:, 2] + x[:, 4]
        p = np.exp(s - s.max())
        mask = np.zeros(n, dtype=bool)
        mask[rng.choice(n, p=p / p.sum())] = True
        if rng.random() < 0.3:  # a second acceptable candidate, as a plan's DAG allows
            mask[rng.integers(n)] = True
        feats.append(x)
        targets.append(mask)
    return feats, targets


def _combiner_objective(feats, targets, prior, l2):
    """The combiner's penalised loss, its gradient and Hessian, step by step (no `_HeldOut`)."""
    rows = np.vstack(feats)
    pull = l2 * (rows.T @ rows / len(rows) + hybrid.RIDGE * np.eye(rows.shape[1]))

    def at(w: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        d = w - prior
        loss, grad, hess = 0.5 * d @ pull @ d, pull @ d, pull.copy()
        for x, good in zip(feats, targets, strict=True):
            s = x @ w
            e = np.exp(s - s.max())
            p, q = e / e.sum(), np.where(good, e, 0.0) / e[good].sum()
            loss += np.log(e.sum()) - np.log(e[good].sum())
            grad += x.T @ (p - q)
            mp, mq = x.T @ p, x.T @ q
            hess += (x.T * p) @ x - np.outer(mp, mp) - (x.T * q) @ x + np.outer(mq, mq)
        return float(loss), grad, hess

    return at


def _newton_optimum(at, w):
    """The optimum of the objective `at` by damped Newton steps from `w` (no SciPy).

    Returns the weights, the loss there and the Hessian there.
    """
    for _ in range(50):
        loss, grad, hess = at(w)
        step = np.linalg.solve(hess, grad)
        decrement = float(grad @ step)  # about twice the loss left above the optimum
        if decrement < 1e-16:  # scores within sqrt(1e-16 * x'H^-1 x), about 4e-9 here
            break
        t = 1.0
        while decrement > 1e-6 and at(w - t * step)[0] > loss - 0.25 * t * decrement:
            t /= 2
        w = w - t * step
    assert decrement < 1e-16  # converged: the reference is the optimum itself
    np.linalg.cholesky(hess)  # and a minimum (positive definite), not a saddle
    return w, loss, hess


@pytest.fixture(scope="module")
def badly_scaled():
    """Badly scaled held-out steps, the combiner's objective on them and its optimum."""
    feats, targets = _badly_scaled_held_out(5)
    prior, l2 = np.zeros(len(hybrid.FEATURES)), 0.5
    objective = _combiner_objective(feats, targets, prior, l2)
    return feats, targets, objective, *_newton_optimum(objective, prior)


@pytest.mark.parametrize("order_seed", [None, 1])
def test_combiner_fit_stops_at_its_optimum_on_badly_scaled_features(badly_scaled, order_seed):
    # The loss has one optimum, the same on every machine; a fit stops near it, where the
    # order of its float sums leads (another BLAS kernel or thread count, or here the steps
    # in another order). What matters is that the fit's scores (log-odds between a step's
    # candidates, so its probabilities) are the optimum's, far below the 3 decimals a prompt
    # shows. An absolute gradient is no measure of that: on a feature of scale 30 it stays
    # large where the scores have converged (issue 41: an AMD EPYC machine stopped with a
    # gradient of 3.2e-6 on this test's former data, 1.5e-8 elsewhere; fitting the steps in
    # another order gives the same 3.2e-6, and every score within 2e-8 of the other fit's).
    #
    # Tolerance: float64 resolves the loss L (about 900 here) to a few ulps of |L|, and the
    # fit stops when an iteration lowers it by less than FIT_OPTIONS' ftol (1e-15, 4.5
    # ulps). So allow L(w) - L(w*) <= c * eps * |L*| with c = 100, and no more score error
    # than that gap allows: with H the Hessian at the optimum, L(w) - L(w*) ~ d'Hd / 2 for
    # d = w - w*, and |x . d| <= sqrt(d'Hd) * sqrt(x'H^-1 x) (Cauchy-Schwarz), so the
    # score tolerance is sqrt(2 c eps |L*| max_x x'H^-1 x), 2.3e-6 here. Measured: 5.7e-8
    # (any order; OpenBLAS Haswell or SandyBridge, 1 or 2 threads); SciPy's default stop
    # (ftol 2.2e-9) left 2.9e-5 and a loss gap of 1.4e-8 (tolerance 2e-11).
    feats, targets, objective, w_star, loss_star, hess = badly_scaled
    prior, l2 = np.zeros(len(hybrid.FEATURES)), 0.5
    order = np.arange(len(feats))
    if order_seed is not None:
        order = np.random.default_rng(order_seed).permutation(len(feats))
    held = hybrid._HeldOut.stack([feats[i] for i in order], [targets[i] for i in order])
    w = hybrid._fit_combiner(held, prior, l2)

    c, eps = 100.0, np.finfo(np.float64).eps
    rows = np.vstack(feats)
    leverage = np.einsum("ij,jk,ik->i", rows, np.linalg.inv(hess), rows).max()
    score_tol = np.sqrt(2.0 * c * eps * abs(loss_star) * leverage)
    assert np.abs(rows @ (w - w_star)).max() <= score_tol
    assert objective(w)[0] - loss_star <= c * eps * abs(loss_star)


def test_combiner_l2_pulls_to_the_prior_and_beats_one_feature():
    feats, targets = _synthetic_held_out(1, steps=50)
    held = hybrid._HeldOut.stack(feats, targets)
    prior = np.full(len(hybrid.FEATURES), 0.3)
    strong = hybrid._fit_combiner(held, prior, l2=1e6)
    np.testing.assert_allclose(strong, prior, atol=1e-3)
    weak = hybrid._fit_combiner(held, prior, l2=0.0)
    assert np.abs(weak - prior).max() > 0.3
    # the held-out MRR of the fitted mix beats a single uninformative feature
    mrr = hybrid._held_out_mrr(held, weak)
    assert mrr["hybrid"] > mrr["dtdr-l"]


def test_held_out_subsets_split_the_loss():
    feats, targets = _synthetic_held_out(2, steps=40)
    held = hybrid._HeldOut.stack(feats, targets)
    w = np.random.default_rng(0).normal(size=len(hybrid.FEATURES))
    mask = np.arange(held.n_steps) % 3 == 0
    part, rest = held.take(mask), held.take(~mask)
    assert (part.n_steps, rest.n_steps) == (14, 26)
    assert part.loss(w) + rest.loss(w) == pytest.approx(held.loss(w))
    assert held.take(np.zeros(held.n_steps, dtype=bool)).loss(w) == 0.0


def test_the_pull_is_chosen_by_held_out_requests():
    """A prior that is the truth is best kept on few steps (the strongest pull wins); a prior
    that knows nothing loses to many steps (the weakest pull wins)."""
    true_w = np.zeros(len(hybrid.FEATURES))
    true_w[:4] = [2.0, -1.0, 0.5, 1.5]
    feats, targets = _synthetic_held_out(3, steps=30)
    few = hybrid._HeldOut.stack(feats, targets)
    groups = np.arange(few.n_steps) % 3
    chosen, losses = hybrid._select_l2(few, groups, true_w, [2.0, 8.0, 32.0])
    assert chosen == 32.0 and set(losses) == {"2.0", "8.0", "32.0"}
    feats, targets = _synthetic_held_out(4, steps=600)
    many = hybrid._HeldOut.stack(feats, targets)
    groups = np.arange(many.n_steps) % 3
    chosen, losses = hybrid._select_l2(many, groups, np.zeros(len(hybrid.FEATURES)), [2.0, 32.0])
    assert chosen == 2.0 and losses["2.0"] < losses["32.0"]


def test_the_prior_is_kept_unless_held_out_steps_clearly_beat_it():
    """One standard error: a prior that is the truth is kept (None) on few steps, where a
    fitted mix can only match it by chance; a prior that knows nothing loses to many steps."""
    true_w = np.zeros(len(hybrid.FEATURES))
    true_w[:4] = [2.0, -1.0, 0.5, 1.5]
    feats, targets = _synthetic_held_out(3, steps=30)
    few = hybrid._HeldOut.stack(feats, targets)
    groups = np.arange(few.n_steps) % 3
    chosen, losses = hybrid._select_l2(few, groups, true_w, [2.0, 8.0, None])
    assert chosen is None and set(losses) == {"2.0", "8.0", "prior"}
    feats, targets = _synthetic_held_out(4, steps=600)
    many = hybrid._HeldOut.stack(feats, targets)
    groups = np.arange(many.n_steps) % 3
    zero = np.zeros(len(hybrid.FEATURES))
    chosen, losses = hybrid._select_l2(many, groups, zero, [2.0, 32.0, None])
    assert chosen == 2.0 and losses["2.0"] < losses["prior"]


def test_the_fit_records_the_pull_it_chose(encoder, demo_data, demo_split):
    train, _ = demo_split
    n = hybrid.MIN_LEARNED_DEMOS
    chosen = HybridRetriever(encoder=encoder, n_folds=3).fit(train[:n], demo_data.tools)
    assert chosen.cv_["l2"] in {*(2.0 * m for m in hybrid.L2_MULTIPLES), None}
    names = {str(2.0 * m) for m in hybrid.L2_MULTIPLES} | {"prior"}
    assert set(chosen.cv_["l2_losses"]) == names
    fixed = HybridRetriever(encoder=encoder, n_folds=3, select_l2=False, l2=5.0)
    fixed.fit(train[:30], demo_data.tools)
    assert fixed.cv_["l2"] == 5.0 and "l2_losses" not in fixed.cv_


def test_fewer_demonstrations_than_weights_keep_the_prior(encoder, demo_data, demo_split):
    """A mix chosen on fewer plans than it has weights is chosen by noise (issue 40): below
    `MIN_LEARNED_DEMOS` the weights are the prior's and the ranking says why."""
    train, test = demo_split
    few = HybridRetriever(encoder=encoder).fit(
        train[: hybrid.MIN_LEARNED_DEMOS - 1], demo_data.tools
    )
    np.testing.assert_array_equal(few.weights_, hybrid._prior_vector())
    assert few.cv_["l2"] is None and "fewer than the combiner's" in few.cv_["prior_kept"]
    assert "zero-shot prior" in few.rank(test[0].query).explanation["mix"]
    assert few.chains_ is not None  # the demonstrations still count: the neighbours' plans


def _end_steps(margins: list[float], good_end: list[bool]) -> hybrid._HeldOut:
    """Two-row steps (a tool, then end-of-plan) with end-of-plan's score lead `margins`."""
    feats, targets = [], []
    for m, end_ok in zip(margins, good_end, strict=True):
        x = np.zeros((2, len(hybrid.FEATURES)))
        x[1, 0] = m  # feature 0 carries end-of-plan's lead in these steps
        feats.append(x)
        targets.append(np.array([not end_ok, end_ok]))
    return hybrid._HeldOut.stack(feats, targets)


def test_end_first_shift_stops_early_no_more_often_than_the_reference():
    rng = np.random.default_rng(0)
    margins = rng.normal(size=400)
    held = _end_steps(list(margins), [False] * 300 + [True] * 100)
    tool_steps = slice(0, 300)
    ends = np.arange(1, len(held.x), 2)
    scores = held.x[:, 0]
    reference = scores.copy()
    reference[ends] -= 1.0  # the reference leads fewer tool steps than `scores`
    shift = hybrid.end_first_shift(held, scores, reference)
    k = int((reference[ends][tool_steps] > 0).sum())
    led = int((scores[ends][tool_steps] - shift > 0).sum())
    assert shift > 0.0 and led <= k - np.sqrt(k * (1 - k / 300)) and led >= k - 2 * np.sqrt(k)
    # a mix that already stops early less often than the reference is left alone
    lower = reference.copy()
    lower[ends] -= 2.0
    assert hybrid.end_first_shift(held, lower, reference) == 0.0
    # no tool steps: nothing to hold back
    only_stops = _end_steps([1.0, -1.0], [True, True])
    assert hybrid.end_first_shift(only_stops, only_stops.x[:, 0], only_stops.x[:, 0]) == 0.0


def test_the_end_shift_lowers_end_of_plan_alone(encoder, demo_data, demo_split, monkeypatch):
    """The fitted mix's end-of-plan constant, and nothing else, is lowered by the recorded shift."""
    train, _ = demo_split

    def fit() -> HybridRetriever:
        model = HybridRetriever(encoder=encoder, n_folds=3, select_l2=False, l2=2.0)
        return model.fit(train[:40], demo_data.tools)

    shifted = fit()
    monkeypatch.setattr(hybrid, "end_first_shift", lambda *a, **k: 0.0)
    plain = fit()
    end = hybrid.FEATURES.index("end")
    delta = plain.weights_ - shifted.weights_
    np.testing.assert_allclose(np.delete(delta, end), 0.0, atol=1e-9)
    assert delta[end] == pytest.approx(shifted.cv_["end_shift"], abs=1e-5)
    assert plain.cv_["end_shift"] == 0.0


def test_combiner_pull_is_on_the_scores_not_the_raw_weights():
    # Feature 1 carries the same evidence as feature 0 on a ten times larger scale. A pull on
    # the scores shrinks both contributions alike; a plain L2 on the weights would barely
    # touch feature 1's small weight and shrink feature 0's.
    rng = np.random.default_rng(3)
    feats, targets = [], []
    for _ in range(300):
        x = np.zeros((10, len(hybrid.FEATURES)))
        x[:, 0] = rng.normal(size=10)
        x[:, 1] = 10.0 * rng.normal(size=10)
        s = x[:, 0] + 0.1 * x[:, 1]
        p = np.exp(s - s.max())
        mask = np.zeros(10, dtype=bool)
        mask[rng.choice(10, p=p / p.sum())] = True
        feats.append(x)
        targets.append(mask)
    held = hybrid._HeldOut.stack(feats, targets)
    free = hybrid._fit_combiner(held, np.zeros(len(hybrid.FEATURES)), l2=0.0)
    pulled = hybrid._fit_combiner(held, np.zeros(len(hybrid.FEATURES)), l2=300.0)
    assert pulled[0] < 0.8 * free[0]  # the pull is felt
    shrink = pulled[:2] / free[:2]
    assert shrink[1] == pytest.approx(shrink[0], rel=0.15), (free, pulled)


def test_cross_fitting_parts_know_only_the_training_folds_tools(encoder, monkeypatch):
    # A held-out target in the parts' label sets would be one of the few candidates they
    # score: the combiner would learn to trust them for tools they never saw called.
    tools = Toolset(
        [{"name": f"tool_{i}", "description": f"does task number {i} for a user"} for i in range(8)]
    )
    demos = [Demonstration(f"please do task {i}", (f"tool_{i}",)) for i in range(8)]
    fits: list[tuple[set[str], set[str]]] = []
    original = DTDRC.fit

    def spy(self, demos, tools):
        fits.append(({c for d in demos for c in d.calls}, set(tools.names)))
        return original(self, demos, tools)

    monkeypatch.setattr(DTDRC, "fit", spy)
    # a pull given (no `select_l2`): 8 demonstrations are cross-fitted, not kept at the prior
    HybridRetriever(encoder=encoder, n_folds=4, select_l2=False).fit(demos, tools)
    assert len(fits) == 5  # four folds, then all demonstrations
    for called, known in fits:
        assert known == called


def test_request_clauses_split_sub_goals():
    query = (
        "Translate the review into French, then summarize the translated review. "
        "Finally email the summary to my boss; ok"
    )
    assert hybrid.request_clauses(query) == [
        "Translate the review into French",
        "summarize the translated review",
        "Finally email the summary to my boss",
    ]  # "ok" has fewer than three words
    assert hybrid.request_clauses("weather in Paris") == ["weather in Paris"]
    assert len(hybrid.request_clauses(". ".join(["say hello there"] * 40), limit=5)) == 5


def test_zero_demonstrations_do_not_stop_while_a_sub_goal_takes_the_last_output(
    encoder, monkeypatch
):
    """One sub-goal and one call: the count says stop, but when the sub-goal's best tool is
    not called yet and takes what the last call produced (an edge of the graph), it does not."""
    from dtdr_agents.foundation.clauses import stop_probability

    tools = Toolset(
        [
            Tool("fetch_page", "Download a web page"),
            Tool("summarize_text", "Summarize a text in a few lines"),
            Tool("weather_lookup", "Current weather forecast for a city"),
        ]
    )
    query = "Summarize the text of the web page https://example.org in a few lines"
    history = ("fetch_page",)
    feeds = HybridRetriever(encoder=encoder, graph=[["fetch_page", "summarize_text"]])
    ranked = feeds.fit([], tools).rank(query, history)
    assert ranked.top(1)[0].name == "summarize_text"
    assert ranked.probability(END_OF_PLAN) == pytest.approx(stop_probability(1, 0))
    # no edge from the last call to the sub-goal's tool: the count decides
    other = HybridRetriever(encoder=encoder, graph=[["summarize_text", "fetch_page"]])
    done = other.fit([], tools).rank(query, history)
    assert done.probability(END_OF_PLAN) == pytest.approx(stop_probability(1, 1))
    assert done.top(1)[0].name == END_OF_PLAN
    # the sub-goal's tool already called: done either way
    both = feeds.rank(query, ("fetch_page", "summarize_text"))
    assert both.probability(END_OF_PLAN) == pytest.approx(stop_probability(1, 2))
    # a call that matches the sub-goal within the margin of its best tool has done it
    monkeypatch.setattr(hybrid_features, "DONE_MARGIN", 1.0)
    fresh = HybridRetriever(encoder=encoder, graph=[["fetch_page", "summarize_text"]])
    done_by_call = fresh.fit([], tools).rank(query, history)
    assert done_by_call.probability(END_OF_PLAN) == pytest.approx(stop_probability(1, 1))


def test_a_clause_that_states_what_the_user_has_is_no_sub_goal():
    from dtdr_agents.foundation.clauses import sub_goals

    query = (
        "I have an image 'example.jpg', a photo of a street. "
        "Please detect the cars in it, then describe the scene in a caption"
    )
    assert len(hybrid.request_clauses(query)) == 4
    # the context and its argument ("a photo of a street") are no sub-goals
    assert sub_goals(query) == ["Please detect the cars in it", "describe the scene in a caption"]
    assert sub_goals("Given the text 'It rains.', translate it into French") == [
        "translate it into French"
    ]
    assert sub_goals("The document: 'Q3 sales', summarize it in one line") == [
        "summarize it in one line"
    ]
    # a question asks for an answer; a request of context alone is its one sub-goal
    assert len(sub_goals("I have a question: 'Who wrote it?', and translate it into French")) == 2
    assert sub_goals("I have an image 'example.jpg'") == ["I have an image 'example.jpg'"]


def test_sub_goals_merge_clauses_that_only_add_an_argument():
    from dtdr_agents.foundation.clauses import sub_goals, zero_shot_stop_probability

    query = (
        "Calculate the gross salary with a basic salary of 2000 and an allowance of 500, "
        "get the definition of the word 'happy' and create an invoice for 'John Doe', "
        "the description 'Web work' and the due date '2022-12-31'"
    )
    assert len(hybrid.request_clauses(query)) == 6
    assert sub_goals(query) == [
        "Calculate the gross salary with a basic salary of 2000, an allowance of 500",
        "get the definition of the word 'happy'",
        "create an invoice for 'John Doe', the description 'Web work', the due date '2022-12-31'",
    ]
    # three calls cover the three sub-goals: the zero-shot rule now says stop
    assert zero_shot_stop_probability(query, 3) > 0.5 > zero_shot_stop_probability(query, 2)
    assert sub_goals("an allowance of 500 is due") == ["an allowance of 500 is due"]
    # thanks ask for nothing
    assert sub_goals("Get the weather in Paris. Thank you for your help!") == [
        "Get the weather in Paris"
    ]
    assert len(sub_goals("Thanks to the rain, book a taxi. Then get the weather in Oslo")) == 2


def test_a_request_of_marked_steps_has_one_sub_goal_per_step():
    from dtdr_agents.foundation.clauses import sub_goals

    # details, restatements and a preamble belong to the step they are in
    query = (
        "I need some help with my research paper. Please retrieve the lemma of the word "
        "'apple' using the lemmatizer API. Then, find information about a librarian named "
        "John Smith. If possible, include details about their qualification and "
        "specialization. Finally, I would like to see the floor plan of room 301."
    )
    goals = sub_goals(query)
    assert len(goals) == 3
    assert goals[1].startswith("Then, find") and goals[1].endswith("specialization.")
    # the text before "First" (or "1.") announces the list; context alone is no step
    assert (
        len(
            sub_goals(
                "I need your help with tasks. First, run X now. Then, get Y. Finally, send Z."
            )
        )
        == 3
    )
    numbered = "Help me with these tasks: 1. Apply the rules. 2. Retrieve the plan. 3. Submit it."
    assert sub_goals(numbered) == ["1. Apply the rules.", "2. Retrieve the plan.", "3. Submit it."]
    assert len(sub_goals("1. Apply the rules. 2. Retrieve the plan. 3. Submit it.")) == 3
    assert (
        len(sub_goals("I have an image 'example.jpg'. Then, classify it. Finally, caption it."))
        == 2
    )
    # one marked sentence is no list: the clauses decide
    assert len(sub_goals("Get the weather in Paris. Then book a taxi and send an email")) == 3
    # a clause that states what the user has, and what it needs done, asks
    assert len(sub_goals("I have a report that I need to translate. Please read it aloud")) == 2


def test_a_clause_names_a_parameter_when_it_holds_its_specific_words():
    from dtdr_agents.foundation.clauses import fills_parameter, word_stems

    assert word_stems("startDate_2 of slopes") == {"start", "date", "2", "of", "slop"}
    assert fills_parameter("slope height of 24.3 meters", ["slope_angle", "slopeHeight"])
    assert not fills_parameter("the slope of 24 degrees", ["slope_angle"])  # "angle" missing
    # words every tool's parameters share name none of them, and neither do numbers
    assert fills_parameter("convert it to text", ["text"])
    assert not fills_parameter("convert it to text", ["text"], generic={"text"})
    assert not fills_parameter("take image 2 of them", ["image_2"], generic={"image"})


def test_zero_demonstrations_count_no_sub_goal_for_a_call_argument(encoder):
    """Clauses that fill parameters of the tool the clause before asks for are no sub-goals:
    after its one call the request is done, and stop is the zero-shot rule's first choice."""
    from dtdr_agents.foundation.clauses import stop_probability

    def tool(name: str, description: str, *params: str) -> Tool:
        props = {p: {"type": "number"} for p in params}
        return Tool(name, description, {"type": "object", "properties": props})

    tools = Toolset(
        [
            tool(
                "getSlopeStability",
                "Slope stability analysis of a site",
                "slope_angle",
                "slope_height",
                "water_content",
            ),
            tool("getWeather", "Current weather forecast for a city", "city"),
            tool("convertCurrency", "Convert an amount between currencies", "amount"),
        ]
    )
    query = (
        "Get the slope stability analysis for a site with a slope angle of 34.2 degrees, "
        "slope height of 24.3 meters, water content of 33.9%"
    )
    from dtdr_agents.foundation.clauses import sub_goals

    assert len(sub_goals(query)) == 3
    model = HybridRetriever(encoder=encoder).fit([], tools)
    ranked = model.rank(query, ("getSlopeStability",))
    assert ranked.probability(END_OF_PLAN) == pytest.approx(stop_probability(1, 1))
    assert ranked.top(1)[0].name == END_OF_PLAN
    # a clause that names no parameter of that tool still asks for a call
    two = (
        "Get the slope stability analysis with a slope angle of 34.2, then get the weather in Oslo"
    )
    after_one = model.rank(two, ("getSlopeStability",))
    assert after_one.probability(END_OF_PLAN) == pytest.approx(stop_probability(2, 1))


def test_a_quoted_value_is_never_split_into_sub_goals():
    """Sentences and commas inside quotes belong to the value: they add no sub-goal."""
    from dtdr_agents.foundation.clauses import sub_goals, zero_shot_stop_probability

    query = (
        "I have the text 'What's the best way to learn, and to remember? Tell me.'. "
        'Translate it into Spanish and then notify me with the title "Done! Next, rest"'
    )
    assert hybrid.request_clauses(query) == [
        "I have the text 'What's the best way to learn, and to remember? Tell me.'",
        "Translate it into Spanish",
        'notify me with the title "Done! Next, rest"',
    ]
    # a whole request in quotes is the request, not a value
    assert hybrid.request_clauses('"Translate the text, then summarize it for me"') == [
        "Translate the text",
        "summarize it for me",
    ]
    # an apostrophe inside a word opens no quote
    assert len(sub_goals("Check the user's order status and then cancel the user's order")) == 2
    # two calls: the quoted sentences no longer keep the zero-shot stop rule waiting
    two = "Summarize 'It rains. It pours. Roads close.' and translate the summary into French"
    assert zero_shot_stop_probability(two, 2) > 0.5 > zero_shot_stop_probability(two, 1)


CLAUSE_TOOLS = [
    {"name": "translate_text", "description": "Translate text into another language"},
    {"name": "summarize_text", "description": "Summarize a long text into a few lines"},
]


def test_clause_features_follow_the_sub_goals_left(encoder):
    tools = Toolset(
        [
            *CLAUSE_TOOLS,
            {"name": "send_email", "description": "Send an email message to a contact"},
            {"name": "get_weather", "description": "Current weather forecast for a city"},
        ]
    )
    model = HybridRetriever(encoder=encoder).fit([], tools)
    query = "Translate my review into German, and then summarize it in a few short lines"
    col = {name: FEATURES.index(name) for name in ("clause_open", "clause_next", "clause_rel")}

    def row(history, tool):
        labels, x = model._step_features(query, history)
        return x[list(labels).index(model._label_index[tool])]

    first_t, first_s = row((), "translate_text"), row((), "summarize_text")
    after_t, after_s = (
        row(("translate_text",), "translate_text"),
        row(("translate_text",), "summarize_text"),
    )
    assert first_t[col["clause_next"]] > first_s[col["clause_next"]]  # clause 1 is translation
    assert after_s[col["clause_next"]] > after_t[col["clause_next"]]  # clause 2 is the summary
    # once translated, the translation clause is covered: its tool loses more than the summary's
    assert first_t[col["clause_open"]] - after_t[col["clause_open"]] > (
        first_s[col["clause_open"]] - after_s[col["clause_open"]]
    )
    assert after_s[col["clause_rel"]] == pytest.approx(first_s[col["clause_rel"]])
    assert row((), "get_weather")[col["clause_rel"]] < first_s[col["clause_rel"]]


def test_clause_features_can_be_turned_off_and_stay_off_after_load(encoder, tmp_path):
    tools = Toolset(CLAUSE_TOOLS)
    model = HybridRetriever(encoder=encoder, clauses=False).fit([], tools)
    cols = [FEATURES.index(n) for n in ("clause_rel", "clause_open", "clause_next")]
    query = "Translate my review into German, and then summarize it in a few short lines"
    assert not model._step_features(query, ())[1][:, cols].any()
    model.save(tmp_path / "m")
    loaded = HybridRetriever.load(tmp_path / "m", encoder=encoder)
    assert loaded.clauses is False
    assert not loaded._step_features(query, ())[1][:, cols].any()
    on = HybridRetriever(encoder=encoder).fit([], tools)
    assert on._step_features(query, ())[1][:, cols].any()


def test_tools_added_after_fit_get_graph_edges_from_their_schemas(encoder):
    """A tool added by `set_tools` whose parameter takes the last call's output is raised."""
    doc_id = {"type": "object", "properties": {"doc_id": {"type": "string"}}}
    url = {"type": "object", "properties": {"url": {"type": "string"}}}
    tools = [
        Tool("search_docs", "Search the document store", outputs=("doc_id",)),
        Tool("summarize_text", "Summarize a text"),
    ]
    model = HybridRetriever(encoder=encoder).fit([], tools)
    query = "Search the store for the contract, then fetch its text"
    added = [
        Tool("fetch_page", "Fetch the text of a web page", url),
        Tool("fetch_doc", "Fetch the text of a document", doc_id),
    ]
    model.set_tools([*tools, *added])
    before = model.rank(query, ())
    after = model.rank(query, ("search_docs",))
    ratio_before = before.probability("fetch_doc") / before.probability("fetch_page")
    ratio_after = after.probability("fetch_doc") / after.probability("fetch_page")
    assert ratio_after == pytest.approx(2.0 * ratio_before)  # fetch_page: 1 / (1 + rank 1)
    assert model._tool_graph().evidence("search_docs", "fetch_doc") == ["param:doc_id"]
    model.set_tools(tools)  # removed again: the graph follows the catalogue
    graph = model._tool_graph()
    assert not graph.has("fetch_doc")
    model.set_tools(tools)  # the same catalogue: the graph is not built again
    assert model._tool_graph() is graph
    model.set_params(graph=[("summarize_text", "search_docs")])  # a given graph replaces it
    assert model.graph == [["summarize_text", "search_docs"]]  # saved as plain JSON
    assert model._tool_graph().edges() == [("summarize_text", "search_docs", 1.0)]


def test_the_prior_is_the_zero_shot_model_and_a_strong_pull_keeps_to_it(
    encoder, demo_data, demo_split
):
    """With no demonstrations the weights are `PRIOR_WEIGHTS`; pulled hard towards them, a
    fit on a few demonstrations ranks as the prior does (the zero-shot model and the closest
    demonstrations' plans: `knn_follow`), where a free pull lets them teach the mix."""
    train, test = demo_split
    zero = HybridRetriever(encoder=encoder).fit([], demo_data.tools)
    assert zero.mix() == {f: hybrid.PRIOR_WEIGHTS.get(f, 0.0) for f in FEATURES}
    held = HybridRetriever(encoder=encoder, l2=1e6).fit(train[:10], demo_data.tools)
    assert max(abs(w - hybrid.PRIOR_WEIGHTS.get(f, 0.0)) for f, w in held.mix().items()) < 0.05
    at_prior = HybridRetriever(encoder=encoder, l2=1e6).fit(train[:10], demo_data.tools)
    at_prior.weights_ = hybrid._prior_vector()
    free = HybridRetriever(encoder=encoder, select_l2=False).fit(train[:10], demo_data.tools)
    steps = [(d.query, tuple(d.calls[:i])) for d in test[:40] for i in range(len(d.calls) + 1)]

    def agree(model: HybridRetriever) -> float:
        same = [
            at_prior.rank(q, h).top(1)[0].name == model.rank(q, h).top(1)[0].name for q, h in steps
        ]
        return sum(same) / len(same)

    assert agree(held) >= 0.9
    assert agree(free) < agree(held)  # the default pull lets 10 demonstrations teach


def test_edge_ranks_share_ties_and_put_tools_without_an_edge_last():
    from dtdr_agents.retrievers.hybrid_features import edge_ranks

    np.testing.assert_array_equal(edge_ranks(np.array([0.5, 0.0, 1.5, 0.5])), [1, 2, 0, 1])
    np.testing.assert_array_equal(edge_ranks(np.zeros(3)), [0, 0, 0])  # no evidence


def test_step_dtdr_l_probabilities_equal_the_full_product(fitted, demo_data, demo_split):
    """Kept block products (the query's, each call's, the mean's, the flags') and the one-call
    merge give the probabilities of the full product."""
    from dtdr_agents.retrievers.scores import softmax

    _, test = demo_split
    query = test[0].query
    tools = list(demo_data.tools.names)
    qs = fitted._query_state(query)
    histories = [(), tuple(tools[:1]), tuple(tools[1:3]), tuple(tools[:4]), tuple(tools[:6])]
    histories += [(tools[0], tools[1], tools[0]), (tools[2],) * 5]  # repeated calls: the mean
    for history in histories * 2:  # the second time from the kept products
        got = fitted._linear_probs(qs, history)
        assert got is not None
        x = fitted.linear_._structured(qs.qvec[None, :], [history])[0]
        for probs, model in zip(got, (fitted.linear_, fitted.linear_fine_), strict=True):
            want = softmax(model.weight_ @ x + model.bias_)
            np.testing.assert_allclose(probs, want, rtol=1e-4, atol=1e-7)


def test_an_open_sub_goal_with_a_clear_tool_outranks_one_close_to_many():
    """`_open_sub_goals`: each open sub-goal's softmax over the candidates, best kept."""
    step = hybrid_features._StepSims(
        request_tools=np.zeros((3, 4)),
        added_tools=np.zeros((0, 4)),
        # sub-goal 0 is vague (three candidates alike), sub-goal 1 clearly asks for candidate 2
        goals=np.array([[0.60, 0.20], [0.59, 0.30], [0.58, 0.55]]),
        calls=np.zeros((0, 2)),
    )
    score = hybrid_features.HybridFeatures._open_sub_goals(step)
    assert score is not None
    assert int(np.argmax(score)) == 2  # the raw cosine would put candidate 0 first
    assert int(np.argmax(step.goals.max(axis=1))) == 0
    # a call that matches sub-goal 1 best covers it: the vague one is left, candidate 0 leads
    done = hybrid_features._StepSims(
        step.request_tools, step.added_tools, step.goals, np.array([[0.1, 0.9]])
    )
    left = hybrid_features.HybridFeatures._open_sub_goals(done)
    assert left is not None and int(np.argmax(left)) == 0
    # every sub-goal covered: no evidence
    both = hybrid_features._StepSims(
        step.request_tools, step.added_tools, step.goals, np.array([[0.1, 0.9], [0.9, 0.1]])
    )
    assert hybrid_features.HybridFeatures._open_sub_goals(both) is None
