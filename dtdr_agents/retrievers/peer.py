"""Peer tool retrievers from other packages, wrapped in the `ToolRetriever` contract.

`GraphToolCallRetriever` ("peer-gtc") wraps `graph-tool-call` (PyPI), a graph-structured tool
retriever whose `ToolGraph.retrieve(query, top_k, history=[...])` uses the calls so far. Install
it with `pip install 'dtdr-agents[peer]'`.
"""

from __future__ import annotations

import itertools
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from dtdr_agents.foundation.checks import check_number
from dtdr_agents.foundation.encoders import Encoder, FittableEncoder, get_encoder
from dtdr_agents.foundation.errors import ModelLoadError
from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.retrievers.base import Scores, ToolRetriever

PEER_INSTALL_HINT = "pip install 'dtdr-agents[peer]'"
"""How to install the peer retrievers' packages."""


def _import_graph_tool_call() -> Any:
    try:
        import graph_tool_call
    except ImportError as exc:
        raise ImportError(
            f"the peer-gtc retriever needs the graph-tool-call package: {PEER_INSTALL_HINT}"
        ) from exc
    return graph_tool_call


def rank_probabilities(n: int, order: Sequence[int], rest_mass: float) -> np.ndarray:
    """A distribution over `n` items from a partial ranking.

    The ranked items (`order`, best first, distinct indices) share `1 - rest_mass` in
    proportion to 1/rank; the unranked items share `rest_mass` equally, each capped at half
    the last ranked item's probability so that the ranking is kept (the excess goes back to
    the ranked items). With nothing ranked, the distribution is uniform.

    Args:
        n: Number of items.
        order: Indices of the ranked items, best first.
        rest_mass: Mass left to the unranked items, in [0, 1).

    Returns:
        Probabilities (float64, summing to 1).
    """
    idx = np.asarray(order, dtype=np.int64)
    if len(idx) == 0:
        return np.full(n, 1.0 / n)
    out = np.zeros(n, dtype=np.float64)
    n_rest = n - len(idx)
    w = 1.0 / np.arange(1, len(idx) + 1)
    ranked = w / w.sum()
    if n_rest == 0:
        out[idx] = ranked
        return out
    ranked_mass = 1.0 - rest_mass
    per_rest = min(rest_mass / n_rest, 0.5 * ranked_mass * ranked[-1])
    out[:] = per_rest
    out[idx] = ranked * ranked_mass
    total: float = out.sum()
    out /= total
    return out


