"""The tool-retrieval baselines of the DTDR paper that do not learn from demonstrations.

DTDR paper, Section 5 ("Tool Retrieval Baselines"), Appendix C ("Other details") and Appendix
I.3, Algorithm 7:

* `RandomRetriever` ("random"): a seeded random ranking, the floor every method must beat.
* `BM25Retriever` ("bm25"): BM25 term matching of the query against tool names and descriptions.
* `QTSRetriever` ("qts"): vanilla query-tool similarity, the cosine similarity of the query's and
  the tools' sentence embeddings.
* `ToolGraphRetriever` ("tgr"): Tool Graph Retriever (Gao et al., 2025) as the DTDR paper runs
  it: QTS over tool embeddings smoothed by a parameter-free graph convolution over a tool
  dependency graph built from the demonstrations.
* `LessIsMoreRetriever` ("lim"): Less-is-More search level 1 (Paramanayakam et al., 2025): a
  chat model describes the ideal tools for the query and that description is matched by QTS.

All but `RandomRetriever` are query-only (`uses_history = False`): as Algorithm 7 says, they
rank once at the start of the task and the ranking is kept for every step. They cannot know
when a plan ends, so the end-of-plan token always gets its base rate among the training steps
(`end_rate_`) and the tools share the rest.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from dtdr_agents.foundation.chat import ChatModel, Message, invoke_text
from dtdr_agents.foundation.checks import check_number
from dtdr_agents.foundation.encoders import Encoder
from dtdr_agents.foundation.errors import ChatModelError, ModelLoadError
from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.retrievers.base import PRIOR_TEMPERATURE, Scores, ToolRetriever, softmax

BM25_INSTALL_HINT = "pip install 'dtdr-agents[bench]'"
"""How to install `bm25s`, the BM25 implementation `BM25Retriever` uses."""


def _with_end(tool_probs: np.ndarray, end_rate: float) -> np.ndarray:
    """Tool probabilities (summing to 1) scaled to `1 - end_rate`, then the end-of-plan rate."""
    return np.append(np.asarray(tool_probs, dtype=np.float64) * (1.0 - end_rate), end_rate)


def _score_why(scores: np.ndarray, label: str, fmt: str) -> Callable[[int], str]:
    """`Scores.tool_why` for a per-tool score array (the end-of-plan token has its rate)."""

    def why(i: int) -> str:
        if i >= len(scores):
            return "end-of-plan base rate"
        return f"{label}={scores[i]:{fmt}}"

    return why


def similarity_probabilities(similarities: np.ndarray, temperature: float | None) -> np.ndarray:
    """Turn query-tool similarities into a distribution over the tools.

    Args:
        similarities: One score per tool (cosine similarities, BM25 scores, ...).
        temperature: Softmax temperature: `softmax(similarities / temperature)`. None
            normalises the positive part instead, `max(s, 0) / sum(max(s, 0))`, as Algorithm 7
            normalises the retained similarities (uniform when no score is positive).

    Returns:
        Probabilities over the tools (float64, summing to 1).
    """
    s = np.asarray(similarities, dtype=np.float64)
    if temperature is None:
        w = np.clip(s, 0.0, None)
        total = w.sum()
        if total <= 0.0:
            return np.full(len(s), 1.0 / len(s))
        out: np.ndarray = w / total
        return out
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 or None, got {temperature!r}")
    return softmax(s / temperature)


# ----------------------------------------------------------------------------------- random
class RandomRetriever(ToolRetriever):
    """A seeded random ranking: the chance-level baseline.

    Every `(query, history)` gets its own random order of the fitted tools and end-of-plan,
    drawn from a generator seeded by a hash of the seed, the query and the history, so the same
    inputs always give the same ranking. Probabilities are near uniform (proportional to
    `1 + u`, `u ~ U[0, 1)`), sum to 1, and tie with probability zero.

    Args:
        prior_weight: Weight of the (uniform) prior for tools added after fit.
        seed: Seed mixed into every ranking.
    """

    retriever_id: ClassVar[str] = "random"
    accepts_no_demos: ClassVar[bool] = True  # needs no demonstrations by nature
    bench_default: ClassVar[bool] = True
    uses_encoder: ClassVar[bool] = False

    def __init__(self, *, prior_weight: float = 0.1, seed: int = 0) -> None:
        self.prior_weight = prior_weight
        self.seed = seed

    def _check_params(self) -> None:
        super()._check_params()
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):  # hashed as JSON
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    def _fit(self, demos: list[Demonstration], tools: Toolset) -> None:
        """Nothing to learn: the ranking is drawn per request."""

    def _score(self, query: str, history: tuple[str, ...]) -> Scores:
        key = json.dumps([self.seed, query, list(history)], ensure_ascii=False)
        digest = hashlib.blake2b(key.encode("utf-8"), digest_size=16).digest()
        rng = np.random.default_rng(int.from_bytes(digest, "little"))
        w = 1.0 + rng.random(len(self.labels_))
        return Scores(w / w.sum(), {"seed": self.seed})


# ------------------------------------------------------------------------------------- BM25
_IDENT_SEP = re.compile(r"[_\-./:]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def split_identifiers(text: str) -> str:
    """Split snake_case, kebab-case, dotted and camelCase identifiers into words."""
    return _CAMEL.sub(" ", _IDENT_SEP.sub(" ", text))


def _import_bm25s() -> Any:
    try:
        import bm25s
    except ImportError as exc:
        raise ImportError(
            f"the bm25 retriever needs the bm25s package: {BM25_INSTALL_HINT}"
        ) from exc
    return bm25s


class BM25Retriever(ToolRetriever):
    """BM25 over tool names and descriptions (Robertson et al., 2009), with `bm25s`.

    Each tool is the document `name: description`, with identifiers split into words
    (`get_email_address` -> `get email address`), lower-cased, English stop words removed, and
    optionally stemmed. The query is tokenised the same way; BM25 scores every tool at once
    (a sparse matrix product inside `bm25s`). The index is rebuilt from the saved catalogue on
    `load` (tokenisation and indexing are deterministic), so nothing is pickled.

    Scores become probabilities by normalisation (`temperature=None`, the default: each tool's
    share of the total score, as Algorithm 7 normalises its retained scores) or by a softmax
    with the given temperature. A query sharing no term with any tool gives a uniform
    distribution. Query-only: end-of-plan gets its training base rate `end_rate_`.

    Args:
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation.
        method: `bm25s` variant ("lucene", "robertson", "atire", "bm25l", "bm25+").
        stopwords: Stop-word list name for `bm25s.tokenize` ("english") or None to keep all.
        stemmer: A PyStemmer language (e.g. "english") to stem tokens, or None (default).
        temperature: None (normalised scores) or a softmax temperature over BM25 scores.
        prior_weight: Weight of the (uniform) prior for tools added after fit.
    """

    retriever_id: ClassVar[str] = "bm25"
    accepts_no_demos: ClassVar[bool] = True  # needs no demonstrations by nature
    bench_default: ClassVar[bool] = True
    uses_history: ClassVar[bool] = False
    predicts_end: ClassVar[bool] = False
    uses_encoder: ClassVar[bool] = False

    def __init__(
        self,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        method: str = "lucene",
        stopwords: str | None = "english",
        stemmer: str | None = None,
        temperature: float | None = None,
        prior_weight: float = 0.1,
    ) -> None:
        self.k1 = k1
        self.b = b
        self.method = method
        self.stopwords = stopwords
        self.stemmer = stemmer
        self.temperature = temperature
        self.prior_weight = prior_weight

    @classmethod
    def unavailable_reason(cls, **params: Any) -> str | None:
        """Why this retriever cannot run here (bm25s missing), or None."""
        try:
            _import_bm25s()
        except ImportError as exc:
            return str(exc)
        return None

    def _stem_function(self) -> Any:
        if self.stemmer is None:
            return None
        try:
            stemmer_module = importlib.import_module("Stemmer")
        except ImportError as exc:
            raise ImportError(
                f"stemmer={self.stemmer!r} needs PyStemmer: pip install PyStemmer"
            ) from exc
        return stemmer_module.Stemmer(self.stemmer).stemWords

    def _tokenize(self, texts: list[str], *, return_ids: bool) -> Any:
        bm25s = _import_bm25s()
        return bm25s.tokenize(
            [split_identifiers(t) for t in texts],
            lower=True,
            stopwords=self.stopwords,
            stemmer=self._stem_fn,
            return_ids=return_ids,
            show_progress=False,
        )

    def _build_index(self, tools: Toolset) -> None:
        bm25s = _import_bm25s()
        self._stem_fn = self._stem_function()
        corpus = self._tokenize([t.text() for t in tools], return_ids=True)
        index = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        index.index(corpus, show_progress=False)
        self._index = index
        self._vocab: dict[str, int] = dict(index.vocab_dict)
        self.vocabulary_size_ = len(corpus.vocab)

    def _check_params(self) -> None:
        super()._check_params()
        check_number(self.k1, "k1", low=0.0)
        check_number(self.b, "b", low=0.0, high=1.0)
        check_number(self.temperature, "temperature", low=0.0, low_open=True, optional=True)

    def _fit(self, demos: list[Demonstration], tools: Toolset) -> None:
        self._build_index(tools)

    def bm25_scores(self, query: str, *, remember: bool = True) -> np.ndarray:
        """BM25 score of every fitted tool for `query` (float64, zeros when no term matches).

        Args:
            query: The request.
            remember: Keep the scores in the per-query memo. A caller that keeps what it needs
                of them itself passes False: on large catalogues each vector is large.
        """
        self._check_fitted()
        if not remember:
            return self._compute_scores(query)
        return self._memo(query, "bm25", self._compute_scores)

    def _compute_scores(self, query: str) -> np.ndarray:
        tokens: list[str] = self._tokenize([query], return_ids=False)[0]
        ids = [self._vocab[t] for t in tokens if t in self._vocab]
        n = len(self.fit_tools_)
        if not ids:
            return np.zeros(n)
        scores = np.asarray(self._index.get_scores_from_ids(ids), dtype=np.float64)
        return scores[:n]

    def _score(self, query: str, history: tuple[str, ...]) -> Scores:
        scores = self.bm25_scores(query)
        top = float(scores.max()) if len(scores) else 0.0
        if top <= 0.0:
            probs = np.full(len(scores), 1.0 / len(scores))
            explanation: dict[str, Any] = {"bm25": "no query term in any tool (uniform)"}
        else:
            probs = similarity_probabilities(scores, self.temperature)
            explanation = {"bm25_max": round(top, 3)}
        return Scores(
            _with_end(probs, self.end_rate_),
            explanation,
            tool_why=_score_why(scores, "bm25", ".2f"),
        )

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return {"vocabulary_size": self.vocabulary_size_}, {}

    def _set_state(self, state: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        self._build_index(self.fit_tools_)
        saved = state.get("vocabulary_size")
        if saved is not None and int(saved) != self.vocabulary_size_:
            raise ModelLoadError(
                f"BM25 index rebuilt from the saved catalogue has {self.vocabulary_size_} terms, "
                f"the saved model had {saved} (another bm25s version or stop-word list?)"
            )


# -------------------------------------------------------------------------------------- QTS
class _SimilarityRetriever(ToolRetriever):
    """Query-tool similarity over (possibly transformed) tool embeddings, once per query."""

    uses_history: ClassVar[bool] = False
    predicts_end: ClassVar[bool] = False
    accepts_no_demos: ClassVar[bool] = True  # needs no demonstrations by nature
    uses_encoder: ClassVar[bool] = True

    encoder: str | Encoder | None
    temperature: float | None

    def _check_params(self) -> None:
        super()._check_params()
        check_number(self.temperature, "temperature", low=0.0, low_open=True, optional=True)

    def _search_embeddings(self) -> np.ndarray:
        """L2-normalised tool rows compared with the query (fit catalogue order)."""
        assert self.tool_embeddings_ is not None
        return self.tool_embeddings_

    def _query_embeddings(self, query: str) -> tuple[np.ndarray, dict[str, Any]]:
        """Rows that stand for the query (a tool scores its best cosine among them)."""
        return self._query_vector(query)[None, :], {}

    def similarities(self, query: str) -> np.ndarray:
        """Cosine similarity of every fitted tool to `query` (float64)."""
        self._check_fitted()
        sims: np.ndarray = self._memo(query, "similarity", self._compute_similarities)[0]
        return sims

    def _compute_similarities(self, query: str) -> tuple[np.ndarray, dict[str, Any]]:
        rows, info = self._query_embeddings(query)
        sims = rows.astype(np.float32) @ self._search_embeddings().T
        return sims.max(axis=0).astype(np.float64), info

    def _score(self, query: str, history: tuple[str, ...]) -> Scores:
        sims, info = self._memo(query, "similarity", self._compute_similarities)
        probs = similarity_probabilities(sims, self.temperature)
        explanation = {"max_cosine": round(float(sims.max()), 3), **info}
        return Scores(
            _with_end(probs, self.end_rate_),
            explanation,
            tool_why=_score_why(sims, "cosine", ".3f"),
        )


class QTSRetriever(_SimilarityRetriever):
    """Vanilla query-tool similarity (QTS): cosine of query and tool description embeddings.

    DTDR paper, Algorithm 7 with `qts_method` "vanilla": no learning from demonstrations; the
    query is embedded with the same sentence encoder as the tools (`name: description`).
    Similarities become probabilities by `softmax(cos / temperature)`; `temperature=None`
    normalises the positive similarities instead (Algorithm 7's normalisation without its
    selection threshold alpha, which belongs to tool selection, not ranking). Query-only:
    end-of-plan gets its training base rate.

    Args:
        encoder: Encoder spec or object (see `get_encoder`).
        temperature: Softmax temperature over cosine similarities, or None (normalised).
        prior_weight: Weight of the query-similarity prior for tools added after fit.
    """

    retriever_id: ClassVar[str] = "qts"
    bench_default: ClassVar[bool] = True

    def __init__(
        self,
        *,
        encoder: str | Encoder | None = "default",
        temperature: float | None = PRIOR_TEMPERATURE,
        prior_weight: float = 0.1,
    ) -> None:
        self.encoder = encoder
        self.temperature = temperature
        self.prior_weight = prior_weight

    def _fit(self, demos: list[Demonstration], tools: Toolset) -> None:
        """Nothing to learn beyond the tool embeddings `fit` computes."""


# -------------------------------------------------------------------------------------- TGR
GraphSource = Literal["calls", "edges"]
GraphDirection = Literal["to_prerequisite", "to_dependent", "undirected"]


def graph_convolution(x: np.ndarray, adjacency: Iterable[tuple[int, int]]) -> np.ndarray:
    """TGR's parameter-free graph convolution `D^-1/2 (A + I) D^-1/2 X` (TGR paper, Eq. 3).

    Args:
        x: Node features, one row per node, shape `(n, d)`.
        adjacency: The entries `(i, j)` of `A` that are 1 (row i, column j); duplicates and
            self-loops are ignored (`+ I` adds every self-loop once). `A` may be directed.

    Returns:
        `D^-1/2 (A + I) D^-1/2 X` as float64, where `D` is the diagonal degree matrix of
        `A + I` (row sums, as in Kipf and Welling, 2017): row i mixes node i with the nodes
        `A` links it to.
    """
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    pairs = sorted({(int(i), int(j)) for i, j in adjacency if int(i) != int(j)})
    edges = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    if len(edges) and (edges.min() < 0 or edges.max() >= n):
        raise ValueError(f"adjacency has an entry outside the {n} nodes")
    rows, cols = edges[:, 0], edges[:, 1]
    inv_sqrt = 1.0 / np.sqrt(1.0 + np.bincount(rows, minlength=n))  # degree of A + I
    out: np.ndarray = x * (inv_sqrt**2)[:, None]  # the self-loops of + I
    np.add.at(out, rows, (inv_sqrt[rows] * inv_sqrt[cols])[:, None] * x[cols])
    return out


def dependency_pairs(demos: Iterable[Demonstration], source: GraphSource) -> list[tuple[str, str]]:
    """The (prerequisite, dependent) tool pairs of a graph built from demonstrations.

    Args:
        demos: The demonstrations.
        source: "calls": every pair of consecutive calls (the order-1, one-cluster Markov chain
            of Algorithm 3, which Algorithm 7 uses as TGR's graph). "edges": the recorded
            dependency edges (i -> j: call j needs call i) of demonstrations that have them;
            demonstrations without edges (`edges is None`) contribute their consecutive calls,
            those with `edges == ()` (independent calls) contribute nothing.

    Returns:
        Distinct pairs of distinct tools, sorted.
    """
    pairs: set[tuple[str, str]] = set()
    for demo in demos:
        calls = demo.calls
        if source == "edges" and demo.edges is not None:
            pairs.update((calls[i], calls[j]) for i, j in demo.edges)
        else:
            pairs.update(itertools.pairwise(calls))
    return sorted((a, b) for a, b in pairs if a != b)


class ToolGraphRetriever(_SimilarityRetriever):
    """Tool Graph Retriever (TGR, Gao et al., 2025) as a query-only QTS baseline.

    The tool embeddings X are smoothed once at fit by the parameter-free graph convolution
    `D^-1/2 (A + I) D^-1/2 X` (TGR paper, Eq. 3) over a tool dependency graph; the query is then
    matched against the convolved embeddings by cosine similarity (Algorithm 7 with
    `qts_method` "tool_graph_retrieval").

    The graph, as the DTDR paper builds it for a fair comparison: from the demonstrations'
    trajectories instead of TGR's trained dependency discriminator, as the order-1, one-cluster
    dependency graph of Algorithm 3 (an edge for every pair of consecutive calls;
    `graph_source="calls"`, the default), or from the recorded dependency edges
    (`graph_source="edges"`), or given explicitly (`graph`, e.g. TaskBench's published
    `graph_desc.json` as `Dataset.tool_graph`). Edges are binary (a dependency exists or not,
    as in TGR), repeated calls of one tool add no edge (`+ I` already links a tool to itself).

    TGR's graph is directed: "if the tool t_a depends on the tool t_b, the node of t_a will be
    linked to that of t_b" (TGR paper, Section 3.2), so by default (`direction=
    "to_prerequisite"`) `A[dependent, prerequisite] = 1` and a tool's embedding mixes in the
    tools it depends on; `D` is the degree (row sums) of `A + I`. "to_dependent" reverses the
    edges; "undirected" symmetrises them.

    Args:
        graph: Explicit (source, target) tool-name pairs, where the target depends on the
            source (it consumes the source's output); replaces the graph from the
            demonstrations. Pairs naming tools outside the catalogue are skipped with a warning.
        graph_source: "calls" or "edges", when `graph` is None (see `dependency_pairs`).
        direction: "to_prerequisite" (TGR), "to_dependent" or "undirected".
        encoder: Encoder spec or object (see `get_encoder`).
        temperature: Softmax temperature over cosine similarities, or None (normalised).
        prior_weight: Weight of the query-similarity prior for tools added after fit.
    """

    retriever_id: ClassVar[str] = "tgr"
    bench_default: ClassVar[bool] = True

    def __init__(
        self,
        *,
        graph: Sequence[Sequence[str]] | None = None,
        graph_source: GraphSource = "calls",
        direction: GraphDirection = "to_prerequisite",
        encoder: str | Encoder | None = "default",
        temperature: float | None = PRIOR_TEMPERATURE,
        prior_weight: float = 0.1,
    ) -> None:
        self.graph = graph
        self.graph_source = graph_source
        self.direction = direction
        self.encoder = encoder
        self.temperature = temperature
        self.prior_weight = prior_weight

    def _graph_pairs(self, demos: list[Demonstration], tools: Toolset) -> list[tuple[str, str]]:
        if self.graph is None:
            if self.graph_source not in ("calls", "edges"):
                raise ValueError(
                    f"graph_source must be 'calls' or 'edges', got {self.graph_source!r}"
                )
            return dependency_pairs(demos, self.graph_source)
        pairs: set[tuple[str, str]] = set()
        unknown: set[str] = set()
        for pos, pair in enumerate(self.graph):
            if isinstance(pair, str) or len(pair) != 2:
                raise ValueError(f"graph[{pos}] must be a (source, target) pair, got {pair!r}")
            a, b = str(pair[0]), str(pair[1])
            missing = {n for n in (a, b) if not tools.has(n)}
            if missing:
                unknown |= missing
            elif a != b:
                pairs.add((a, b))
        if unknown:
            warnings.warn(
                f"tgr: skipped graph edges naming {len(unknown)} tools outside the catalogue "
                f"(e.g. {sorted(unknown)[:3]})",
                stacklevel=4,
            )
        return sorted(pairs)

    def _fit(self, demos: list[Demonstration], tools: Toolset) -> None:
        if self.direction not in ("to_prerequisite", "to_dependent", "undirected"):
            raise ValueError(
                "direction must be 'to_prerequisite', 'to_dependent' or 'undirected', "
                f"got {self.direction!r}"
            )
        index = self._label_index
        pairs = self._graph_pairs(demos, tools)
        edges = [(index[a], index[b]) for a, b in pairs]
        self.edges_ = np.array(edges, dtype=np.int64).reshape(-1, 2)
        assert self.tool_embeddings_ is not None
        self.graph_embeddings_ = graph_convolution(self.tool_embeddings_, self.adjacency())
        self._normalise()

    def adjacency(self) -> list[tuple[int, int]]:
        """The entries `(i, j)` of `A` equal to 1 (fit catalogue indices), per `direction`.

        `edges_` holds (prerequisite, dependent) pairs; TGR links the dependent to its
        prerequisite.
        """
        pre, dep = self.edges_[:, 0].tolist(), self.edges_[:, 1].tolist()
        if self.direction == "to_prerequisite":
            return list(zip(dep, pre, strict=True))
        if self.direction == "to_dependent":
            return list(zip(pre, dep, strict=True))
        return list(zip(dep, pre, strict=True)) + list(zip(pre, dep, strict=True))

    def _normalise(self) -> None:
        g = self.graph_embeddings_
        norms = np.linalg.norm(g, axis=1, keepdims=True)
        unit = np.divide(g, norms, out=np.zeros_like(g), where=norms > 0)
        self._unit_graph: np.ndarray = unit.astype(np.float32)

    def _search_embeddings(self) -> np.ndarray:
        return self._unit_graph

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return {"n_edges": len(self.edges_)}, {
            "edges": self.edges_,
            "graph_embeddings": self.graph_embeddings_,
        }

    def _set_state(self, state: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        try:
            self.edges_ = np.asarray(arrays["edges"], dtype=np.int64).reshape(-1, 2)
            self.graph_embeddings_ = np.asarray(arrays["graph_embeddings"], dtype=np.float64)
        except KeyError as exc:
            raise ModelLoadError(f"corrupt TGR state: missing array {exc}") from exc
        if len(self.graph_embeddings_) != len(self.fit_tools_):
            raise ModelLoadError("corrupt TGR state: graph_embeddings has the wrong number of rows")
        self._normalise()


# ------------------------------------------------------------------------------ Less-is-More
LIM_SYSTEM_PROMPT = (
    "You are a tool recommender for an AI agent that solves user requests by calling "
    "functions. Given a user request, think about the ideal set of functions (tools) the agent "
    "would need to solve it, and describe each ideal tool: a short snake_case name and one "
    "sentence saying what the tool does. Do not solve the request and do not call any tool. "
    'Answer only with JSON of the form {"tools": [{"name": "...", "description": "..."}]}, '
    "one entry per tool the request needs."
)
"""System prompt asking for the ideal tools. The DTDR paper names a "Less is More Thought
Prompt" (Algorithm 7) but does not print it (its Appendix G shows only the function-selection
and parameter-filling prompts); this one is written after Less-is-More's description of its
tool recommender (the LLM describes the ideal tools for the query, in JSON)."""

LIM_USER_PROMPT = "User request: {query}"
"""User message template; `{query}` is replaced by the user's request."""

_JSON_START = re.compile(r"[\[{]")
_MAX_JSON_TRIES = 64


def _tool_line(item: Any) -> str:
    if isinstance(item, str):
        return item.strip()
    if isinstance(item, dict):
        name = str(item.get("name") or "").strip()
        desc = str(item.get("description") or "").strip()
        return f"{split_identifiers(name)}: {desc}" if name and desc else name or desc
    return ""


def parse_ideal_tools(text: str) -> list[str]:
    """The ideal-tool descriptions in a Less-is-More answer.

    Reads the first JSON value in the answer (so code fences and surrounding prose are fine)
    that is `{"tools": [...]}`, a list, or one tool object; each tool is `{"name",
    "description"}` or a string. Returns one "name: description" string per tool. An answer
    with no such JSON is returned whole, as one description.
    """
    decoder = json.JSONDecoder()
    for n, match in enumerate(_JSON_START.finditer(text)):
        if n >= _MAX_JSON_TRIES:
            break
        try:
            data, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        items = data.get("tools", [data]) if isinstance(data, dict) else data
        if not isinstance(items, list):
            continue
        out = [line for line in map(_tool_line, items) if line]
        if out:
            return out
    stripped = text.strip()
    return [stripped] if stripped else []


class LessIsMoreRetriever(_SimilarityRetriever):
    """Less-is-More search level 1 (Paramanayakam et al., 2025) as a QTS baseline.

    Once per query, a chat model describes the ideal tools for the request (prompt:
    `LIM_SYSTEM_PROMPT`, `LIM_USER_PROMPT`); the description is embedded and the catalogue is
    ranked by cosine similarity to it (Algorithm 7 with `qts_method` "less_is_more"). The DTDR
    paper uses the same LLM for this as for function selection. The answer is cached per query
    (with the retriever's other per-query results), so the evaluation's and an agent's later
    steps cost no LLM call.

    `match="joint"` (Algorithm 7) embeds the whole answer as one text; `match="each"` embeds
    every ideal tool separately and scores a tool by its best similarity to any of them (closer
    to Less-is-More's own per-tool search). If the chat model answers with no text, the query
    itself is embedded (vanilla QTS for that query; the explanation says so).

    Any object with `invoke(messages)` works (see `dtdr_agents.foundation.chat.ChatModel`): a
    LangChain chat model, `dtdr_agents.foundation.chat.OpenAIChat`, or a test double. Without
    one, `fit` and `rank` raise `ChatModelError`; `unavailable_reason(chat_model=...)` says so
    beforehand.

    Persistence: a chat model cannot be saved; `save` records the other parameters and
    `LessIsMoreRetriever.load(path, chat_model=...)` requires one. A model loaded through the
    generic `ToolRetriever.load` needs `set_params(chat_model=...)` before ranking.

    Args:
        chat_model: The chat model that writes the ideal-tool descriptions.
        system_prompt: System message; None uses `LIM_SYSTEM_PROMPT`.
        user_prompt: User message template with `{query}`; None uses `LIM_USER_PROMPT`.
        match: "joint" or "each" (see above).
        encoder: Encoder spec or object (see `get_encoder`).
        temperature: Softmax temperature over cosine similarities, or None (normalised).
        prior_weight: Weight of the query-similarity prior for tools added after fit.
    """

    retriever_id: ClassVar[str] = "lim"
    bench_default: ClassVar[bool] = True
    runtime_params: ClassVar[tuple[str, ...]] = ("chat_model",)

    def __init__(
        self,
        *,
        chat_model: ChatModel | None = None,
        system_prompt: str | None = None,
        user_prompt: str | None = None,
        match: Literal["joint", "each"] = "joint",
        encoder: str | Encoder | None = "default",
        temperature: float | None = PRIOR_TEMPERATURE,
        prior_weight: float = 0.1,
    ) -> None:
        self.chat_model = chat_model
        self.system_prompt = system_prompt
        self.user_prompt = user_prompt
        self.match = match
        self.encoder = encoder
        self.temperature = temperature
        self.prior_weight = prior_weight

    @classmethod
    def unavailable_reason(cls, **params: Any) -> str | None:
        """Why this retriever cannot run with these parameters (no chat model), or None."""
        if params.get("chat_model") is None:
            return (
                "lim (Less-is-More) needs a chat model: pass chat_model= (a LangChain chat "
                "model, dtdr_agents.foundation.chat.OpenAIChat(...), or any object with "
                "invoke(messages))"
            )
        return None

    def _require_chat_model(self) -> ChatModel:
        model = self.chat_model
        if model is None:
            reason = self.unavailable_reason(chat_model=None)
            raise ChatModelError(f"{reason}; after load, use set_params(chat_model=...)")
        if not callable(getattr(model, "invoke", None)):
            raise ChatModelError(
                f"chat_model must have an invoke(messages) method, got {type(model).__name__}"
            )
        return model

    def _fit(self, demos: list[Demonstration], tools: Toolset) -> None:
        self._require_chat_model()
        if self.match not in ("joint", "each"):
            raise ValueError(f"match must be 'joint' or 'each', got {self.match!r}")
        if "{query}" not in (self.user_prompt or LIM_USER_PROMPT):
            raise ValueError("user_prompt must contain '{query}'")

    def messages(self, query: str) -> list[Message]:
        """The chat messages sent for `query`."""
        user = (self.user_prompt or LIM_USER_PROMPT).replace("{query}", query)
        return [("system", self.system_prompt or LIM_SYSTEM_PROMPT), ("human", user)]

    def ideal_tools(self, query: str) -> str:
        """The chat model's ideal-tool answer for `query` (asked once, then cached)."""
        self._check_fitted()
        return self._memo(query, "ideal_tools", self._ask)

    def _ask(self, query: str) -> str:
        return invoke_text(self._require_chat_model(), self.messages(query))

    def _query_embeddings(self, query: str) -> tuple[np.ndarray, dict[str, Any]]:
        assert self.encoder_ is not None
        descriptions = parse_ideal_tools(self.ideal_tools(query))
        if not descriptions:
            vec = self._query_vector(query)[None, :]
            return vec, {"ideal_tools": "(no answer: embedded the query)"}
        texts = ["\n".join(descriptions)] if self.match == "joint" else descriptions
        shown = "; ".join(descriptions)
        return self.encoder_.encode(texts), {
            "ideal_tools": shown if len(shown) <= 200 else shown[:197] + "..."
        }

    def _score(self, query: str, history: tuple[str, ...]) -> Scores:
        self._require_chat_model()
        return super()._score(query, history)

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        model = self.chat_model
        return {"chat_model": None if model is None else repr(model)[:200]}, {}

    def _set_state(self, state: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """Nothing to restore: the chat model is passed to `load`."""

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        chat_model: ChatModel | None = None,
        tools: Toolset | Iterable[Any] | None = None,
        encoder: str | Encoder | None = None,
        allow_catalogue_change: bool = False,
        allow_encoder_change: bool = False,
        params: Mapping[str, Any] | None = None,
    ) -> LessIsMoreRetriever:
        """Load a saved Less-is-More retriever; `chat_model` is required (it is not saved).

        Raises:
            ChatModelError: If `chat_model` is None.
        """
        chat_model = chat_model or (params or {}).get("chat_model")
        if chat_model is None:
            raise ChatModelError(
                "LessIsMoreRetriever.load needs chat_model=...: a chat model is not saved "
                "with the retriever"
            )
        model = super().load(
            path,
            tools=tools,
            encoder=encoder,
            allow_catalogue_change=allow_catalogue_change,
            allow_encoder_change=allow_encoder_change,
            params={**(params or {}), "chat_model": chat_model},
        )
        assert isinstance(model, LessIsMoreRetriever)
        return model


__all__ = [
    "BM25Retriever",
    "LessIsMoreRetriever",
    "QTSRetriever",
    "RandomRetriever",
    "ToolGraphRetriever",
    "dependency_pairs",
    "graph_convolution",
    "parse_ideal_tools",
    "similarity_probabilities",
]
