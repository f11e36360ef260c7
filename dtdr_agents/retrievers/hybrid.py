"""`hybrid`: zero-shot relevance and learned tool dependencies, mixed by a calibrated combiner.

Zero-shot evidence ranks every tool, demonstrated or not: BM25 over names and descriptions
(`BM25Retriever`), the cosine similarity of query and tool description embeddings, and the
request's clauses (its sub-goals) against the calls made so far (`request_clauses`). Learned,
history-aware evidence comes from the demonstrations: the Markov chains of DTDR-C (its cluster
chain and its all-demonstrations chain, with how often the history key was seen) and the
structured-history DTDR-L. Both learned parts are the existing classes, fitted on the tools the
demonstrations call.

A conditional-logit combiner (a softmax over the step's candidates of a linear score of
per-tool features) decides the mix. Its weights are fitted by cross-fitting inside `fit`: the
learned parts are fitted on all folds but one and their features computed on the held-out
fold, so the combiner learns how far to trust them on data they did not see. Features include
how many demonstrations call the tool, whether it was ever demonstrated, the query's distance
to its DTDR-C cluster and the support of the history key. End-of-plan is a candidate with its
own features (the chains' end probabilities, DTDR-L's, the number of calls so far).

With no demonstrations the weights are the zero-shot prior (`PRIOR_WEIGHTS`): BM25, dense
similarity, the request's open sub-goals and the tool graph's edge from the last call, fused by
rank, with the files the request names feeding the tools that take them (`ArtefactFlow`),
and the zero-shot stop rule for end-of-plan (held back while a sub-goal's best tool takes the
last call's output). That prior is the zero-shot model itself, not a weaker one. With fewer
demonstrations than the combiner has weights (`MIN_LEARNED_DEMOS`) the prior is kept and the
demonstrations count through its neighbour votes (the closest plans' next calls, and those
that go on against a stop); beyond, the combiner is pulled towards it (a penalty on how much
the weights change the scores), so the hybrid moves from zero-shot to learned as
demonstrations arrive. A fitted mix puts end-of-plan first at no more held-out tool steps
than the prior (`end_first_shift`).

Large catalogues: the step's candidates are the top tools by BM25 and by dense similarity
(`dtdr_agents.retrievers.index.CandidateIndex`: exact up to a threshold, HNSW beyond), the chains'
successors of the history, DTDR-L's top tools and end-of-plan. Other tools share a tiny
probability mass, so the cost of a step after the first does not grow with the catalogue
beyond filling the output vector.

The combiner (`FEATURES`, its fit) is `dtdr_agents.retrievers.hybrid_combiner`; the per-step
features are `dtdr_agents.retrievers.hybrid_features`. This module re-exports their public names.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar, Self

import numpy as np

from dtdr_agents.foundation.checks import check_number
from dtdr_agents.foundation.clauses import request_clauses
from dtdr_agents.foundation.encoders import Encoder
from dtdr_agents.foundation.errors import ModelLoadError
from dtdr_agents.foundation.types import END_OF_PLAN, Demonstration, Toolset
from dtdr_agents.foundation.words import plural
from dtdr_agents.planning.planners import Planner
from dtdr_agents.retrievers.base import Scores, ToolRetriever, softmax
from dtdr_agents.retrievers.bm25 import BM25Retriever
from dtdr_agents.retrievers.dtdr_c import DTDRC
from dtdr_agents.retrievers.explain import tool_words
from dtdr_agents.retrievers.hybrid_combiner import (
    FEATURE_REVISION,
    FEATURES,
    PRIOR_WEIGHTS,
    RIDGE,
    _fit_combiner,
    _held_out_mrr,
    _HeldOut,
    _prior_vector,
    _select_l2,
    end_first_shift,
    out_of_group_scores,
    pull_name,
)
from dtdr_agents.retrievers.hybrid_features import (
    CHAIN_EPS,
    KNN,
    KNN_TEMPERATURE,
    L_FLOOR,
    L_TOP,
    CandidateSource,
    HybridFeatures,
    typical_pair_similarity,
)
from dtdr_agents.retrievers.hybrid_ood import MIN_DEMO_REFERENCE, OODCalibration
from dtdr_agents.retrievers.hybrid_ood import calibrate as calibrate_ood
from dtdr_agents.retrievers.index import EXACT_LIMIT, CandidateIndex
from dtdr_agents.retrievers.linear import DTDRL
from dtdr_agents.retrievers.tool_graph import given_edges

WHY_TERMS = 4
"""Feature contributions a tool's `why` shows (after a call, `request_after_call` takes one)."""

