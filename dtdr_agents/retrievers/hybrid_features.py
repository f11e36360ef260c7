"""The hybrid's per-step features: what a request and the calls so far say about each tool.

`HybridFeatures` is the part of `HybridRetriever` that turns a (request, history) step into
its candidates and their feature matrix (`FEATURES`): BM25 and dense relevance, the learned
parts' chains and DTDR-L, the nearest demonstrations' plans and the request's clauses.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np
from cachetools import LRUCache

from dtdr_agents.foundation.clauses import (
    MAX_CLAUSES,
    fills_parameter,
    request_clauses,
    stop_probability,
    sub_goals,
    word_stems,
)
from dtdr_agents.foundation.types import Toolset
from dtdr_agents.planning.planners import Planner, aplan_within, plan_within
from dtdr_agents.retrievers.artefacts import ArtefactFlow, request_media
from dtdr_agents.retrievers.base import ToolRetriever, softmax
from dtdr_agents.retrievers.bm25 import BM25Retriever
from dtdr_agents.retrievers.dtdr_c import DTDRC
from dtdr_agents.retrievers.hybrid_combiner import _F, FEATURES, _prior_vector
from dtdr_agents.retrievers.index import CandidateIndex
from dtdr_agents.retrievers.linear import DTDRL
from dtdr_agents.retrievers.markov import GLOBAL, UNSEEN, history_key
from dtdr_agents.retrievers.tool_graph import ToolGraph

CHAIN_EPS = 1e-3
"""Chain features are `log(1 + p / CHAIN_EPS)`: 0 for tools never seen after the key."""

L_FLOOR = 1e-6
"""DTDR-L log-probabilities are floored here (tools DTDR-L never saw get the floor)."""

L_TOP = 20
"""DTDR-L's top tools added to every step's candidates."""

KNN = 10
"""Nearest demonstrations (by request similarity) behind the `knn_*` features."""

KNN_TEMPERATURE = 0.05
"""Softmax temperature of the neighbours' weights over their cosine similarities."""

PAIR_SAMPLE = 4096
"""Pairs of demonstration requests behind `typical_pair_similarity` (all pairs when fewer)."""


def typical_pair_similarity(queries: np.ndarray) -> float:
    """The median cosine of two different demonstration requests (0 with fewer than two).

    How close two requests of this catalogue are as a rule: a neighbour closer to a new
    request than that stands out (`_KnnVotes`). Over every pair up to `PAIR_SAMPLE` pairs,
    else over that many pairs drawn with a fixed seed (the same at fit and at load).
    """
    n = len(queries)
    if n < 2:
        return 0.0
    if n * (n - 1) // 2 <= PAIR_SAMPLE:
        left, right = np.triu_indices(n, 1)
    else:
        rng = np.random.default_rng(0)
        left = rng.integers(0, n, PAIR_SAMPLE)
        right = rng.integers(0, n - 1, PAIR_SAMPLE)
        right = right + (right >= left)  # another request than `left`
    sims = np.einsum("ij,ij->i", queries[left], queries[right], dtype=np.float64)
    return float(np.median(sims))


PLAN_SEARCH_K = 5
"""Tools a planner sees for each of its functional queries (its feedback)."""

PLANS_KEPT = 4096
"""Requests whose planned sub-goals are kept (least recently used dropped first)."""

DONE_MARGIN = 0.05
"""A call made does a sub-goal when it matches it within this cosine of the sub-goal's best
candidate (`_pending`: such a sub-goal holds no stop back). Zero demonstrations, seed 0, stop
recall / END first at tool steps: TaskBench-HF 0.704 / 0.089 with no margin, 0.772 / 0.098 at
0.05, 0.801 / 0.101 at 0.1; NESTFUL 0.774 / 0.024, 0.790 / 0.030, 0.806 / 0.036."""

GIVEN_GRAPH_SCALE = 2.0
"""A given graph's `graph_rank` counts this many times a derived one's.

A graph the user gives states the dependencies; a derived one guesses them from names and
descriptions, and a wrong guess is common (on Seal-Tools fewer than 3% of the next calls
follow an edge of the derived graph from the last call; on TaskBench-HF 98% follow its
published graph). With TaskBench-HF's graph given, zero demonstrations, seeds 0 to 2:
tool-MRR 0.6117, 0.6264, 0.6174 at 1 and 0.6259, 0.6415, 0.6288 at 2."""

SUB_GOAL_TEMPERATURE = 0.02
"""Temperature of each open sub-goal's softmax over the candidates (`_open_sub_goals`).

A candidate is ranked by the best probability any open sub-goal gives it, not by its raw
best cosine: a sub-goal whose tool is clear outranks one that is merely close to many tools.
Zero demonstrations, seed 0, tool-MRR (TaskBench-HF graph given / Seal-Tools / NESTFUL):
0.6259 / 0.8581 / 0.8482 by the raw cosine; 0.6422 / 0.8639 / 0.8456 at 0.01, 0.6397 /
0.8663 / 0.8456 at 0.02, 0.6384 / 0.8675 / 0.8425 at 0.03."""

GENERIC_PARAMETER_SHARE = 0.05
"""A word in the parameter names of more than this share of the catalogue's tools, and of
more than one, ("text", "id") names no parameter (`_asking_goals`)."""

LINEAR_CALLS_BYTES = 16 * 2**20
"""Memory for the kept products of a call's embedding with a DTDR-L position block (each a
vector over DTDR-L's labels; all dropped when full)."""

SUCCESSOR_ROWS_KEPT = 1024
"""Tools whose graph edges to the labels are kept (all dropped when full)."""

logger = logging.getLogger(__name__)

_PLANS_LOCK = threading.Lock()
"""Guards the kept plans (`cachetools` caches are not thread-safe); never held while planning."""


