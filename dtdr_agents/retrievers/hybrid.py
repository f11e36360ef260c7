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

With no demonstrations the weights are a zero-shot prior (BM25 and dense similarity fused by
rank); with few, the combiner is pulled towards that prior (a penalty on how much the weights
change the scores), so the hybrid moves from zero-shot to learned as demonstrations arrive.

Large catalogues: the step's candidates are the top tools by BM25 and by dense similarity
(`dtdr_agents.retrievers.index.CandidateIndex`: exact up to a threshold, HNSW beyond), the chains'
successors of the history, DTDR-L's top tools and end-of-plan. Other tools share a tiny
probability mass, so the cost of a step after the first does not grow with the catalogue
beyond filling the output vector.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Self

import numpy as np

from dtdr_agents.foundation.checks import check_number
from dtdr_agents.foundation.clauses import request_clauses
from dtdr_agents.foundation.encoders import Encoder
from dtdr_agents.foundation.errors import ModelLoadError
from dtdr_agents.foundation.types import END_OF_PLAN, Demonstration, Toolset
from dtdr_agents.retrievers.base import Scores, ToolRetriever, softmax
from dtdr_agents.retrievers.bm25 import BM25Retriever
from dtdr_agents.retrievers.dtdr_c import DTDRC
from dtdr_agents.retrievers.index import EXACT_LIMIT, CandidateIndex
from dtdr_agents.retrievers.linear import DTDRL
from dtdr_agents.retrievers.markov import GLOBAL, UNSEEN, history_key
from dtdr_agents.retrievers.tool_graph import ToolGraph, given_edges

FEATURES: tuple[str, ...] = (
    # zero-shot, per tool
    "bm25_norm",
    "bm25_rank",
    "dense_rel",
    "dense_rank",
    "unseen",
    "bm25_norm_unseen",
    "dense_rel_unseen",
    "log_count",
    # learned, per tool
    "chain_cluster",
    "chain_cluster_rare_key",
    "chain_cluster_far",
    "chain_all",
    "chain_all_rare_key",
    "dtdr_l",
    "dtdr_l_fine",
    "in_history",
    "last_call_sim",
    "knn_plan",
    "knn_next",
    # the request's clauses (its sub-goals) against the calls made so far
    "clause_rel",
    "clause_open",
    "clause_next",
    # end-of-plan
    "end",
    "end_chain_cluster",
    "end_chain_all",
    "end_dtdr_l",
    "end_dtdr_l_fine",
    "end_n_calls",
    "end_first_step",
    "end_knn",
)
"""The combiner's features, in weight order (see the module docstring)."""

_F = {name: i for i, name in enumerate(FEATURES)}

PRIOR_WEIGHTS: dict[str, float] = {
    "bm25_rank": 1.0,
    "dense_rank": 1.0,
    "end": -3.0,
    "end_n_calls": 3.0,
}
"""Zero-shot prior of the combiner: BM25 and dense similarity fused evenly by rank.

Used as is with no demonstrations, and as the centre of the combiner's penalty otherwise.
End-of-plan is unlikely before the first call and likelier as calls accumulate. Rank fusion
needs no score scale, so it does not favour one of the two on catalogues where the other is
the better zero-shot ranker (BM25 on Seal-Tools' short requests, dense on TaskBench-HF)."""

MIN_CROSS_FIT = 2
"""Demonstrations the combiner needs (two folds); with fewer the hybrid scores zero-shot."""

RIDGE = 0.1
"""A plain L2 on the weights added to the combiner's pull on the scores (relative to it).

Without it, a feature that is small or rare on a handful of held-out steps (the neighbours'
votes, BM25's score difference) is nearly free, and 12 demonstrations of two plans were
enough to rank a demonstrated tool above the only relevant, never demonstrated one."""

CHAIN_EPS = 1e-3
"""Chain features are `log(1 + p / CHAIN_EPS)`: 0 for tools never seen after the key."""

L_FLOOR = 1e-6
"""DTDR-L log-probabilities are floored here (tools DTDR-L never saw get the floor)."""

REST_MASS = 1e-4
"""Probability shared by the tools outside a step's candidates."""

L_TOP = 20
"""DTDR-L's top tools added to every step's candidates."""

LINEAR_FINE_BATCH = 8
"""Mini-batch size of the second structured DTDR-L (the first uses DTDR-L's default, 32)."""

KNN = 10
"""Nearest demonstrations (by request similarity) behind the `knn_*` features."""