MIN_CROSS_FIT = 2
"""Demonstrations the combiner needs (two folds); with fewer the hybrid scores zero-shot."""

MIN_LEARNED_DEMOS = len(FEATURES)
"""Demonstrations before `select_l2` lets the combiner leave the zero-shot prior.

A mix of this many weights chosen on fewer plans than weights is chosen by noise: the steps
of a few plans share their requests, and the one-standard-error rule's clustered error
needs many clusters (plans) to mean anything. Measured (tool-MRR, the fitted mix vs the
prior with the neighbours' plans, `select_l2` as it was): TaskBench-HF seed 1 at 5 and 20
demonstrations 0.6533 vs 0.6756 and 0.6462 vs 0.6727, NESTFUL seed 0 at 5 0.7974 vs 0.8456
and seed 1 at 10 0.8394 vs 0.8555, where the held-out steps had chosen the mix; at 50 the
mix won on both (0.6996 vs 0.6567, 0.8884 vs 0.8529). Below this count the demonstrations
count through the prior's neighbour votes (`knn_follow`, `end_knn_follow`)."""

REST_MASS = 1e-4
"""Probability shared by the tools outside a step's candidates."""

L2_MULTIPLES: tuple[float, ...] = (1.0, 4.0, 16.0)
"""The pulls `select_l2` chooses among, as multiples of `l2` (2, 8 and 32 by default).

Few demonstrations call for a strong pull towards the zero-shot prior, many for a weak one:
TaskBench-HF, means over seeds 0 to 2, tool-MRR at 10 / 50 / 100 demonstrations: 0.639 /
0.686 / 0.715 at 2, 0.655 / 0.683 / 0.708 at 8, 0.661 / 0.677 / 0.697 at 32."""

L2_SELECT_ROWS = 10_000
"""`select_l2` runs when the held-out steps hold at most this many candidate rows (it fits
the combiner 9 times: 3 pulls by 3 groups of folds; on TaskBench-HF at 100 demonstrations,
378 held-out steps, the fit took 2.27 s with it and 1.71 s without). Beyond, `l2` is used as
it is: with that many steps the weakest pull won every selection measured (TaskBench-HF at
50, 80 and 100 demonstrations, seed 0)."""

END_SHIFT_ROWS = 100_000
"""Up to this many held-out candidate rows, the end-of-plan shift (`end_first_shift`) reads
the mix's out-of-group scores (the pull selection's fits, or 3 more where `select_l2` did not
run); beyond, its in-sample scores. On
NESTFUL at 50 demonstrations (seed 0, over `L2_SELECT_ROWS`), the in-sample scores put
end-of-plan first at no more tool steps than the prior and asked for no shift, where the test
steps had 0.1012 against the prior's 0.0595."""

L2_SELECT_GROUPS = 3
"""Groups of folds `select_l2` leaves out in turn (a step's group: its fold modulo this)."""

LINEAR_FINE_BATCH = 8
"""Mini-batch size of the second structured DTDR-L (the first uses DTDR-L's default, 32)."""

FIT_THREADS = 1
"""BLAS and torch threads while `fit` runs (`fit_threads`). Its products are small (a request
against the demonstrations, k-means++ distances, the combiner's matrix-vector products,
DTDR-L's mini-batches), where threads cost more than they give on a machine that runs other
work: 2,500 demo-set demonstrations, embeddings cached, on a 2-core machine under load, the
fit took 102.3 s with 2 BLAS threads and 37.4 s with 1, to the same weights within 1e-5; an
Adam step of DTDR-L's loop on a mini-batch of 8 with 1,920 inputs and 1,350 outputs (the size
of Seal-Tools' called tools) took 4.6 ms with 1 torch thread and 33 to 47 ms with 2."""


@contextmanager
def fit_threads(n: int) -> Iterator[None]:
    """Run the block with `n` BLAS threads and `n` torch threads, then restore both.

    Both settings are the process's: rankings served by other threads meanwhile run with
    them too (same results, other speed).
    """
    import torch
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        with threadpool_limits(n, user_api="blas"):
            yield
    finally:
        torch.set_num_threads(before)