CandidateSource = Callable[[str, int], Sequence[tuple[str, float]]]
"""An external candidate stage: (query, k) -> up to k (tool name, similarity), best first.

For example a shared vector database (`langchain_dtdr.vectorstore.VectorStoreCandidates`)."""


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
    clauses: np.ndarray | None = None  # (sub-goals, dim): `request_clauses` or the plan's
    n_goals: int = 1  # sub-goals stated (the zero-shot stop rule's count)
    goals_from: str = "clauses"  # "planner", or "clauses" (and why, when the planner failed)
    goals: np.ndarray | None = None  # (n_goals, dim): `sub_goals` or the plan's (`_pending`)
    media: int = 0  # the media kinds whose files the request names (`request_media`)
    # (the DTDR-L models, their logits of the query's block): the same at every step
    linear_query: tuple[tuple[object, object], list[np.ndarray]] | None = None
    # how far each neighbour's request stands out from the request's typical demonstration
    # (its cosine over their median, or over `typical_pair_similarity` where that is higher,
    # scaled to 1): the weight of its plan in `_KnnVotes.follow`
    lead_weights: tuple[float, ...] = ()
    # the neighbours' plans as label lists, in `neighbours` order (read at every step)
    neighbour_plans: tuple[list[int], ...] = ()
    # (the embeddings they came from, the candidates' rows of them, those to the clauses)
    step_rows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    # the BM25 rank of a tool outside its top list: the tools it matched, at most `candidates`
    bm25_unranked: int = 0


@dataclass(frozen=True)
class _KnnVotes:
    """The nearest demonstrations' votes at one step.

    `plan`, `next` and `end` read a neighbour's plan as a multiset of calls still to make,
    each weighted by its `neighbours` weight. `follow` and `end_follow` count only the
    neighbours whose first calls are the calls made so far (in any order), each by how far its
    request stands out (`lead_weights`): such a plan says which call comes next (`follow`),
    and whether the work is done (`end_follow`: + the weight of those that end here, - of
    those that go on). End-of-plan's `end_knn_follow` takes only the part below 0: the
    neighbours may hold a stop back, never bring one forward, since a premature stop ends the
    agent's work and a neighbour that ended here may have asked for less (TaskBench-HF, seeds
    0 to 2, end-of-plan first at tool steps at 5 / 20 / 300 demonstrations 0.1004 / 0.1024 /
    0.1073 with the whole vote, above the 0.0984 of none; issue 40).
    """

    plan: dict[int, float]
    next: dict[int, float]
    end: float
    follow: dict[int, float]
    end_follow: float


def _same_calls(calls: list[int], counts: dict[int, int]) -> bool:
    """Whether `calls` are the calls counted in `counts` (as a multiset)."""
    seen: dict[int, int] = {}
    for t in calls:
        seen[t] = seen.get(t, 0) + 1
    return seen == counts


@dataclass(frozen=True)
class _StepSims:
    """The similarities one step's features share (each product made once per step).

    The candidates' embeddings are kept in two parts: the request's candidates (the same at
    every step of the request: gathered once, in `_QueryState.step_rows`) and those the
    learned parts added at this step.
    """

    request_tools: np.ndarray  # (request's candidates, dim): their embeddings
    added_tools: np.ndarray  # (candidates added at this step, dim)
    goals: np.ndarray  # (candidates, sub-goals): to the clauses (the request without them)
    calls: np.ndarray  # (calls made with an embedding, sub-goals): the calls to the same

    @classmethod
    def of(
        cls, embeddings: np.ndarray, qs: _QueryState, cands: np.ndarray, rows: list[int]
    ) -> _StepSims:
        """The products of a step whose candidates are `cands` and calls' rows `rows`."""
        goals = qs.clauses if qs.clauses is not None else qs.qvec[None, :]
        kept = qs.step_rows
        if kept is None or kept[0] is not embeddings:
            request_tools = embeddings[qs.candidates]
            kept = (embeddings, request_tools, request_tools @ goals.T)
            qs.step_rows = kept
        added = embeddings[cands[len(qs.candidates) :]]
        to_goals = np.concatenate([kept[2], added @ goals.T]) if len(added) else kept[2]
        return cls(kept[1], added, to_goals, embeddings[rows] @ goals.T)

    @property
    def n(self) -> int:
        """The step's candidates."""
        return len(self.request_tools) + len(self.added_tools)

    def dot(self, other: np.ndarray) -> np.ndarray:
        """The candidates' embeddings times `other` (a vector, or dim x k), candidates first."""
        if not len(self.added_tools):
            return np.asarray(self.request_tools @ other)
        return np.concatenate([self.request_tools @ other, self.added_tools @ other])


def edge_ranks(weights: np.ndarray) -> np.ndarray:
    """Each tool's rank by its edge weight from the last call, best first.

    Tools with equal weights share a rank; tools with no edge come last. With no edge at all
    (no evidence), every tool's rank is 0.
    """
    positive = weights > 0
    levels = np.unique(weights[positive])[::-1]  # distinct edge weights, best first
    ranks = np.full(len(weights), float(len(levels)))
    ranks[positive] = np.searchsorted(-levels, -weights[positive])
    return ranks


_PRIOR = _prior_vector()
"""The combiner's prior weights (`PRIOR_WEIGHTS`) as a vector, built once."""

_ROWS = threading.local()
"""Each thread's label -> feature-row buffer (`_row_buffer`)."""


def _row_buffer(size: int) -> np.ndarray:
    """This thread's buffer of `size` label -> row entries, every one -1.

    A step sets its candidates' rows and puts the -1s back when done, so a step costs its
    candidates, not a catalogue-sized array (at 100,000 tools, allocating and filling one
    per step took most of a step's time).
    """
    buf: np.ndarray | None = getattr(_ROWS, "buf", None)
    if buf is None or len(buf) < size:
        buf = np.full(size, -1, dtype=np.int64)
        _ROWS.buf = buf
    return buf[:size]