KNN_TEMPERATURE = 0.05
"""Softmax temperature of the neighbours' weights over their cosine similarities."""


CandidateSource = Callable[[str, int], Sequence[tuple[str, float]]]
"""An external candidate stage: (query, k) -> up to k (tool name, similarity), best first.

For example a shared vector database (`langchain_dtdr.vectorstore.VectorStoreCandidates`)."""


def _prior_vector() -> np.ndarray:
    w = np.zeros(len(FEATURES))
    for name, value in PRIOR_WEIGHTS.items():
        w[_F[name]] = value
    return w


@dataclass
class _QueryState:
    """What a query contributes to every step (computed once per query)."""

    qvec: np.ndarray
    candidates: np.ndarray  # tool rows (fit catalogue order)
    zero_shot: np.ndarray  # (len(candidates), 5): bm25_norm, bm25_rank, dense_rel, dense_rank, cos
    bm25_learned: np.ndarray  # BM25 score of the learned parts' tools (`_learned_rows`)
    bm25_max: float
    cos_max: float
    cluster: int
    cluster_far: float
    source_note: str | None = None
    neighbours: tuple[tuple[int, float], ...] = ()  # (demonstration, weight)
    clauses: np.ndarray | None = None  # (clauses, dim) embeddings of `request_clauses`


@dataclass(frozen=True)
class _HeldOut:
    """The cross-fitting's held-out steps, stacked: one row per (step, candidate)."""

    x: np.ndarray  # (rows, features)
    good: np.ndarray  # (rows,): an acceptable candidate of its step
    starts: np.ndarray  # (steps,): first row of each step

    @classmethod
    def stack(cls, feats: list[np.ndarray], targets: list[np.ndarray]) -> _HeldOut:
        """Stack per-step matrices and masks, emptying both lists (they would double the RAM)."""
        lengths = np.fromiter((len(f) for f in feats), dtype=np.int64, count=len(feats))
        x = np.concatenate(feats) if feats else np.zeros((0, len(FEATURES)))
        feats.clear()
        good = np.concatenate(targets) if targets else np.zeros(0, dtype=bool)
        targets.clear()
        return cls(x, good, np.cumsum(lengths) - lengths)

    @property
    def n_steps(self) -> int:
        return len(self.starts)

    @cached_property
    def step_of_row(self) -> np.ndarray:
        """Each row's step (computed once: the optimiser needs it at every evaluation)."""
        lengths = np.diff(np.append(self.starts, len(self.x)))
        return np.repeat(np.arange(self.n_steps), lengths)

    def log_sum_exp(self, s: np.ndarray) -> np.ndarray:
        """Per step, log sum exp of the row scores `s` (-inf rows count as absent)."""
        top = np.maximum.reduceat(s, self.starts)
        return top + np.log(np.add.reduceat(np.exp(s - top[self.step_of_row]), self.starts))


def _fit_combiner(held: _HeldOut, prior: np.ndarray, l2: float) -> np.ndarray:
    """Conditional-logit weights maximising log P(an acceptable candidate), pulled to `prior`.

    The pull penalises how much the weights change the scores, not the weights themselves:
    `0.5 * l2 * mean over rows of (x . (w - prior))**2`, that is `d' G d` with `G` the
    features' second-moment matrix, plus a small plain L2 (`RIDGE`). A feature that is large
    on many rows (a rank, a chain's log-probability) is held close to the prior; one that is
    small or rare (end-of-plan's terms, a score difference) moves more freely. Features on
    different scales are then pulled alike, which a plain L2 on the weights does not do.

    The loss (summed over held-out steps) and its gradient are computed in closed form on the
    stacked rows and minimised by SciPy's L-BFGS-B: no padded (steps, widest step, features)
    array and no autograd graph, so memory stays one copy of the features.

    Args:
        held: The held-out steps (every step has at least one acceptable candidate).
        prior: Centre of the penalty.
        l2: Penalty strength.
    """
    from scipy.optimize import minimize

    if held.n_steps == 0:
        return prior.copy()
    row_step = held.step_of_row
    second_moment = held.x.T @ held.x / len(held.x) + RIDGE * np.eye(held.x.shape[1])

    def loss_and_grad(w: np.ndarray) -> tuple[float, np.ndarray]:
        s = held.x @ w
        lse_all = held.log_sum_exp(s)
        lse_good = held.log_sum_exp(np.where(held.good, s, -np.inf))
        p_all = np.exp(s - lse_all[row_step])
        p_good = np.where(held.good, np.exp(s - lse_good[row_step]), 0.0)
        d = w - prior
        gd = second_moment @ d
        loss = float((lse_all - lse_good).sum() + 0.5 * l2 * (d @ gd))
        return loss, held.x.T @ (p_all - p_good) + l2 * gd

    res = minimize(
        loss_and_grad,
        prior.astype(np.float64),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 1000},
    )
    out: np.ndarray = np.asarray(res.x, dtype=np.float64)
    return out