class HybridRetriever(HybridFeatures):
    """Zero-shot BM25 and dense relevance mixed with DTDR-C and DTDR-L by a cross-fitted combiner.

    Args:
        encoder: Encoder spec or object (see `get_encoder`), shared by every part.
        n_folds: Folds of the cross-fitting that calibrates the combiner (at most the number
            of demonstrations).
        candidates: Tools taken per query from BM25 and from dense similarity each.
        l2: Strength of the combiner's pull towards the zero-shot prior (`PRIOR_WEIGHTS`),
            on the mean squared change of a candidate's score (see `_fit_combiner`); the loss
            is summed over held-out steps, so many demonstrations outweigh it. 1, 2 and 4
            were tried on TaskBench-HF (10 and all demonstrations) and Seal-Tools (10, and
            the first 100 plans), without `RIDGE`; each was within 0.025 MRR of the others;
            2 is the middle. With `select_l2`, the pull is chosen among `L2_MULTIPLES` of
            it by how well each predicts held-out requests (`_select_l2`), when the
            held-out steps hold at most `L2_SELECT_ROWS` candidate rows.
        select_l2: Choose the pull per fit (see `l2`); False uses `l2` as it is.
        exact_limit: Catalogues up to this size are searched exactly; beyond, an HNSW index
            (`pip install 'dtdr-agents[index]'`). None forces exact search.
        prior_weight: Weight of the query-similarity prior for tools added after fit.
        clauses: Use the `clause_*` features. They encode each request's clauses once, at its
            first step (one encoder batch: p50 17.8 ms with MiniLM for TaskBench-HF requests,
            3.8 clauses on average, on a 2-core CPU), and at fit for every demonstration;
            False saves that time and leaves the features at zero.
        seed: Seed of the folds, k-means and DTDR-L.
        graph: A tool dependency graph to use while demonstrations are too few to cross-fit
            (TaskBench ``graph_desc.json`` data, a networkx-like graph, or an edge list: see
            `dtdr_agents.retrievers.tool_graph.ToolGraph.from_given`; tools outside the catalogue
            are skipped with a warning), kept as a plain edge list (`given_edges`) so that it
            saves with the model. None: the graph derived from the catalogue's schemas and
            descriptions (`ToolGraph.from_catalogue`).
        goal_planner: A ToolQP planner (`dtdr_agents.planning.ChatPlanner` over the agent's own
            chat model, with ``max_turns=1`` for one call per request, or a `ReplayPlanner` of
            recorded plans) whose sub-goals replace the
            request's clauses as its sub-goals: one plan per request (kept, and planned
            ahead by `aprepare`), never one per step. A failing planner (an error, a
            time-out, a plan with no sub-goal) is logged and the clauses are used. Not
            saved (pass it again after `load`, or `set_params(goal_planner=...)`); not used by
            `fit`, whose cross-fitting scores the demonstrations by their clauses.
        goal_planner_timeout: Bound in seconds on planning one request (None: unbounded).
    """

    retriever_id: ClassVar[str] = "hybrid"
    bench_default: ClassVar[bool] = True
    accepts_no_demos: ClassVar[bool] = True
    """`fit` works with zero demonstrations (pure zero-shot)."""

    encoder: str | Encoder | None = "default"
    n_folds: int = 5
    candidates: int = 100
    l2: float = 2.0
    select_l2: bool = True
    exact_limit: int | None = EXACT_LIMIT
    prior_weight: float = 0.1
    clauses: bool = True
    seed: int = 0
    graph: Any = None
    goal_planner: Planner | None = None
    goal_planner_timeout: float | None = 30.0

    runtime_params: ClassVar[tuple[str, ...]] = ("goal_planner",)

    def __post_init__(self) -> None:
        if self.graph is not None:
            self.graph = given_edges(self.graph)

    @classmethod
    def unavailable_reason(cls, **params: Any) -> str | None:
        """Why the hybrid cannot run here (its BM25 part needs bm25s), or None."""
        return BM25Retriever.unavailable_reason()

    # ------------------------------------------------------------------------------ fitting
    def _check_params(self) -> None:
        super()._check_params()
        check_number(self.n_folds, "n_folds", low=2, integer=True)
        check_number(self.candidates, "candidates", low=1, integer=True)
        check_number(self.l2, "l2", low=0.0)
        check_number(self.exact_limit, "exact_limit", low=0, integer=True, optional=True)
        check_number(self.goal_planner_timeout, "goal_planner_timeout", low=0.0, optional=True)

    def _fit(self, demos: list[Demonstration], tools: Toolset) -> None:
        # the cross-fitting scores the demonstrations by their clauses: no planner calls
        planner, self.goal_planner = self.goal_planner, None
        with fit_threads(FIT_THREADS):
            try:
                self._fit_hybrid(demos, tools)
            finally:
                self.goal_planner = planner
                self._plans = None
            self._calibrate_ood(demos, tools)

    def _fit_hybrid(self, demos: list[Demonstration], tools: Toolset) -> None:
        assert self.tool_embeddings_ is not None
        self._reset_graph(tools)
        self._generic_words = None  # of the fit catalogue's parameter names
        self.bm25_ = BM25Retriever()  # needs no demonstrations: index the catalogue only
        self._restore_part(self.bm25_, tools, {"vocabulary_size": None}, {})
        t0 = time.perf_counter()
        self.index_ = CandidateIndex(self.tool_embeddings_, exact_limit=self.exact_limit)
        self.index_s_ = time.perf_counter() - t0
        prior = _prior_vector()
        self.cv_: dict[str, Any] = {"n_demos": len(demos), "held_out_steps": 0}
        folds = min(self.n_folds, len(demos))
        weights = prior
        self.warm([(d.query, ()) for d in demos])  # every fold's held-out clauses, one batch
        if folds >= 2 and self.select_l2 and len(demos) < MIN_LEARNED_DEMOS:
            folds = 0  # too few plans to tell a fitted mix from the prior: keep the prior
            self.cv_["l2"] = None
            self.cv_["prior_kept"] = (
                f"{plural(len(demos), 'demonstration')}: fewer than the combiner's "
                f"{MIN_LEARNED_DEMOS} weights"
            )
        if folds >= 2:
            rng = np.random.default_rng(self.seed)
            fold_of = rng.permutation(len(demos)) % folds
            feats: list[np.ndarray] = []
            targets: list[np.ndarray] = []
            step_fold: list[int] = []
            step_demo: list[int] = []
            for f in range(folds):
                train = [d for d, k in zip(demos, fold_of, strict=True) if k != f]
                held = [
                    (i, d) for i, (d, k) in enumerate(zip(demos, fold_of, strict=True)) if k == f
                ]
                self._fit_learned(train, seed=self.seed + 1 + f)
                for demo_index, demo in held:
                    for step in demo.steps():
                        cands, x = self._step_features(demo.query, step.history)
                        names = [self.labels_[int(c)] for c in cands]
                        mask = np.array([n in step.acceptable for n in names], dtype=bool)
                        if mask.any():
                            feats.append(x)
                            targets.append(mask)
                            step_fold.append(f)
                            step_demo.append(demo_index)
            held_out = _HeldOut.stack(feats, targets)
            l2: float | None = self.l2
            groups = np.array(step_fold) % min(L2_SELECT_GROUPS, folds)
            scores: dict[str, np.ndarray] = {}  # out of group, by pull (`_select_l2`)
            if self.select_l2 and 0 < len(held_out.x) <= L2_SELECT_ROWS:
                choices: list[float | None] = [self.l2 * m for m in L2_MULTIPLES]
                choices.append(None)  # the prior itself: kept unless the steps clearly beat it
                l2, self.cv_["l2_losses"] = _select_l2(
                    held_out, groups, prior, choices, clusters=np.array(step_demo), scores=scores
                )
            self.cv_["l2"] = l2
            weights = prior if l2 is None else _fit_combiner(held_out, prior, l2)
            if l2 is not None and held_out.n_steps:  # stop early no more often than the prior
                if pull_name(l2) in scores:  # the selection's fits, reused
                    mix = scores[pull_name(l2)]
                elif len(held_out.x) <= END_SHIFT_ROWS:
                    mix = out_of_group_scores(held_out, groups, prior, l2)
                else:  # so many steps that the fit's optimism is small
                    mix = held_out.x @ weights
                shift = end_first_shift(held_out, mix, held_out.x @ prior)
                weights = weights.copy()
                weights[FEATURES.index("end")] -= shift
                self.cv_["end_shift"] = round(shift, 6)
            self.cv_["held_out_steps"] = held_out.n_steps
            self.cv_["held_out_mrr"] = _held_out_mrr(held_out, weights)
            del held_out
        self.weights_ = np.asarray(weights, dtype=np.float64)
        self._fit_learned(demos)
        self._gate_neighbours()

    def _gate_neighbours(self) -> None:
        """Under the prior, only neighbours closer than two demonstrations are as a rule vote.

        The prior's neighbour weights (`knn_follow`, `end_knn_follow`) are fixed, not
        fitted: a neighbour counts there only where it is closer to the request than
        `typical_pair_similarity`, so that a few unrelated demonstrations do not outvote the
        one relevant, never demonstrated tool. A fitted mix (`cv_["l2"]` set) learned from
        held-out steps how far to trust the neighbours as they are, and keeps them.
        """
        uses_prior = self.cv_.get("l2") is None
        self.knn_typical_ = typical_pair_similarity(self.knn_queries_) if uses_prior else 0.0

    def _fit_learned(self, demos: list[Demonstration], seed: int | None = None) -> None:
        """Fit DTDR-C and DTDR-L on `demos` over the tools they call; count each tool's calls.

        The parts know only those tools. In the cross-fitting, a held-out fold's tools in
        their label sets would make a held-out target one of the few candidates they score
        at all, and the combiner would learn to trust them for tools they never saw called.
        """
        self._memo_store = None
        self.tool_counts_ = np.zeros(len(self.labels_), dtype=np.float64)
        for demo in demos:
            for call in demo.calls:
                self.tool_counts_[self._label_index[call]] += 1.0
        assert self.encoder_ is not None
        self.knn_queries_ = (
            self.encoder_.encode([d.query for d in demos]).astype(np.float32)
            if demos
            else np.zeros((0, self.encoder_.dim), dtype=np.float32)
        )
        self.knn_typical_ = 0.0  # the fitted mix's neighbours (`_gate_neighbours`)
        self.knn_plans_ = [
            np.array([self._label_index[c] for c in d.calls], dtype=np.int64) for d in demos
        ]
        if not demos:
            self.chains_: DTDRC | None = None
            self.linear_: DTDRL | None = None
            self.linear_fine_: DTDRL | None = None
            self._map_components()
            return
        seed = self.seed if seed is None else seed
        seen = self.fit_tools_.subset({c for d in demos for c in d.calls})
        self.chains_ = DTDRC(encoder=self.encoder_, seed=seed).fit(demos, seen)
        self.linear_ = DTDRL(
            history="structured", encoder=self.encoder_, ood_quantile=None, seed=seed
        ).fit(demos, seen)
        self.linear_fine_ = DTDRL(  # more, smaller steps: the combiner weighs both
            history="structured",
            batch_size=LINEAR_FINE_BATCH,
            encoder=self.encoder_,
            ood_quantile=None,
            seed=seed + 1000,
        ).fit(demos, seen)
        self._map_components()

    def _map_components(self) -> None:
        """Index maps from the learned parts' labels to ours."""
        self._chain_map = (
            np.array([self._label_index[n] for n in self.chains_.labels_], dtype=np.int64)
            if self.chains_ is not None
            else np.zeros(0, dtype=np.int64)
        )
        self._linear_map = (
            np.array([self._label_index[n] for n in self.linear_.labels_], dtype=np.int64)
            if self.linear_ is not None
            else np.zeros(0, dtype=np.int64)
        )
        end = len(self.labels_) - 1
        learned = [self._chain_map, self._linear_map, *getattr(self, "knn_plans_", [])]
        rows = np.unique(np.concatenate([*learned, np.zeros(0, dtype=np.int64)]))
        self._learned_rows = rows[rows != end]  # sorted: `_learned_bm25` bisects it

    # ------------------------------------------------------------------------------ scoring
    def _score(self, query: str, history: tuple[str, ...]) -> Scores:
        return self._mixed_score(query, history, self._ood(query))

    def _mixed_score(self, query: str, history: tuple[str, ...], ood: str | None) -> Scores:
        labels, x = self._step_features(query, history)
        s = x @ self.weights_
        p = softmax(s)
        n_labels = len(self.labels_)
        n_rest = n_labels - len(labels)
        out = np.full(n_labels, REST_MASS / n_rest if n_rest else 0.0)
        out[labels] = p * (1.0 - REST_MASS) if n_rest else p
        why = self._contribution_why(labels, x)
        if self.cv_.get("n_demos", 0) < MIN_CROSS_FIT:
            # the prior weights: the zero-shot model (see `PRIOR_WEIGHTS`)
            end = float(out[labels[-1]])
            return Scores(
                out,
                {
                    "zero_shot": plural(self.cv_.get("n_demos", 0), "demonstration")
                    + ": nothing to cross-fit",
                    "stop": f"zero-shot stop rule p={end:.3f}",
                    "candidates": len(labels),
                    "sub_goals": self._query_state(query).goals_from,
                },
                ood_reason=ood,
                tool_why=why,
                replaces=("zero_shot", "stop", "candidates", "sub_goals"),  # said once
            )
        contrib = x[int(np.argmax(s))] * self.weights_
        top = np.argsort(-np.abs(contrib))[:3]
        explanation: dict[str, Any] = {
            "candidates": len(labels),
            "index": self.index_.kind,
            "top_features": [FEATURES[int(i)] for i in top if contrib[int(i)] != 0.0],
        }
        if "prior_kept" in self.cv_:
            explanation["mix"] = "zero-shot prior (" + self.cv_["prior_kept"] + ")"
        qs = self._query_state(query)
        explanation["sub_goals"] = qs.goals_from
        if self.chains_ is not None:
            explanation["cluster"] = qs.cluster
        if qs.source_note is not None:
            explanation["candidate_source"] = qs.source_note
        return Scores(out, explanation, ood, tool_why=why, replaces=tuple(explanation))

    # ------------------------------------------------------------------ out of distribution
    def _calibrate_ood(self, demos: list[Demonstration], tools: Toolset) -> None:
        """Calibrate `ood_` (`hybrid_ood.calibrate`) on the catalogue and the demonstrations."""
        assert self.encoder_ is not None and self.tool_embeddings_ is not None
        queries = list(dict.fromkeys(d.query for d in demos))
        vectors = (
            self.encoder_.encode(queries).astype(np.float32)
            if len(queries) >= MIN_DEMO_REFERENCE
            else np.zeros((0, self.encoder_.dim), dtype=np.float32)
        )
        rows = [self._label_index[t.name] for t in tools]  # the fit catalogue's embeddings
        self.ood_: OODCalibration | None = calibrate_ood(
            self.tool_embeddings_[rows], vectors, seed=self.seed
        )

    def _ood(self, query: str) -> str | None:
        """Why `query` is out of distribution (`OODCalibration.reason`), or None."""
        calibration = getattr(self, "ood_", None)
        if calibration is None:  # a model saved before the calibration: never flags
            return None
        return self._memo(query, "ood", lambda q: self._ood_reason(calibration, q))

    def _ood_reason(self, calibration: OODCalibration, query: str) -> str | None:
        qs = self._query_state(query)
        nearest = None
        if calibration.nearest is not None and len(self.knn_queries_):
            nearest = float((self.knn_queries_ @ qs.qvec).max())
        return calibration.reason(qs.bm25_max, qs.cos_max, nearest)

    def _ood_state(self) -> dict[str, Any] | None:
        calibration = getattr(self, "ood_", None)
        return None if calibration is None else calibration.to_state()

    def _set_ood_state(self, state: Mapping[str, Any]) -> None:
        """Read the calibration; a model saved without one loads, warns and never flags."""
        saved = state.get("ood")
        if saved is None:
            self.ood_ = None
            warnings.warn(
                "this hybrid model was saved without an out-of-distribution calibration (by a "
                "version before it): it never flags a request as out of distribution; fit it "
                "again to calibrate one",
                UserWarning,
                stacklevel=4,
            )
            return
        if not isinstance(saved, Mapping):
            raise ModelLoadError(f"corrupt hybrid state: ood must be an object, got {saved!r}")
        self.ood_ = OODCalibration.from_state(saved)

    def set_params(self, **params: Any) -> Self:
        """Set constructor arguments (e.g. `goal_planner` after `load`); plans are dropped."""
        super().set_params(**params)
        if params.get("graph") is not None:  # kept as a plain edge list, as at construction
            self.graph = given_edges(self.graph)
        self._plans = None
        self._memo_store = None
        self._graph_for = None  # `graph` may be among them: build the tool graph again
        if getattr(self, "_fitted", False):
            self._reset_graph(self.tools_)
        return self

    async def aprepare(self, query: str) -> None:
        """Plan `query`'s sub-goals with the planner's async path (a no-op without one)."""
        await self._aplan_sub_goals(query)
        await super().aprepare(query)

    def set_tools(self, tools: Toolset | Iterable[Any]) -> Self:
        """Change the catalogue after fit (see `ToolRetriever.set_tools`).

        The tool graph is rebuilt over the new catalogue, so added tools get their edges from
        their schemas (or the given graph) at once.
        """
        super().set_tools(tools)
        self._reset_graph(self.tools_)  # kept when the catalogue is the one it was built on
        return self

    def _new_tool_prior(self, query: str, history: tuple[str, ...]) -> np.ndarray:
        """The prior of tools added after fit, with the zero-shot model's graph terms.

        The query-similarity prior times ``1 / (1 + rank)`` of the tool's edge from the last
        call (`_graph_ranks` over the current catalogue), and times ``2 ** flow`` of its
        `ArtefactFlow.flow` (a tool that takes the request's file counts as one with an edge;
        one that cannot run yet, half).
        """
        prior = super()._new_tool_prior(query, history)
        names = self._names[:-1]
        ranks = self._graph_ranks(history, names)
        flow = self._artefact_flow()
        if flow:  # built over the current catalogue: its needs are in `names`' order
            needs = flow.catalogue_needs if flow.names == names else flow.needs(names)
            state = flow.state(self._query_state(query).media, history)
            prior = prior * 2.0 ** flow.flow(needs, *state)
        return np.asarray(prior / (1.0 + ranks))

    def _contribution_why(self, labels: np.ndarray, x: np.ndarray) -> Callable[[int], str]:
        """`Scores.tool_why`: a label's four largest feature contributions (feature x weight).

        A label outside the step's candidates shares `REST_MASS` and has no features.
        """
        rows: dict[int, int] = {}
        weights = self.weights_

        def why(i: int) -> str:
            if not rows:
                rows.update({int(label): r for r, label in enumerate(labels)})
            row = rows.get(i)
            if row is None:
                return "not among this step's candidates"
            return tool_words(FEATURES, x[row], weights, WHY_TERMS, unranked=self.candidates)

        return why

    def mix(self) -> dict[str, float]:
        """The combiner's weight of every feature (what the cross-fitting chose)."""
        self._check_fitted()
        return {name: float(w) for name, w in zip(FEATURES, self.weights_, strict=True)}

    # -------------------------------------------------------------------------- persistence
    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        index_cfg, index_arrays = self.index_.state()
        state: dict[str, Any] = {
            "cv": self.cv_,
            "index": index_cfg,
            "features": list(FEATURES),
            "feature_revision": FEATURE_REVISION,
            "ood": self._ood_state(),
        }
        arrays: dict[str, np.ndarray] = {
            "weights": self.weights_,
            "tool_counts": self.tool_counts_,
            "knn_queries": self.knn_queries_,
            "knn_plan_labels": np.concatenate([*self.knn_plans_, np.zeros(0, dtype=np.int64)]),
            "knn_plan_lengths": np.array([len(p) for p in self.knn_plans_], dtype=np.int64),
            **{f"index/{k}": v for k, v in index_arrays.items()},
        }
        parts = (("chains", self.chains_), ("linear", self.linear_))
        for name, part in (*parts, ("linear_fine", self.linear_fine_)):
            if part is None:
                state[name] = None
                continue
            part_state, part_arrays = part._state()
            state[name] = {"tools": list(part.fit_tools_.names), "state": part_state}
            arrays.update({f"{name}/{k}": v for k, v in part_arrays.items()})
        return state, arrays

    def _set_state(self, state: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        try:
            features = list(state["features"])
            self.cv_ = dict(state["cv"])
            self.weights_ = np.asarray(arrays["weights"], dtype=np.float64)
            self.tool_counts_ = np.asarray(arrays["tool_counts"], dtype=np.float64)
            self.knn_queries_ = np.asarray(arrays["knn_queries"], dtype=np.float32)
            flat = np.asarray(arrays["knn_plan_labels"], dtype=np.int64)
            lengths = np.asarray(arrays["knn_plan_lengths"], dtype=np.int64)
            index_cfg = state["index"]
        except (KeyError, TypeError) as exc:
            raise ModelLoadError(f"corrupt hybrid state: missing or bad {exc}") from exc
        if features != list(FEATURES) or self.weights_.shape != (len(FEATURES),):
            raise ModelLoadError(
                "hybrid state: its combiner features differ from this version's "
                f"({features} vs {list(FEATURES)}); fit the model again"
            )
        revision = state.get("feature_revision")
        if revision != FEATURE_REVISION:
            raise ModelLoadError(
                f"hybrid state: feature_revision {revision} is not this version's "
                f"{FEATURE_REVISION} (its features meant something else when it was fitted, "
                "so its weights would rank differently); fit the model again"
            )
        if self.tool_counts_.shape != (len(self.labels_),):
            raise ModelLoadError("corrupt hybrid state: tool_counts does not match the catalogue")
        if (
            int(lengths.sum()) != len(flat)
            or len(lengths) != len(self.knn_queries_)
            or (len(flat) and (flat.min() < 0 or flat.max() >= len(self.labels_) - 1))
        ):
            raise ModelLoadError("corrupt hybrid state: the demonstrations' plans are inconsistent")
        self.knn_plans_ = list(np.split(flat, np.cumsum(lengths)[:-1])) if len(lengths) else []
        self._gate_neighbours()
        self._set_ood_state(state)
        assert self.tool_embeddings_ is not None
        self.bm25_ = BM25Retriever()
        self._restore_part(self.bm25_, self.fit_tools_, {"vocabulary_size": None}, {})
        index_arrays = {k[6:]: v for k, v in arrays.items() if k.startswith("index/")}
        self.index_ = CandidateIndex.from_state(index_cfg, index_arrays, self.tool_embeddings_)
        self.chains_ = None
        self.linear_ = None
        self.linear_fine_ = None
        for name, cls in (("chains", DTDRC), ("linear", DTDRL), ("linear_fine", DTDRL)):
            saved = state.get(name)
            if saved is None:
                continue
            params: dict[str, Any] = {"encoder": self.encoder_, "seed": self.seed}
            if cls is DTDRL:
                params.update(history="structured", ood_quantile=None)
            part = cls(**params)
            prefix = f"{name}/"
            part_arrays = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
            try:
                part_tools = self.fit_tools_.subset(saved["tools"])
            except Exception as exc:
                raise ModelLoadError(f"corrupt hybrid state: {name} tools: {exc}") from exc
            self._restore_part(part, part_tools, saved["state"], part_arrays)
            setattr(self, f"{name}_", part)
        self._map_components()

    def _restore_part(
        self,
        part: ToolRetriever,
        tools: Toolset,
        state: Mapping[str, Any],
        arrays: Mapping[str, np.ndarray],
    ) -> None:
        """Give a saved part our catalogue subset, encoder and embeddings, then its state."""
        assert self.tool_embeddings_ is not None
        part.fit_tools_ = tools
        part.labels_ = (*tools.names, END_OF_PLAN)
        part._label_index = {n: i for i, n in enumerate(part.labels_)}
        part.end_rate_ = self.end_rate_
        part.encoder_ = self.encoder_ if part.uses_encoder else None
        rows = [self._label_index[n] for n in tools.names]
        part.tool_embeddings_ = self.tool_embeddings_[rows] if part.uses_encoder else None
        part._set_state(state, arrays)
        part._fitted = True
        part.set_tools(tools)


__all__ = [
    "CHAIN_EPS",
    "FEATURES",
    "FEATURE_REVISION",
    "FIT_THREADS",
    "KNN",
    "KNN_TEMPERATURE",
    "L2_MULTIPLES",
    "L2_SELECT_GROUPS",
    "L2_SELECT_ROWS",
    "LINEAR_FINE_BATCH",
    "L_FLOOR",
    "L_TOP",
    "MIN_CROSS_FIT",
    "PRIOR_WEIGHTS",
    "REST_MASS",
    "RIDGE",
    "WHY_TERMS",
    "CandidateIndex",
    "CandidateSource",
    "HybridRetriever",
    "request_clauses",
]
