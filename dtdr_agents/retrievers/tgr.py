"""Tool Graph Retriever ("tgr", Gao et al., 2025) as the DTDR paper runs it.

QTS over tool embeddings smoothed by a parameter-free graph convolution over a tool dependency
graph built from the demonstrations (or given).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from dtdr_agents.foundation.errors import ModelArrayError, ModelLoadError
from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.retrievers.similarity import SimilarityRetriever

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


class ToolGraphRetriever(SimilarityRetriever):
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

    graph: Sequence[Sequence[str]] | None = None
    graph_source: GraphSource = "calls"
    direction: GraphDirection = "to_prerequisite"

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
        if self.graph_embeddings_.ndim != 2 or len(self.graph_embeddings_) != len(self.fit_tools_):
            raise ModelArrayError("graph_embeddings", "must have one row per tool")
        if len(self.edges_) and (
            self.edges_.min() < 0 or self.edges_.max() >= len(self.fit_tools_)
        ):
            raise ModelArrayError("edges", "names a tool out of range")
        self._normalise()


__all__ = [
    "GraphDirection",
    "GraphSource",
    "ToolGraphRetriever",
    "dependency_pairs",
    "graph_convolution",
]