class HybridRetriever(ToolRetriever):
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
            2 is the middle.
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
            descriptions (`ToolGraph.from_catalogue`). Ignored once the combiner is
            cross-fitted.
    """

    retriever_id: ClassVar[str] = "hybrid"
    bench_default: ClassVar[bool] = True
    accepts_no_demos: ClassVar[bool] = True
    """`fit` works with zero demonstrations (pure zero-shot)."""

    def __init__(
        self,
        *,
        encoder: str | Encoder | None = "default",
        n_folds: int = 5,
        candidates: int = 100,
        l2: float = 2.0,
        exact_limit: int | None = EXACT_LIMIT,
        prior_weight: float = 0.1,
        clauses: bool = True,
        seed: int = 0,
        graph: Any = None,
    ) -> None:
        self.encoder = encoder
        self.graph = None if graph is None else given_edges(graph)
        self.n_folds = n_folds
        self.candidates = candidates
        self.l2 = l2
        self.exact_limit = exact_limit
        self.prior_weight = prior_weight
        self.clauses = clauses
        self.seed = seed

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

    def _fit(self, demos: list[Demonstration], tools: Toolset) -> None:
        assert self.tool_embeddings_ is not None
        self._graph_cache: ToolGraph | None = None
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
        if folds >= 2:
            rng = np.random.default_rng(self.seed)
            fold_of = rng.permutation(len(demos)) % folds
            feats: list[np.ndarray] = []
            targets: list[np.ndarray] = []
            for f in range(folds):
                train = [d for d, k in zip(demos, fold_of, strict=True) if k != f]
                held = [d for d, k in zip(demos, fold_of, strict=True) if k == f]
                self._fit_learned(train, seed=self.seed + 1 + f)
                for demo in held:
                    for step in demo.steps():
                        cands, x = self._step_features(demo.query, step.history)
                        names = [self.labels_[int(c)] for c in cands]
                        mask = np.array([n in step.acceptable for n in names], dtype=bool)
                        if mask.any():
                            feats.append(x)
                            targets.append(mask)
            held_out = _HeldOut.stack(feats, targets)
            weights = _fit_combiner(held_out, prior, self.l2)
            self.cv_["held_out_steps"] = held_out.n_steps
            self.cv_["held_out_mrr"] = _held_out_mrr(held_out, weights)
            del held_out
        self.weights_ = np.asarray(weights, dtype=np.float64)
        self._fit_learned(demos)

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

    def _learned_bm25(self, qs: _QueryState, rows: np.ndarray) -> np.ndarray:
        """Normalised BM25 of tools the learned parts added (0 for any other tool)."""
        if qs.bm25_max <= 0 or not len(self._learned_rows):
            return np.zeros(len(rows))
        at = np.minimum(np.searchsorted(self._learned_rows, rows), len(self._learned_rows) - 1)
        known = self._learned_rows[at] == rows
        return np.where(known, qs.bm25_learned[at], 0.0) / qs.bm25_max

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

    # ---------------------------------------------------------------------------- features
    def warm(self, steps: Sequence[tuple[str, Sequence[str]]]) -> None:
        """Encode the requests and their clauses (`request_clauses`) in one batch."""
        if self.encoder_ is None or not steps:
            return
        queries = list(dict.fromkeys(q for q, _ in steps))
        texts = list(queries)
        if self.clauses:  # as `_compute_query_state`: one clause is the request itself
            for q in queries:
                parts = request_clauses(q)
                texts += parts if len(parts) > 1 else []
        self.encoder_.encode(list(dict.fromkeys(texts)))

    def _query_state(self, query: str) -> _QueryState:
        return self._memo(query, "hybrid", self._compute_query_state)

    def _compute_query_state(self, query: str) -> _QueryState:
        qvec = self._query_vector(query).astype(np.float32)
        c = self.candidates
        n = len(self.fit_tools_)
        bm25 = self.bm25_.bm25_scores(query, remember=False)  # ours is the only memo
        positive = int((bm25 > 0).sum())
        k_b = min(c, positive)
        if k_b:
            top_b = np.argpartition(-bm25, k_b - 1)[:k_b] if k_b < n else np.arange(n)
            top_b = top_b[np.argsort(-bm25[top_b], kind="stable")]
        else:
            top_b = np.zeros(0, dtype=np.int64)
        top_d, note = self._dense_candidates(query, qvec)
        cands = np.unique(np.concatenate([top_b, top_d]).astype(np.int64))
        assert self.tool_embeddings_ is not None
        cos = self.tool_embeddings_[cands] @ qvec
        bm_max = float(bm25.max()) if n else 0.0
        cos_max = float(cos.max()) if len(cos) else 0.0
        rank_b = np.full(n, c, dtype=np.float64)
        rank_b[top_b] = np.arange(len(top_b))
        rank_d = np.full(n, c, dtype=np.float64)
        rank_d[top_d] = np.arange(len(top_d))
        zs = np.empty((len(cands), 5))
        zs[:, 0] = bm25[cands] / bm_max if bm_max > 0 else 0.0
        zs[:, 1] = -np.log1p(rank_b[cands])
        zs[:, 2] = cos - cos_max
        zs[:, 3] = -np.log1p(rank_d[cands])
        zs[:, 4] = cos
        cluster, far = -1, 0.0
        if self.chains_ is not None:
            cluster, dist = self.chains_.assign_cluster(query)
            thr = self.chains_.ood_threshold_
            far = dist / thr if thr else 0.0
        neighbours: tuple[tuple[int, float], ...] = ()
        if len(self.knn_queries_):
            sims = self.knn_queries_ @ qvec
            k = min(KNN, len(sims))
            top = np.argpartition(-sims, k - 1)[:k]
            w = softmax(sims[top] / KNN_TEMPERATURE)
            neighbours = tuple((int(j), float(v)) for j, v in zip(top, w, strict=True))
        # Only the learned parts add tools to a step beyond these candidates, so only their
        # tools' BM25 scores are kept: not a catalogue-sized vector per remembered request.
        bm25_learned = bm25[self._learned_rows]
        parts = request_clauses(query) if self.clauses else []
        assert self.encoder_ is not None
        clauses = (
            None
            if not parts
            else qvec[None, :]
            if len(parts) == 1
            else self.encoder_.encode(parts).astype(np.float32)
        )
        return _QueryState(
            qvec, cands, zs, bm25_learned, bm_max, cos_max, cluster, far, note, neighbours, clauses
        )

    def _knn(
        self, qs: _QueryState, history: tuple[str, ...]
    ) -> tuple[dict[int, float], dict[int, float], float]:
        """Neighbours' votes: tools left in their plans, their next call, and end-of-plan."""
        done: dict[int, int] = {}
        for h in history:
            i = self._label_index.get(h, -1)
            done[i] = done.get(i, 0) + 1
        plan_votes: dict[int, float] = {}
        next_votes: dict[int, float] = {}
        end_vote = 0.0
        for j, weight in qs.neighbours:
            left = dict(done)
            remaining = []
            for t in self.knn_plans_[j].tolist():
                if left.get(t, 0) > 0:
                    left[t] -= 1
                else:
                    remaining.append(t)
            if not remaining:
                end_vote += weight
                continue
            next_votes[remaining[0]] = next_votes.get(remaining[0], 0.0) + weight
            for t in set(remaining):
                plan_votes[t] = plan_votes.get(t, 0.0) + weight
        return plan_votes, next_votes, end_vote

    def set_candidate_source(self, source: CandidateSource | None) -> Self:
        """Take the dense candidates from `source` (e.g. a shared vector store), or None.

        The source is not saved with the model. Names outside the catalogue are skipped and a
        failing source falls back to the local index; both are noted in the explanation.
        """
        self._candidate_source = source
        self._memo_store = None
        return self

    def _dense_candidates(self, query: str, qvec: np.ndarray) -> tuple[np.ndarray, str | None]:
        source: CandidateSource | None = getattr(self, "_candidate_source", None)
        if source is None:
            return self.index_.search(qvec, self.candidates)[0], None
        try:
            pairs = list(source(query, self.candidates))
        except Exception as exc:  # never fail an agent step on the external store
            ids = self.index_.search(qvec, self.candidates)[0]
            return ids, f"candidate source failed ({exc}); used the local index"
        n = len(self.fit_tools_)
        rows = [self._label_index.get(name, -1) for name, _ in pairs]
        unknown = [name for (name, _), r in zip(pairs, rows, strict=True) if not 0 <= r < n]
        ids = np.array([r for r in rows if 0 <= r < n], dtype=np.int64)
        note = f"{len(ids)} candidates from the candidate source"
        if unknown:
            shown = ", ".join(repr(u) for u in unknown[:5])
            note += f"; skipped {len(unknown)} names outside the catalogue ({shown})"
        return ids, note

    def _chain(self, group: int, seq: list[int]) -> tuple[np.ndarray, np.ndarray, float]:
        """(our labels, probabilities, key support) of the longest key of `seq` seen in `group`."""
        assert self.chains_ is not None
        tables = self.chains_.tables_
        for order in sorted(self.chains_._orders(), reverse=True):
            hit = tables.lookup(group, history_key(seq, order))
            if hit is not None:
                labels, counts = hit
                total = float(counts.sum())
                return self._chain_map[labels], counts / total, total
        return np.zeros(0, dtype=np.int64), np.zeros(0), 0.0

    def _linear_probs(
        self, qs: _QueryState, history: tuple[str, ...]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Both DTDR-L models' probabilities over their (shared) labels for this step."""
        if self.linear_ is None or self.linear_fine_ is None:
            return None
        x = self.linear_._structured(qs.qvec[None, :], [history])[0]
        return (
            softmax(self.linear_.weight_ @ x + self.linear_.bias_),
            softmax(self.linear_fine_.weight_ @ x + self.linear_fine_.bias_),
        )

    def _step_features(self, query: str, history: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(candidate labels, feature matrix) of one step; end-of-plan is the last candidate."""
        qs = self._query_state(query)
        end = len(self.labels_) - 1
        extra: list[np.ndarray] = []
        cl_labels = cl_p = all_labels = all_p = np.zeros(0)
        cl_support = all_support = 0.0
        if self.chains_ is not None:
            seq = [self.chains_._label_index.get(h, UNSEEN) for h in history]
            cl_labels, cl_p, cl_support = self._chain(qs.cluster, seq)
            if self.chains_.n_clusters_ > 1:
                all_labels, all_p, all_support = self._chain(GLOBAL, seq)
            else:
                all_labels, all_p, all_support = cl_labels, cl_p, cl_support
            extra += [cl_labels.astype(np.int64), all_labels.astype(np.int64)]
        lps = self._linear_probs(qs, history)
        if lps is not None:
            mean = 0.5 * (lps[0] + lps[1])
            k = min(L_TOP, len(mean))
            top = np.argpartition(-mean, k - 1)[:k]
            extra.append(self._linear_map[top])
        plan_votes, next_votes, end_vote = self._knn(qs, history)
        if plan_votes:
            extra.append(np.fromiter(plan_votes, dtype=np.int64, count=len(plan_votes)))
        cands = qs.candidates
        if extra:
            more = np.concatenate(extra)
            more = more[(more != end) & ~np.isin(more, cands)]
            if len(more):
                cands = np.concatenate([cands, np.unique(more)])
        labels = np.append(cands, end)
        n_c = len(cands)
        x = np.zeros((n_c + 1, len(FEATURES)))
        # zero-shot
        n_q = len(qs.candidates)
        x[:n_q, _F["bm25_norm"]] = qs.zero_shot[:, 0]
        x[:n_q, _F["bm25_rank"]] = qs.zero_shot[:, 1]
        x[:n_q, _F["dense_rel"]] = qs.zero_shot[:, 2]
        x[:n_q, _F["dense_rank"]] = qs.zero_shot[:, 3]
        if n_c > n_q:
            added = cands[n_q:]
            assert self.tool_embeddings_ is not None
            x[n_q:n_c, _F["bm25_norm"]] = self._learned_bm25(qs, added)
            x[n_q:n_c, _F["bm25_rank"]] = -np.log1p(self.candidates)
            x[n_q:n_c, _F["dense_rel"]] = self.tool_embeddings_[added] @ qs.qvec - qs.cos_max
            x[n_q:n_c, _F["dense_rank"]] = -np.log1p(self.candidates)
        counts = self.tool_counts_[cands]
        unseen = (counts == 0).astype(np.float64)
        x[:n_c, _F["unseen"]] = unseen
        x[:n_c, _F["bm25_norm_unseen"]] = x[:n_c, _F["bm25_norm"]] * unseen
        x[:n_c, _F["dense_rel_unseen"]] = x[:n_c, _F["dense_rel"]] * unseen
        x[:n_c, _F["log_count"]] = np.log1p(counts)
        # learned
        pos = {int(label): i for i, label in enumerate(labels)}
        x[n_c, _F["end"]] = 1.0
        if self.chains_ is not None:
            rare_cl = 1.0 / np.sqrt(1.0 + cl_support)
            rare_all = 1.0 / np.sqrt(1.0 + all_support)
            for chain_labels, chain_p, end_name, cols in (
                (
                    cl_labels,
                    cl_p,
                    "end_chain_cluster",
                    (
                        ("chain_cluster", 1.0),
                        ("chain_cluster_rare_key", rare_cl),
                        ("chain_cluster_far", qs.cluster_far),
                    ),
                ),
                (
                    all_labels,
                    all_p,
                    "end_chain_all",
                    (("chain_all", 1.0), ("chain_all_rare_key", rare_all)),
                ),
            ):
                rows = np.array([pos[int(lab)] for lab in chain_labels], dtype=np.int64)
                vals = np.log1p(np.asarray(chain_p, dtype=np.float64) / CHAIN_EPS)
                is_end = np.asarray(chain_labels) == end
                x[rows[is_end], _F[end_name]] = vals[is_end]
                for name, factor in cols:
                    x[rows[~is_end], _F[name]] = vals[~is_end] * factor
        if lps is not None:
            for lp, col, end_col in (
                (lps[0], _F["dtdr_l"], _F["end_dtdr_l"]),
                (lps[1], _F["dtdr_l_fine"], _F["end_dtdr_l_fine"]),
            ):
                full = np.full(len(self.labels_), np.log(L_FLOOR))
                full[self._linear_map] = np.log(np.maximum(lp, L_FLOOR))
                x[:n_c, col] = full[cands] - np.log(L_FLOOR)
                x[n_c, end_col] = full[end] - np.log(L_FLOOR)
        if history:
            hist_rows = [self._label_index.get(h, -1) for h in history]
            for h in hist_rows:
                if h >= 0 and h in pos and h != end:
                    x[pos[h], _F["in_history"]] += 1.0
            last = hist_rows[-1]
            if 0 <= last < len(self.fit_tools_):
                assert self.tool_embeddings_ is not None
                x[:n_c, _F["last_call_sim"]] = (
                    self.tool_embeddings_[cands] @ self.tool_embeddings_[last]
                )
        self._clause_features(qs, history, cands, x)
        x[n_c, _F["end_n_calls"]] = np.log1p(len(history))
        x[n_c, _F["end_first_step"]] = float(not history)
        x[n_c, _F["end_knn"]] = end_vote
        for votes, col in ((plan_votes, _F["knn_plan"]), (next_votes, _F["knn_next"])):
            for t, v in votes.items():
                if t in pos and t != end:
                    x[pos[t], col] = v
        return labels, x

    def _clause_features(
        self, qs: _QueryState, history: tuple[str, ...], cands: np.ndarray, x: np.ndarray
    ) -> None:
        """Fill the `clause_*` columns of the candidates' rows of `x` (in place).

        `clause_rel`: the candidate's best similarity to any clause of the request.
        `clause_open`: the same, each clause discounted by how well the calls so far already
        match it (a sub-goal that is done). `clause_next`: similarity to the clause whose
        position is the number of calls so far (requests often list steps in order).
        """
        assert self.tool_embeddings_ is not None
        if qs.clauses is None:  # clauses=False
            return
        sims = self.tool_embeddings_[cands] @ qs.clauses.T  # (candidates, clauses)
        if not sims.size:
            return
        n_c = len(cands)
        x[:n_c, _F["clause_rel"]] = sims.max(axis=1)
        rows = [
            r
            for r in (self._label_index.get(h, -1) for h in history)
            if 0 <= r < len(self.fit_tools_)
        ]
        covered = (
            (self.tool_embeddings_[rows] @ qs.clauses.T).max(axis=0)
            if rows
            else np.zeros(sims.shape[1])
        )
        x[:n_c, _F["clause_open"]] = (sims * (1.0 - np.clip(covered, 0.0, 1.0))).max(axis=1)
        if len(history) < sims.shape[1]:
            x[:n_c, _F["clause_next"]] = sims[:, len(history)]

    # ------------------------------------------------------------------------------ scoring
    def _score(self, query: str, history: tuple[str, ...]) -> Scores:
        if self.cv_.get("n_demos", 0) < MIN_CROSS_FIT:
            return self._uncrossfitted_score(query, history)
        labels, x = self._step_features(query, history)
        s = x @ self.weights_
        p = softmax(s)
        n_labels = len(self.labels_)
        n_rest = n_labels - len(labels)
        out = np.full(n_labels, REST_MASS / n_rest if n_rest else 0.0)
        out[labels] = p * (1.0 - REST_MASS) if n_rest else p
        contrib = x[int(np.argmax(s))] * self.weights_
        top = np.argsort(-np.abs(contrib))[:3]
        explanation: dict[str, Any] = {
            "candidates": len(labels),
            "index": self.index_.kind,
            "top_features": [FEATURES[int(i)] for i in top if contrib[int(i)] != 0.0],
        }
        qs = self._query_state(query)
        if self.chains_ is not None:
            explanation["cluster"] = qs.cluster
        if qs.source_note is not None:
            explanation["candidate_source"] = qs.source_note
        return Scores(
            out, explanation, tool_why=self._contribution_why(labels, x), replaces=("top_features",)
        )

    def _uncrossfitted_score(self, query: str, history: tuple[str, ...]) -> Scores:
        """Scores with too few demonstrations to cross-fit: zero-shot rankers fused by rank.

        The request's clauses are its sub-goals; each call made covers the open clause its
        tool matches best. Each candidate tool gets ``-log(1 + rank)`` from BM25, from dense
        similarity to the request, from its similarity to the open sub-goals and from its edge
        in the tool graph from the last call (`_graph_rank`), summed. A
        tool already called has spent its relevance to the request: its BM25 and dense terms
        are the last candidate's, so only an open sub-goal can bring it back. End-of-plan gets
        the shared zero-shot stop probability (calls made against clauses stated,
        `dtdr_agents.foundation.clauses.zero_shot_stop_probability`), never a base rate.
        """
        from dtdr_agents.foundation.clauses import zero_shot_stop_probability

        labels, x = self._step_features(query, history)
        cands = labels[:-1]  # the last label is end-of-plan
        n_c = len(cands)
        open_sim = self._open_sub_goals(self._query_state(query), history, cands)
        open_rank = np.empty(n_c)
        open_rank[np.argsort(-open_sim, kind="stable")] = np.arange(n_c)
        request = x[:n_c, _F["bm25_rank"]] + x[:n_c, _F["dense_rank"]]
        called = x[:n_c, _F["in_history"]] > 0
        request[called] = -2.0 * np.log1p(n_c)
        fused = request - np.log1p(open_rank) - np.log1p(self._graph_rank(history, cands))
        end = zero_shot_stop_probability(query, len(history))
        n_labels = len(self.labels_)
        n_rest = n_labels - len(labels)
        mass = (1.0 - end) * (1.0 - REST_MASS if n_rest else 1.0)
        out = np.full(n_labels, (1.0 - end) * REST_MASS / n_rest if n_rest else 0.0)
        out[cands] = softmax(fused) * mass
        out[labels[-1]] = end
        rows = {int(label): r for r, label in enumerate(cands)}
        end_label = int(labels[-1])

        def why(i: int) -> str:
            if i == end_label:
                return f"zero-shot stop rule p={end:.3f}"
            r = rows.get(i)
            if r is None:
                return "not among this step's candidates"
            spent = ", already called" if called[r] else ""
            return (
                f"bm25_rank={x[r, _F['bm25_rank']]:+.2f}, "
                f"dense_rank={x[r, _F['dense_rank']]:+.2f}, "
                f"open_sub_goal_rank={int(open_rank[r]) + 1}{spent}"
            )

        explanation = {
            "zero_shot": f"{self.cv_.get('n_demos', 0)} demonstrations: nothing to cross-fit",
            "stop": f"zero-shot stop rule p={end:.3f}",
            "candidates": len(labels),
        }
        return Scores(out, explanation, tool_why=why)

    def _tool_graph(self) -> ToolGraph:
        """The dependency graph of the zero-shot scoring (given, or derived; built once)."""
        graph: ToolGraph | None = getattr(self, "_graph_cache", None)
        if graph is None:
            if self.graph is None:
                graph = ToolGraph.from_catalogue(self.fit_tools_)
            else:  # unknown tools: skipped with a warning
                graph = ToolGraph.from_given(self.graph, self.fit_tools_, strict=False)
            self._graph_cache = graph
        return graph

    def _graph_rank(self, history: tuple[str, ...], cands: np.ndarray) -> np.ndarray:
        """Each candidate's rank by its edge from the last call (ties share; no edge: last).

        Zero for every candidate when the last call has no successors (no evidence).
        """
        ranks = np.zeros(len(cands))
        if not history or history[-1] not in self._label_index:
            return ranks
        succ = self._tool_graph().successors(history[-1])
        if not succ:
            return ranks
        w = np.array([succ.get(self.labels_[int(c)], 0.0) for c in cands])
        levels = sorted({float(v) for v in w if v > 0}, reverse=True)
        place = {v: float(i) for i, v in enumerate(levels)}
        return np.array([place[float(v)] if v > 0 else float(len(levels)) for v in w])

    def _open_sub_goals(
        self, qs: _QueryState, history: tuple[str, ...], cands: np.ndarray
    ) -> np.ndarray:
        """Each candidate's best similarity to a clause no call has covered yet (0 if none).

        A call covers the open clause its tool matches best; with every clause covered, none
        is open. Without clauses (``clauses=False``) the request is the one sub-goal.
        """
        assert self.tool_embeddings_ is not None
        goals = qs.clauses if qs.clauses is not None else qs.qvec[None, :]
        open_ = np.ones(len(goals), dtype=bool)
        for h in history:
            row = self._label_index.get(h, -1)
            if not 0 <= row < len(self.fit_tools_) or not open_.any():
                continue
            sims = goals @ self.tool_embeddings_[row]
            sims[~open_] = -np.inf
            open_[int(np.argmax(sims))] = False
        if not open_.any():
            return np.zeros(len(cands))
        return np.asarray((self.tool_embeddings_[cands] @ goals[open_].T).max(axis=1))

    def _contribution_why(self, labels: np.ndarray, x: np.ndarray) -> Callable[[int], str]:
        """`Scores.tool_why`: a label's three largest feature contributions (feature x weight).

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
            contrib = x[row] * weights
            top = [int(j) for j in np.argsort(-np.abs(contrib), kind="stable")[:3]]
            return ", ".join(f"{FEATURES[j]}={contrib[j]:+.2f}" for j in top if contrib[j] != 0.0)

        return why

    def mix(self) -> dict[str, float]:
        """The combiner's weight of every feature (what the cross-fitting chose)."""
        self._check_fitted()
        return {name: float(w) for name, w in zip(FEATURES, self.weights_, strict=True)}

    # -------------------------------------------------------------------------- persistence
    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        index_cfg, index_arrays = self.index_.state()
        state: dict[str, Any] = {"cv": self.cv_, "index": index_cfg, "features": list(FEATURES)}
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
        if self.tool_counts_.shape != (len(self.labels_),):
            raise ModelLoadError("corrupt hybrid state: tool_counts does not match the catalogue")
        if (
            int(lengths.sum()) != len(flat)
            or len(lengths) != len(self.knn_queries_)
            or (len(flat) and (flat.min() < 0 or flat.max() >= len(self.labels_) - 1))
        ):
            raise ModelLoadError("corrupt hybrid state: the demonstrations' plans are inconsistent")
        self.knn_plans_ = list(np.split(flat, np.cumsum(lengths)[:-1])) if len(lengths) else []
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


def _held_out_mrr(held: _HeldOut, weights: np.ndarray) -> dict[str, float]:
    """Held-out MRR of the combiner and of single features (over candidates), for the record."""
    cols = {
        "hybrid": None,
        "bm25": _F["bm25_norm"],
        "dense": _F["dense_rel"],
        "dtdr-c chain": _F["chain_cluster"],
        "dtdr-l": _F["dtdr_l"],
    }
    if held.n_steps == 0:
        return dict.fromkeys(cols, 0.0)
    mixed = held.x @ weights
    row_step = held.step_of_row
    out: dict[str, float] = {}
    for name, col in cols.items():
        s = mixed if col is None else held.x[:, col] + 1e-9 * mixed
        # rank of a step's best acceptable candidate = 1 + candidates scored strictly above it
        best = np.maximum.reduceat(np.where(held.good, s, -np.inf), held.starts)
        above = np.add.reduceat((s > best[row_step]).astype(np.int64), held.starts)
        out[name] = round(float(np.mean(1.0 / (above + 1))), 4)
    return out