class HybridFeatures(ToolRetriever):
    """The hybrid's feature computation (a base of `HybridRetriever`; registers no id)."""

    candidates: int
    clauses: bool
    graph: Any
    goal_planner: Planner | None
    goal_planner_timeout: float | None
    bm25_: BM25Retriever = field(init=False)
    index_: CandidateIndex = field(init=False)
    chains_: DTDRC | None = field(init=False)
    linear_: DTDRL | None = field(init=False)
    linear_fine_: DTDRL | None = field(init=False)
    knn_queries_: np.ndarray = field(init=False)
    knn_typical_: float = field(init=False, default=0.0)  # `typical_pair_similarity` of them
    knn_plans_: list[np.ndarray] = field(init=False)
    tool_counts_: np.ndarray = field(init=False)
    _chain_map: np.ndarray = field(init=False)
    _linear_map: np.ndarray = field(init=False)
    _learned_rows: np.ndarray = field(init=False)
    _graph_cache: ToolGraph | None = field(init=False, default=None)
    _successor_rows: dict[str, tuple[np.ndarray, np.ndarray]] = field(
        init=False, default_factory=dict
    )
    # (the DTDR-L models, their weights in contiguous column blocks): `_linear_blocks`
    _linear_cut: (
        tuple[
            tuple[object, object],
            list[list[tuple[slice, np.ndarray]]],
            list[np.ndarray] | None,
        ]
        | None
    ) = field(init=False, default=None)
    _graph_rows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(init=False, default=None)
    # (the DTDR-L models, their kept call-block products): `_linear_calls`
    _linear_call_products: (
        tuple[tuple[object, object], dict[tuple[int, int, bool, str], np.ndarray]] | None
    ) = field(init=False, default=None)
    # (`_linear_map`, its inverse over the labels): `_linear_rows`
    _linear_inverse: tuple[np.ndarray, np.ndarray] | None = field(init=False, default=None)
    _artefacts: ArtefactFlow | None = field(init=False, default=None)
    _label_needs_: np.ndarray | None = field(init=False, default=None)  # over `labels_`
    _graph_for: Toolset | None = field(init=False, default=None)
    _plans: LRUCache[str, tuple[tuple[str, ...] | None, str]] | None = field(
        init=False, default=None
    )
    _generic_words: frozenset[str] | None = field(init=False, default=None)

    def _learned_bm25(self, qs: _QueryState, rows: np.ndarray) -> np.ndarray:
        """Normalised BM25 of tools the learned parts added (0 for any other tool)."""
        if qs.bm25_max <= 0 or not len(self._learned_rows):
            return np.zeros(len(rows))
        at = np.minimum(np.searchsorted(self._learned_rows, rows), len(self._learned_rows) - 1)
        known = self._learned_rows[at] == rows
        return np.where(known, qs.bm25_learned[at], 0.0) / qs.bm25_max

    def warm(self, steps: Sequence[tuple[str, Sequence[str]]]) -> None:
        """Encode the requests, their clauses and sub-goals (`_goal_texts`) in one batch."""
        if self.encoder_ is None or not steps:
            return
        queries = list(dict.fromkeys(q for q, _ in steps))
        texts = list(queries)
        for q in queries:  # as `_compute_query_state`: one clause is the request itself
            parts, goals = self._goal_texts(q, None)
            texts += (parts if len(parts) > 1 else []) + (goals if len(goals) > 1 else [])
        self.encoder_.encode(list(dict.fromkeys(texts)))

    def _goal_texts(
        self, query: str, planned: tuple[str, ...] | None
    ) -> tuple[list[str], list[str]]:
        """(the clauses the `clause_*` features track, the sub-goals the stop rule counts).

        The plan's sub-goals are both; without a plan, `request_clauses` (none under
        ``clauses=False``) and `sub_goals`.
        """
        if planned is not None:
            return list(planned), list(planned)
        return (request_clauses(query) if self.clauses else []), sub_goals(query)

    def _asking_goals(self, goals: list[str], vectors: np.ndarray) -> list[int]:
        """The sub-goals that ask for a call: not the ones that only give an argument.

        A sub-goal that names a parameter (`fills_parameter`) of the tool that best matches
        the asking sub-goal before it ("Get the slope stability ... with a slope angle of
        34.2 degrees", then "slope height of 24.3 meters": ``slope_height`` of
        ``getSlopeStability``) fills an argument of that call rather than asking for one.
        """
        generic = self._generic_parameter_words()
        asks = [0]
        props = self._best_tool_parameters(vectors[0])
        for i in range(1, len(goals)):
            if not fills_parameter(goals[i], props, generic):
                asks.append(i)
                props = self._best_tool_parameters(vectors[i])
        return asks

    def _best_tool_parameters(self, vector: np.ndarray) -> list[str]:
        """The parameter names of the fit tool most similar to `vector` (none: [])."""
        rows = self.index_.search(vector, 1)[0]
        props = self.fit_tools_[int(rows[0])].parameters.get("properties") if len(rows) else None
        return list(props) if isinstance(props, Mapping) else []

    def _generic_parameter_words(self) -> frozenset[str]:
        """Words in the parameter names of many fit tools (`GENERIC_PARAMETER_SHARE`); kept."""
        if self._generic_words is None:
            counts: Counter[str] = Counter()
            for tool in self.fit_tools_:
                props = tool.parameters.get("properties")
                if isinstance(props, Mapping):
                    counts.update(frozenset().union(*map(word_stems, props)))
            most = max(1.0, GENERIC_PARAMETER_SHARE * len(self.fit_tools_))
            self._generic_words = frozenset(w for w, c in counts.items() if c > most)
        return self._generic_words

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
        # a tool the request's words do not match ranks just after those they match, tied, as
        # BM25 orders them (not at the last rank a candidate can have: one shared word would
        # then outweigh every other evidence on a small catalogue)
        rank_b = np.full(n, k_b, dtype=np.float64)
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
        lead_weights: tuple[float, ...] = ()
        neighbour_plans: tuple[list[int], ...] = ()
        if len(self.knn_queries_):
            sims = self.knn_queries_ @ qvec
            k = min(KNN, len(sims))
            top = np.argpartition(-sims, k - 1)[:k]
            w = softmax(sims[top] / KNN_TEMPERATURE)
            neighbours = tuple((int(j), float(v)) for j, v in zip(top, w, strict=True))
            # how close a demonstration is, as a rule: to this request, and to another one
            typical = max(float(np.median(sims)), self.knn_typical_)
            lead = np.clip((sims[top] - typical) / max(1.0 - typical, 1e-9), 0.0, 1.0)
            lead_weights = tuple(float(v) for v in lead)
            neighbour_plans = tuple(self.knn_plans_[j].tolist() for j, _ in neighbours)
        # Only the learned parts add tools to a step beyond these candidates, so only their
        # tools' BM25 scores are kept: not a catalogue-sized vector per remembered request.
        bm25_learned = bm25[self._learned_rows]
        planned, goals_from = self._planned_sub_goals(query)
        parts, goals = self._goal_texts(query, planned)
        assert self.encoder_ is not None
        several = list(dict.fromkeys(t for ts in (parts, goals) if len(ts) > 1 for t in ts))
        encoded = (
            self.encoder_.encode(several).astype(np.float32)
            if several
            else np.zeros((0, len(qvec)), dtype=np.float32)
        )
        vectors = dict(zip(several, encoded, strict=True))

        def _stack(texts: list[str]) -> np.ndarray | None:  # one text is the request itself
            if not texts:
                return None
            return qvec[None, :] if len(texts) == 1 else np.stack([vectors[t] for t in texts])

        goal_vectors = _stack(goals)
        if planned is None and goal_vectors is not None and len(goals) > 1:
            asks = self._asking_goals(goals, goal_vectors)  # not the ones that give arguments
            goals, goal_vectors = [goals[i] for i in asks], goal_vectors[asks]

        return _QueryState(
            qvec,
            cands,
            zs,
            bm25_learned,
            bm_max,
            cos_max,
            cluster,
            far,
            note,
            neighbours,
            _stack(parts),
            len(goals),
            goals_from,
            goals=goal_vectors,
            media=request_media(query),
            lead_weights=lead_weights,
            neighbour_plans=neighbour_plans,
            bm25_unranked=k_b,
        )

    # --------------------------------------------------------------------- planned sub-goals
    def _plan_cache(self) -> LRUCache[str, tuple[tuple[str, ...] | None, str]]:
        with _PLANS_LOCK:
            if self._plans is None:
                self._plans = LRUCache(maxsize=PLANS_KEPT)
            return self._plans

    def _kept_plan(self, query: str) -> tuple[tuple[str, ...] | None, str] | None:
        cache = self._plan_cache()
        with _PLANS_LOCK:
            return cache.get(query)

    def _plan_search(self, functional_query: str) -> list[tuple[str, str]]:
        """A planner's feedback: the tools most similar to its functional query."""
        assert self.encoder_ is not None and self.tool_embeddings_ is not None
        sims = self.tool_embeddings_ @ self.encoder_.encode([functional_query])[0]
        top = np.argsort(-sims, kind="stable")[:PLAN_SEARCH_K]
        tools = self.fit_tools_
        return [(tools[int(i)].name, tools[int(i)].description[:200]) for i in top]

    def _keep_plan(
        self, query: str, plan: Any, error: Exception | None
    ) -> tuple[tuple[str, ...] | None, str]:
        """Keep (and return) a request's sub-goals from `plan`, or the clauses on `error`."""
        goals = tuple(g.strip() for g in (plan.sub_goals if plan else ()) if g.strip())
        if error is None and not goals:
            error = ValueError("the plan names no sub-goal")
        entry: tuple[tuple[str, ...] | None, str]
        if error is not None:
            why = f"{type(error).__name__}: {error}"
            logger.warning(
                "hybrid: the planner failed on a request (%s); its clauses are the sub-goals",
                why,
            )
            entry = (None, f"clauses (the planner failed: {why})")
        else:
            entry = (goals[:MAX_CLAUSES], "planner")
        cache = self._plan_cache()
        with _PLANS_LOCK:
            cache[query] = entry
        return entry

    def _planned_sub_goals(self, query: str) -> tuple[tuple[str, ...] | None, str]:
        """(the planner's sub-goals of `query`, or None for the clauses; where they came from).

        One planner call per request, kept (`PLANS_KEPT`); a failing planner (an error, a
        time-out, a plan with no sub-goal) is logged and the clauses are used.
        """
        if self.goal_planner is None:
            return None, "clauses"
        kept = self._kept_plan(query)
        if kept is not None:
            return kept
        try:
            plan = plan_within(
                self.goal_planner, query, self._plan_search, self.goal_planner_timeout
            )
        except Exception as exc:  # any planner failure: the clauses
            return self._keep_plan(query, None, exc)
        return self._keep_plan(query, plan, None)

    async def _aplan_sub_goals(self, query: str) -> None:
        """Plan `query` with the planner's async path ahead of `rank` (see `aprepare`)."""
        if self.goal_planner is None or self._kept_plan(query) is not None:
            return
        try:
            plan = await aplan_within(
                self.goal_planner, query, self._plan_search, self.goal_planner_timeout
            )
        except Exception as exc:  # any planner failure: the clauses
            self._keep_plan(query, None, exc)
        else:
            self._keep_plan(query, plan, None)

    def _knn(self, qs: _QueryState, history: tuple[str, ...]) -> _KnnVotes:
        """Neighbours' votes: tools left in their plans, their next call, and end-of-plan."""
        done: dict[int, int] = {}
        for h in history:
            i = self._label_index.get(h, -1)
            done[i] = done.get(i, 0) + 1
        plan_votes: dict[int, float] = {}
        next_votes: dict[int, float] = {}
        follow_votes: dict[int, float] = {}
        end_vote = end_follow = 0.0
        n = len(history)
        for (_, weight), lead_weight, plan in zip(
            qs.neighbours, qs.lead_weights, qs.neighbour_plans, strict=True
        ):
            if len(plan) >= n and _same_calls(plan[:n], done):
                # the calls so far are this plan's first calls: it says what comes next, as
                # far as its request stands out from the request's typical demonstration
                if len(plan) > n:
                    follow_votes[plan[n]] = follow_votes.get(plan[n], 0.0) + lead_weight
                    end_follow -= lead_weight
                else:
                    end_follow += lead_weight
            left = dict(done)
            remaining = []
            for t in plan:
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
        return _KnnVotes(plan_votes, next_votes, end_vote, follow_votes, end_follow)

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
        """Both DTDR-L models' probabilities over their (shared) labels for this step.

        The logits are the products of the models' column blocks with the step's input
        ``[query | last call | 2nd last | ... | mean of calls | empty flags, length]``
        (`DTDRL._structured`), each made from kept parts: the query's block once per query, a
        call's block once per (position, tool), the mean as the mean of the calls' kept
        products with the mean block, the flags and length once per history length. After one
        call the mean of the calls is the last call: one product, not two. A call DTDR-L has
        no embedding for is a zero block, as in `_structured`.
        """
        if self.linear_ is None or self.linear_fine_ is None:
            return None
        models = (self.linear_, self.linear_fine_)
        dim = len(qs.qvec)
        blocks, merged = self._linear_blocks(models, dim)
        kept = qs.linear_query
        if kept is None or kept[0][0] is not models[0] or kept[0][1] is not models[1]:
            first = [b[0][1] @ qs.qvec + m.bias_ for b, m in zip(blocks, models, strict=True)]
            kept = ((models[0], models[1]), first)
            qs.linear_query = kept
        out = [logits.copy() for logits in kept[1]]
        n = len(history)
        positions = self.linear_._positions
        mean_at = positions + 1  # [query | last | ... | mean | flags, length]
        one_call = n == 1 and merged is not None
        if len(blocks[0]) != positions + 3:  # flags wider than a block: the plain product
            x = self.linear_._structured(qs.qvec[None, :], [history])[0]
            return softmax(models[0].weight_ @ x + models[0].bias_), softmax(
                models[1].weight_ @ x + models[1].bias_
            )
        embedded = {h for h in history if self.linear_.tool_embedding(h) is not None}
        calls = self._linear_calls(models)
        for i, total in enumerate(out):
            model_blocks = blocks[i]
            for j in range(1, min(positions, n) + 1):
                name = history[-j]
                if name in embedded:
                    fold = one_call and j == 1
                    key = (i, j, fold, name)
                    total += self._linear_call_product(calls, key, model_blocks, merged)
            if n and not one_call and embedded:
                mean = np.zeros_like(total)
                for h in history:
                    if h in embedded:
                        key = (i, mean_at, False, h)
                        mean += self._linear_call_product(calls, key, model_blocks, None)
                total += mean / np.float32(n)
            key = (i, mean_at + 1, False, str(n))
            total += self._linear_call_product(calls, key, model_blocks, None)
        return softmax(out[0]), softmax(out[1])

    def _linear_call_product(
        self,
        calls: dict[tuple[int, int, bool, str], np.ndarray],
        key: tuple[int, int, bool, str],
        model_blocks: list[tuple[slice, np.ndarray]],
        merged: list[np.ndarray] | None,
    ) -> np.ndarray:
        """One kept block product of `_linear_probs`, made on first use.

        `key` is (model, block, folded, what): a call's tool at a position or in the mean
        block, or the history length at the flags' block.
        """
        product = calls.get(key)
        if product is not None:
            return product
        i, j, fold, what = key
        if j == len(model_blocks) - 1:  # the empty flags and the length
            n = int(what)
            positions = len(model_blocks) - 3
            tail = np.zeros(positions + 1, dtype=np.float32)
            tail[n:positions] = 1.0
            tail[-1] = np.log1p(n)
            product = model_blocks[j][1] @ tail
        else:
            assert self.linear_ is not None
            vec = self.linear_.tool_embedding(what)
            assert vec is not None
            product = (merged[i] if fold and merged else model_blocks[j][1]) @ vec
        if (len(calls) + 1) * product.nbytes > LINEAR_CALLS_BYTES:
            calls.clear()
        calls[key] = product
        return product

    def _linear_calls(
        self, models: tuple[DTDRL, DTDRL]
    ) -> dict[tuple[int, int, bool, str], np.ndarray]:
        """Kept products of a call's embedding with a DTDR-L position block (for `models`)."""
        kept = self._linear_call_products
        if kept is None or kept[0][0] is not models[0] or kept[0][1] is not models[1]:
            kept = ((models[0], models[1]), {})
            self._linear_call_products = kept
        return kept[1]

    def _linear_blocks(
        self, models: tuple[DTDRL, DTDRL], dim: int
    ) -> tuple[list[list[tuple[slice, np.ndarray]]], list[np.ndarray] | None]:
        """The two DTDR-L `models`' weights cut into contiguous column blocks of `dim` (kept).

        A block of a row-major weight matrix is a strided view that the product would copy at
        every step; contiguous copies, made once per fitted model, are read as they are. Also
        returned: each model's last-call block plus its mean block (None if the layout has no
        such pair), for a step after one call, where the two are the same vector. All are kept
        in one tuple with the models they came from, so a refit never mixes them.
        """
        kept = self._linear_cut
        if kept is None or kept[0][0] is not models[0] or kept[0][1] is not models[1]:
            cut = []
            for m in models:
                width = m.weight_.shape[1]
                cut.append(
                    [
                        (sl, np.ascontiguousarray(m.weight_[:, sl]))
                        for sl in (slice(a, min(a + dim, width)) for a in range(0, width, dim))
                    ]
                )
            mean_at = models[0]._positions + 1
            merged = (
                [np.ascontiguousarray(c[1][1] + c[mean_at][1]) for c in cut]
                if all(len(c) > mean_at and c[1][1].shape == c[mean_at][1].shape for c in cut)
                else None
            )
            kept = ((models[0], models[1]), cut, merged)
            self._linear_cut = kept
        return kept[1], kept[2]

    def _linear_rows(self) -> np.ndarray:
        """Each label's index among DTDR-L's labels, or -1 (kept with the map it inverts)."""
        kept = self._linear_inverse
        if kept is None or kept[0] is not self._linear_map:
            rows = np.full(len(self.labels_), -1, dtype=np.int64)
            rows[self._linear_map] = np.arange(len(self._linear_map))
            kept = (self._linear_map, rows)
            self._linear_inverse = kept
        return kept[1]

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
        chains = (cl_labels, cl_p, cl_support, all_labels, all_p, all_support)
        lps = self._linear_probs(qs, history)
        if lps is not None:
            mean = 0.5 * (lps[0] + lps[1])
            k = min(L_TOP, len(mean))
            top = np.argpartition(-mean, k - 1)[:k]
            extra.append(self._linear_map[top])
        votes = self._knn(qs, history)
        plan_votes = votes.plan
        if plan_votes:
            extra.append(np.fromiter(plan_votes, dtype=np.int64, count=len(plan_votes)))
        cands = labels = qs.candidates
        pos = _row_buffer(end + 1)  # label -> row of x (-1: not a candidate)
        pos[cands] = np.arange(len(cands))
        try:
            if extra:  # the learned parts' tools beyond the request's candidates, sorted, once
                ids = np.sort(np.concatenate(extra))
                fresh = pos[ids] < 0  # not among the request's candidates
                fresh[1:] &= ids[1:] != ids[:-1]  # each once
                added = ids[fresh & (ids != end)]
                if len(added):
                    cands = np.concatenate([cands, added])
            labels = np.append(cands, end)
            pos[labels] = np.arange(len(labels))
            x = self._feature_matrix(qs, history, cands, pos, votes, lps, chains)
        finally:
            pos[labels] = -1  # the buffer is the thread's: leave it all -1 for the next step
        return labels, x

    def _feature_matrix(
        self,
        qs: _QueryState,
        history: tuple[str, ...],
        cands: np.ndarray,
        pos: np.ndarray,
        votes: _KnnVotes,
        lps: tuple[np.ndarray, np.ndarray] | None,
        chains: tuple[np.ndarray, np.ndarray, float, np.ndarray, np.ndarray, float],
    ) -> np.ndarray:
        """The feature matrix of a step's candidates, end-of-plan last (`_step_features`)."""
        end = len(self.labels_) - 1
        cl_labels, cl_p, cl_support, all_labels, all_p, all_support = chains
        plan_votes = votes.plan
        n_c = len(cands)
        x = np.zeros((n_c + 1, len(FEATURES)), order="F")
        assert self.tool_embeddings_ is not None
        sims = _StepSims.of(self.tool_embeddings_, qs, cands, self._embedded_rows(history))
        # zero-shot
        n_q = len(qs.candidates)
        x[:n_q, _F["bm25_norm"]] = qs.zero_shot[:, 0]
        x[:n_q, _F["bm25_rank"]] = qs.zero_shot[:, 1]
        x[:n_q, _F["dense_rel"]] = qs.zero_shot[:, 2]
        x[:n_q, _F["dense_rank"]] = qs.zero_shot[:, 3]
        if n_c > n_q:
            added = cands[n_q:]
            x[n_q:n_c, _F["bm25_norm"]] = self._learned_bm25(qs, added)
            x[n_q:n_c, _F["bm25_rank"]] = -np.log1p(qs.bm25_unranked)
            x[n_q:n_c, _F["dense_rel"]] = sims.added_tools @ qs.qvec - qs.cos_max
            x[n_q:n_c, _F["dense_rank"]] = -np.log1p(self.candidates)
        counts = self.tool_counts_[cands]
        unseen = (counts == 0).astype(np.float64)
        x[:n_c, _F["unseen"]] = unseen
        x[:n_c, _F["bm25_norm_unseen"]] = x[:n_c, _F["bm25_norm"]] * unseen
        x[:n_c, _F["dense_rel_unseen"]] = x[:n_c, _F["dense_rel"]] * unseen
        x[:n_c, _F["log_count"]] = np.log1p(counts)
        # learned
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
                rows = pos[chain_labels]
                vals = np.log1p(np.asarray(chain_p, dtype=np.float64) / CHAIN_EPS)
                is_end = np.asarray(chain_labels) == end
                x[rows[is_end], _F[end_name]] = vals[is_end]
                tool_rows, tool_vals = rows[~is_end], vals[~is_end]
                for name, factor in cols:
                    x[tool_rows, _F[name]] = tool_vals * factor
        if lps is not None:
            linear_rows = self._linear_rows()
            at, end_at = linear_rows[cands], linear_rows[end]
            known = at >= 0
            log_floor = np.log(L_FLOOR)
            for lp, col, end_col in (
                (lps[0], _F["dtdr_l"], _F["end_dtdr_l"]),
                (lps[1], _F["dtdr_l_fine"], _F["end_dtdr_l_fine"]),
            ):
                # log(max(p, floor)) - log(floor) of each candidate DTDR-L knows, else 0
                logs = np.log(np.maximum(lp[at], L_FLOOR)) - log_floor
                x[:n_c, col] = np.where(known, logs, 0.0)
                x[n_c, end_col] = (
                    np.log(max(lp[end_at], L_FLOOR)) - log_floor if end_at >= 0 else 0.0
                )
        if history:
            hist_rows = [self._label_index.get(h, -1) for h in history]
            for h in hist_rows:
                if 0 <= h < end and pos[h] >= 0:
                    x[pos[h], _F["in_history"]] += 1.0
            last = hist_rows[-1]
            if 0 <= last < len(self.fit_tools_):
                x[:n_c, _F["last_call_sim"]] = sims.dot(self.tool_embeddings_[last])
        self._clause_features(qs, history, sims, x)
        self._zero_shot_features(qs, history, cands, sims, x, demos_go_on=votes.end_follow < 0)
        x[n_c, _F["end_n_calls"]] = np.log1p(len(history))
        x[n_c, _F["end_first_step"]] = float(not history)
        x[n_c, _F["end_knn"]] = votes.end
        # the neighbours may hold a stop back, not bring one forward (`_KnnVotes`)
        x[n_c, _F["end_knn_follow"]] = min(votes.end_follow, 0.0)
        for tool_votes, col in (
            (plan_votes, _F["knn_plan"]),
            (votes.next, _F["knn_next"]),
            (votes.follow, _F["knn_follow"]),
        ):
            if tool_votes:
                voted = np.fromiter(tool_votes, dtype=np.int64, count=len(tool_votes))
                at = pos[voted]
                keep = (voted != end) & (at >= 0)
                values = np.fromiter(tool_votes.values(), dtype=np.float64, count=len(voted))
                x[at[keep], col] = values[keep]
        return x

    def _clause_features(
        self, qs: _QueryState, history: tuple[str, ...], step: _StepSims, x: np.ndarray
    ) -> None:
        """Fill the `clause_*` columns of the candidates' rows of `x` (in place).

        `clause_rel`: the candidate's best similarity to any clause of the request.
        `clause_open`: the same, each clause discounted by how well the calls so far already
        match it (a sub-goal that is done). `clause_next`: similarity to the clause whose
        position is the number of calls so far (requests often list steps in order).
        """
        if qs.clauses is None:  # clauses=False
            return
        sims = step.goals  # (candidates, clauses)
        if not sims.size:
            return
        n_c = len(sims)
        x[:n_c, _F["clause_rel"]] = sims.max(axis=1)
        covered = step.calls.max(axis=0) if len(step.calls) else np.zeros(sims.shape[1])
        x[:n_c, _F["clause_open"]] = (sims * (1.0 - np.clip(covered, 0.0, 1.0))).max(axis=1)
        if len(history) < sims.shape[1]:
            x[:n_c, _F["clause_next"]] = sims[:, len(history)]

    def _zero_shot_features(
        self,
        qs: _QueryState,
        history: tuple[str, ...],
        cands: np.ndarray,
        step: _StepSims,
        x: np.ndarray,
        *,
        demos_go_on: bool = False,
    ) -> None:
        """Fill the columns of the zero-shot model against the calls so far (in place).

        `open_sub_goal_rank` and `graph_rank` are ``-log(1 + rank)`` of the candidate by the
        open sub-goals' probability of it (`_open_sub_goals`) and by its edge from the last
        call (`_graph_rank`); each is 0 for every candidate when it has no evidence (no open
        sub-goal, no edge from the last call). `spent` gives a called tool the last request
        ranks any tool can have (its relevance to the request is spent; not the last
        candidate's, which on a small catalogue can be better than a tool BM25 does not
        match at all): only an open sub-goal or an edge brings it back.
        `artefact_flow` is the candidate's `ArtefactFlow.flow`: +1 when it takes a file the
        request names that no call has taken, -1 when it needs a media kind nothing gives.
        `request_after_call` is the request's ranks after spending, at steps after the first
        call (the prior weighs them -0.5: the request counts half once work has begun).
        `end_zero_shot`
        (end-of-plan's row) makes end-of-plan's probability under
        the prior weights the zero-shot stop rule's (`stop_probability`). The rule yields to
        the demonstrations where the closest ones whose first calls are the calls made so far
        mostly go on (`demos_go_on`, `_KnnVotes.end_follow` below 0): the calls made are then
        counted as one short of the sub-goals stated (a sub-goal that still asks for the last
        call's output takes one call off the count).
        """
        n_c = len(cands)
        open_sim = self._open_sub_goals(step)
        if open_sim is not None:
            rank = np.empty(n_c)
            rank[np.argsort(-open_sim, kind="stable")] = np.arange(n_c)
            x[:n_c, _F["open_sub_goal_rank"]] = -np.log1p(rank)
        graph_rank = self._graph_rank(history, cands)
        if graph_rank is not None:
            scale = GIVEN_GRAPH_SCALE if self.graph is not None else 1.0
            x[:n_c, _F["graph_rank"]] = -scale * np.log1p(graph_rank)
        flow = self._artefact_flow()
        if flow:
            available, untaken = flow.state(qs.media, history)
            x[:n_c, _F["artefact_flow"]] = flow.flow(self._label_needs()[cands], available, untaken)
        called = x[:n_c, _F["in_history"]] > 0
        request = x[:n_c, _F["bm25_rank"]] + x[:n_c, _F["dense_rank"]]
        worst = -2.0 * np.log1p(max(n_c, self.candidates))  # the last rank by both
        x[:n_c, _F["spent"]] = np.where(called, worst - request, 0.0)
        if history:  # the request's ranks after spending (the prior weighs them -0.5)
            x[:n_c, _F["request_after_call"]] = np.where(called, worst, request)
        fused = x[:n_c] @ _PRIOR
        done = len(history)
        if done >= qs.n_goals and demos_go_on:
            done = qs.n_goals - 1  # the closest demonstrations that made these calls go on
        elif done >= qs.n_goals and self._pending(qs, history, cands, step, called):
            done -= 1  # a sub-goal still asks for a tool that takes the last call's output
        p_end = min(max(stop_probability(qs.n_goals, done), 1e-9), 1.0 - 1e-9)
        top = float(fused.max()) if n_c else 0.0
        log_mass = top + float(np.log(np.exp(fused - top).sum())) if n_c else 0.0
        x[n_c, _F["end_zero_shot"]] = float(np.log(p_end / (1.0 - p_end))) + log_mass

    def _embedded_rows(self, history: tuple[str, ...]) -> list[int]:
        """The calls' rows in the fit catalogue, in order (a tool added after fit has none)."""
        rows = (self._label_index.get(h, -1) for h in history)
        return [r for r in rows if 0 <= r < len(self.fit_tools_)]

    def _pending(
        self,
        qs: _QueryState,
        history: tuple[str, ...],
        cands: np.ndarray,
        step: _StepSims,
        called: np.ndarray,
    ) -> bool:
        """Whether a sub-goal still asks for a tool that takes the last call's output.

        That is a tool not called yet, with an edge from the last call, that is the best
        candidate for a sub-goal no call has done yet (a sub-goal is done when a call made
        matches it within `DONE_MARGIN` of its best candidate): then the plan is not done,
        whatever the count.
        """
        if not history or qs.goals is None or not self._tool_graph().has(history[-1]):
            return False
        assert self.tool_embeddings_ is not None
        waiting = (self._successor_weights(history[-1], cands) > 0) & ~called
        if not waiting.any():
            return False
        sims = step.dot(qs.goals.T)  # (candidates, sub-goals)
        top = sims.max(axis=0)
        rows = self._embedded_rows(history)
        if rows:  # the sub-goals a call made already does are not waiting
            done = (self.tool_embeddings_[rows] @ qs.goals.T).max(axis=0) >= top - DONE_MARGIN
            top = np.where(done, np.inf, top)
        return bool(((sims >= top).any(axis=1) & waiting).any())

    def _tool_graph(self) -> ToolGraph:
        """The dependency graph over the current catalogue (given, or derived; built once).

        Over the current catalogue, not the fit one: tools added after fit get their edges
        from their schemas at once (`set_tools` calls `_reset_graph` with the new catalogue;
        `fit` with the fit one).
        """
        graph = self._graph_cache
        if graph is None:
            tools = self._graph_for if self._graph_for is not None else self.fit_tools_
            if self.graph is None:
                graph = ToolGraph.from_catalogue(tools)
            else:  # unknown tools: skipped with a warning
                graph = ToolGraph.from_given(self.graph, tools, strict=False)
            self._graph_cache = graph
        return graph

    def _artefact_flow(self) -> ArtefactFlow:
        """The media needs and gives of the current catalogue's tools (built once, as the graph)."""
        if self._artefacts is None:
            tools = self._graph_for if self._graph_for is not None else self.fit_tools_
            self._artefacts = ArtefactFlow(tools)
        return self._artefacts

    def _label_needs(self) -> np.ndarray:
        """`ArtefactFlow.needs` of the labels (the fit tools, then end-of-plan's 0; kept)."""
        if self._label_needs_ is None:
            self._label_needs_ = self._artefact_flow().needs(self.labels_)
        return self._label_needs_

    def _graph_ranks(self, history: tuple[str, ...], names: Sequence[str]) -> np.ndarray:
        """`edge_ranks` of the named tools (any of the current catalogue) from the last call."""
        graph = self._tool_graph()
        if not history or not graph.has(history[-1]):
            return np.zeros(len(names))
        succ = graph.successors(history[-1])
        return edge_ranks(np.array([succ.get(n, 0.0) for n in names]))

    def _reset_graph(self, tools: Toolset) -> None:
        """Build the tool graph on `tools` from now on (what was built on them is kept)."""
        if self._graph_for is not None and tools == self._graph_for:
            return
        self._graph_cache = None
        self._graph_rows = None
        self._artefacts = None
        self._label_needs_ = None
        self._graph_for = tools
        self._successor_rows = {}

    def _successor_edges(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """`name`'s edges to the labels: (label rows, sorted; their weights), kept.

        Kept sparse: a dense row over the labels for each of up to `SUCCESSOR_ROWS_KEPT`
        tools was 800 KB apiece at 100,000 tools.
        """
        kept = self._successor_rows.get(name)
        if kept is None:
            graph = self._tool_graph()
            if self._graph_rows is None:  # the graph among the labels, as CSR arrays
                self._graph_rows = graph.adjacency(self.labels_[:-1])
            indptr, indices, weights = self._graph_rows
            i = self._label_index.get(name)
            if i is not None and i < len(indptr) - 1:
                targets = indices[indptr[i] : indptr[i + 1]]
                values = weights[indptr[i] : indptr[i + 1]]
            else:  # a tool added after fit
                pairs = [
                    (j, weight)
                    for target, weight in graph.successors(name).items()
                    if (j := self._label_index.get(target)) is not None
                ]
                targets = np.array([j for j, _ in pairs], dtype=np.int64)
                values = np.array([w for _, w in pairs], dtype=np.float64)
            order = np.argsort(targets, kind="stable")
            kept = (targets[order], values[order])
            if len(self._successor_rows) >= SUCCESSOR_ROWS_KEPT:
                self._successor_rows.clear()
            self._successor_rows[name] = kept
        return kept

    def _successor_weights(self, name: str, rows: np.ndarray) -> np.ndarray:
        """The weights of `name`'s edges to the labels at `rows` (0 where there is none)."""
        targets, values = self._successor_edges(name)
        if not len(targets):
            return np.zeros(len(rows))
        at = np.minimum(np.searchsorted(targets, rows), len(targets) - 1)
        return np.where(targets[at] == rows, values[at], 0.0)

    def _graph_rank(self, history: tuple[str, ...], cands: np.ndarray) -> np.ndarray | None:
        """`edge_ranks` of a step's candidates (label rows), through kept edge weights.

        None when no candidate has an edge from the last call (every rank 0: no evidence).
        """
        if not history or not self._tool_graph().has(history[-1]):
            return None
        weights = self._successor_weights(history[-1], cands)
        if not (weights > 0).any():
            return None
        return edge_ranks(weights)

    @staticmethod
    def _open_sub_goals(step: _StepSims) -> np.ndarray | None:
        """Each candidate's best probability of being the tool a sub-goal not covered yet asks for.

        A call covers the open clause its tool matches best. Each open clause spreads a
        softmax over the candidates' similarities to it (`SUB_GOAL_TEMPERATURE`); a candidate
        keeps its best. None when every clause is covered. Without clauses
        (``clauses=False``) the request is the one sub-goal.
        """
        open_ = np.ones(step.goals.shape[1], dtype=bool)
        for call in step.calls:  # each call made, in order
            if not open_.any():
                break
            open_[int(np.argmax(np.where(open_, call, -np.inf)))] = False
        if not open_.any() or not step.n:
            return None
        sims = step.goals[:, open_]  # (candidates, open sub-goals)
        weights = np.exp((sims - sims.max(axis=0)) / SUB_GOAL_TEMPERATURE)
        return np.asarray((weights / weights.sum(axis=0)).max(axis=1))


__all__ = [
    "CHAIN_EPS",
    "DONE_MARGIN",
    "GENERIC_PARAMETER_SHARE",
    "GIVEN_GRAPH_SCALE",
    "KNN",
    "KNN_TEMPERATURE",
    "LINEAR_CALLS_BYTES",
    "L_FLOOR",
    "L_TOP",
    "PLANS_KEPT",
    "PLAN_SEARCH_K",
    "SUB_GOAL_TEMPERATURE",
    "SUCCESSOR_ROWS_KEPT",
    "CandidateSource",
    "HybridFeatures",
    "edge_ranks",
]