class GraphToolCallRetriever(ToolRetriever):
    """The `graph-tool-call` package's retriever, as a history-aware peer baseline.

    Fit: the catalogue is added to a `graph_tool_call.ToolGraph` (`add_tools`, with its
    automatic dependency detection unless `detect_dependencies=False`); then, since the package
    learns relations rather than weights, every pair of consecutive calls seen at least
    `min_count` times in the demonstrations is added as a "precedes" relation (`learn_relations`).
    With an `encoder`, the package's embedding channel is enabled with that encoder (by
    default it uses BM25, its annotations and the graph only).

    Rank: `ToolGraph.retrieve_with_scores(query, top_k, history=calls so far)`; the package
    uses the history (it augments the query with the called tools' descriptions, seeds its
    graph search with them, and down-weights tools already called), so `uses_history` is True.
    Its ordered results become probabilities by rank (`rank_probabilities`): returned tools
    share `1 - rest_mass` in proportion to 1/rank, tools it does not return share `rest_mass`
    (each below the last returned tool). The package has no end-of-plan notion: end-of-plan
    gets its training base rate `end_rate_` and the tools the rest.

    Persistence: `ToolGraph.save`/`load` (JSON) does not reproduce rankings exactly, so the
    learned relations are saved and the graph is rebuilt from the saved catalogue at `load`
    (deterministic: same rankings). No pickle.

    Args:
        top_k: Tools requested from the package per call; None requests the whole catalogue.
        max_graph_depth: The package's graph expansion depth.
        detect_dependencies: Run the package's automatic dependency detection on the catalogue.
        learn_relations: Add "precedes" relations from the demonstrations' consecutive calls.
        min_count: Occurrences needed before a consecutive pair becomes a relation.
        encoder: Encoder spec or object for the package's embedding channel; None disables it.
        rest_mass: Probability mass of the tools the package does not return.
        prior_weight: Weight of the (uniform) prior for tools added after fit.
    """

    retriever_id: ClassVar[str] = "peer-gtc"
    accepts_no_demos: ClassVar[bool] = True  # needs no demonstrations by nature
    uses_history: ClassVar[bool] = True
    predicts_end: ClassVar[bool] = False
    uses_encoder: ClassVar[bool] = False

    top_k: int | None = None
    max_graph_depth: int = 2
    detect_dependencies: bool = True
    learn_relations: bool = True
    min_count: int = 1
    encoder: str | Encoder | None = None
    rest_mass: float = 0.05
    prior_weight: float = 0.1

    @classmethod
    def unavailable_reason(cls, **params: Any) -> str | None:
        """Why this retriever cannot run here (graph-tool-call missing), or None."""
        try:
            _import_graph_tool_call()
        except ImportError as exc:
            return str(exc)
        return None

    def _check_params(self) -> None:
        super()._check_params()
        check_number(self.top_k, "top_k", low=1, integer=True, optional=True)
        check_number(self.max_graph_depth, "max_graph_depth", low=0, integer=True)
        check_number(self.min_count, "min_count", low=1, integer=True)
        check_number(self.rest_mass, "rest_mass", low=0.0, high=1.0, high_open=True)

    def _fit(self, demos: list[Demonstration], tools: Toolset) -> None:
        _import_graph_tool_call()
        relations: list[tuple[str, str]] = []
        if self.learn_relations:
            counts = Counter(
                pair for d in demos for pair in itertools.pairwise(d.calls) if pair[0] != pair[1]
            )
            relations = sorted(p for p, c in counts.items() if c >= self.min_count)
        self.relations_ = relations
        self._build_graph()

    def _build_graph(self) -> None:
        gtc = _import_graph_tool_call()
        graph = gtc.ToolGraph()
        graph.add_tools(
            [t.to_openai() for t in self.fit_tools_],
            detect_dependencies=self.detect_dependencies,
        )
        for source, target in self.relations_:
            graph.add_relation(source, target, "precedes")
        if self.encoder is not None:
            encoder = get_encoder(self.encoder)
            if isinstance(encoder, FittableEncoder) and not encoder.is_fitted:
                # on the catalogue alone, which is saved: a loaded model embeds as the fit did
                encoder.fit([t.text() for t in self.fit_tools_])

            def embed(texts: list[str]) -> list[list[float]]:
                rows: list[list[float]] = encoder.encode(list(texts)).tolist()
                return rows

            graph.enable_embedding(embed)
        self._graph = graph

    def _score(self, query: str, history: tuple[str, ...]) -> Scores:
        k = self.top_k or len(self.fit_tools_)
        with warnings.catch_warnings():
            # the package advises an embedding index for large catalogues at every call
            warnings.filterwarnings("ignore", message=r".*without an embedding index.*")
            results = self._graph.retrieve_with_scores(
                query, top_k=k, max_graph_depth=self.max_graph_depth, history=list(history)
            )
        order: list[int] = []
        seen: set[int] = set()
        n = len(self.fit_tools_)
        for result in results:
            i = self._label_index.get(getattr(result.tool, "name", ""), -1)
            if 0 <= i < n and i not in seen:
                seen.add(i)
                order.append(i)
        probs = rank_probabilities(n, order, self.rest_mass)
        p = np.append(probs * (1.0 - self.end_rate_), self.end_rate_)
        return Scores(p, {"returned": len(order)})

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return {"relations": [list(r) for r in self.relations_]}, {}

    def _set_state(self, state: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        try:
            rel = state["relations"]
            self.relations_ = [(str(a), str(b)) for a, b in rel]
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelLoadError(f"corrupt peer-gtc state: missing or bad {exc}") from exc
        unknown = {n for pair in self.relations_ for n in pair if not self.fit_tools_.has(n)}
        if unknown:
            raise ModelLoadError(
                f"corrupt peer-gtc state: relations name tools outside the catalogue: "
                f"{sorted(unknown)[:5]}"
            )
        self._build_graph()


__all__ = ["GraphToolCallRetriever", "rank_probabilities"]
