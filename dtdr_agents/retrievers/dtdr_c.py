"""DTDR-C: k-means over demonstration queries + per-cluster N-order Markov chains.

DTDR paper, Section 4, Appendix C and Algorithms 3-4. Static DR (ToolNet) is the special case of
one cluster and order 1.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

import numpy as np

from dtdr_agents.foundation.checks import check_number
from dtdr_agents.foundation.encoders import Encoder, VocabularyCheck
from dtdr_agents.foundation.errors import ModelArrayError, ModelLoadError
from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.retrievers.base import Scores, ToolRetriever, check_quantile, check_threshold
from dtdr_agents.retrievers.markov import GLOBAL, UNSEEN, MarkovTables, history_key


def _loo_centroid_distances(x: np.ndarray, labels: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Each point's distance to its cluster's centroid computed without that point.

    A held-out estimate of how far new in-distribution queries fall from their centroid;
    singleton clusters use the nearest other centroid.
    """
    k = len(centroids)
    sizes = np.bincount(labels, minlength=k).astype(np.float64)
    sums = centroids * sizes[:, None]
    out = np.empty(len(x))
    for i, (row, c) in enumerate(zip(x, labels, strict=True)):
        n = sizes[c]
        if n > 1:
            out[i] = np.linalg.norm(row - (sums[c] - row) / (n - 1))
        else:
            d = np.linalg.norm(centroids - row, axis=1)
            d[c] = np.inf
            out[i] = d.min() if k > 1 else 0.0
    return out


MAX_ORDER = 32
"""Longest Markov history key (the paper uses 3)."""


class DTDRC(ToolRetriever):
    """Dynamic Tool Dependency Retrieval, clustering variant (DTDR-C).

    The query picks a k-means cluster of demonstration queries; that cluster's N-order Markov
    chain over the call history gives the next-tool distribution (end-of-plan included).

    Args:
        n_clusters: Number of k-means clusters, or "auto" for one per `demos_per_cluster`
            demonstrations (the paper's best: 1/10 of the demonstrations).
        order: History length N of the Markov chains (paper's best: 3); 0 ignores the history
            (the cluster's next-tool frequencies).
        weighted: Empirical transition probabilities (True) or uniform over the successors.
        backoff: When the history key is unseen in the cluster, try shorter keys, then the
            chains of all demonstrations, then a query-similarity prior. False follows the
            paper (an unseen key gives no information: a uniform distribution).
        encoder: Encoder spec or object for the queries (see `get_encoder`).
        demos_per_cluster: Used when `n_clusters="auto"`.
        ood_quantile: Fall back to all tools when the query is farther from its centroid than
            this quantile of held-out demonstration distances; None disables the check.
        prior_weight: Weight of the query-similarity prior for tools added after fit.
        seed: Seed of k-means.
    """

    retriever_id: ClassVar[str] = "dtdr-c"
    bench_default: ClassVar[bool] = True
    variants: ClassVar[Mapping[str, Mapping[str, Any]]] = {"dtdr-c-paper": {"backoff": False}}
    """`dtdr-c-paper`: no backoff, as in the paper (an unseen history key is uniform)."""

    n_clusters: int | Literal["auto"] = "auto"
    order: int = 3
    weighted: bool = True
    backoff: bool = True
    encoder: str | Encoder | None = "default"
    demos_per_cluster: int = 10
    ood_quantile: float | None = 0.99
    prior_weight: float = 0.1
    seed: int = 0

    def _check_params(self) -> None:
        super()._check_params()
        check_number(self.order, "order", low=0, high=MAX_ORDER, integer=True)
        check_quantile(self.ood_quantile)
        if self.n_clusters == "auto":
            check_number(self.demos_per_cluster, "demos_per_cluster", low=1, integer=True)
        elif isinstance(self.n_clusters, bool) or not isinstance(self.n_clusters, int | np.integer):
            raise ValueError(
                f"n_clusters must be 'auto' or an integer >= 1, got {self.n_clusters!r}"
            )
        else:
            check_number(self.n_clusters, "n_clusters", low=1, integer=True)

    def _n_clusters(self, n_demos: int) -> int:
        """How many clusters to fit for `n_demos` demonstrations."""
        if self.n_clusters == "auto":
            return max(1, round(n_demos / self.demos_per_cluster))
        return int(self.n_clusters)

    def _orders(self) -> tuple[int, ...]:
        """Chain orders to count: 1..N with backoff, else only N."""
        return tuple(range(1, self.order + 1)) if self.backoff and self.order > 0 else (self.order,)

    def _fit(self, demos: list[Demonstration], tools: Toolset) -> None:
        k = self._n_clusters(len(demos))
        assert self.encoder_ is not None
        if k == 1 and self.ood_quantile is None:  # static DR: the queries are not needed
            labels = np.zeros(len(demos), dtype=np.int64)
            self.centroids_ = np.zeros((1, self.encoder_.dim))
            self.ood_threshold_: float | None = None
        else:
            queries = self.encoder_.encode([d.query for d in demos]).astype(np.float64)
            k = min(k, len(np.unique(queries.round(6), axis=0)))
            if k == 1:
                labels = np.zeros(len(demos), dtype=np.int64)
                self.centroids_ = queries.mean(axis=0, keepdims=True)
            else:
                from sklearn.cluster import KMeans

                km = KMeans(n_clusters=k, n_init=1, random_state=self.seed).fit(queries)
                labels = km.labels_.astype(np.int64)
                self.centroids_ = km.cluster_centers_
            self.ood_threshold_ = None
            if self.ood_quantile is not None and len(demos) > 1:
                dist = _loo_centroid_distances(queries, labels, self.centroids_)
                self.ood_threshold_ = float(np.quantile(dist, self.ood_quantile))
        self.vocab_check_ = VocabularyCheck.for_encoder(
            self.encoder_, [d.query for d in demos], [t.text() for t in tools], self.ood_quantile
        )
        self.n_clusters_ = len(self.centroids_)
        self._centroid_sq = (self.centroids_**2).sum(axis=1)
        self.cluster_sizes_ = np.bincount(labels, minlength=self.n_clusters_)
        orders = self._orders()
        tables = MarkovTables(len(self.labels_), orders)
        end = len(self.labels_) - 1
        for demo, group in zip(demos, labels.tolist(), strict=True):
            seq = [self._label_index[c] for c in demo.calls]
            tables.add_sequence(group, seq, end)
            if self.backoff and self.n_clusters_ > 1:
                tables.add_sequence(GLOBAL, seq, end)
        self.tables_ = tables.freeze()

    def assign_cluster(self, query: str) -> tuple[int, float]:
        """The nearest cluster of `query` and its Euclidean distance to the centroid."""
        self._check_fitted()
        if self.n_clusters_ == 1 and self.ood_threshold_ is None:
            return 0, 0.0  # one cluster and no OOD check: the query is not needed
        return self._memo(query, "cluster", self._nearest_centroid)

    def _nearest_centroid(self, query: str) -> tuple[int, float]:
        q = self._query_vector(query).astype(np.float64)
        d2 = self._centroid_sq - 2.0 * (self.centroids_ @ q) + float(q @ q)
        c = int(np.argmin(d2))
        return c, float(np.sqrt(max(d2[c], 0.0)))

    def _score(self, query: str, history: tuple[str, ...]) -> Scores:
        cluster, distance = self.assign_cluster(query)
        seq = [self._label_index.get(h, UNSEEN) for h in history]
        names = self.labels_
        groups = [cluster] + ([GLOBAL] if self.backoff and self.n_clusters_ > 1 else [])
        orders = sorted(self._orders(), reverse=True)
        probs = None
        level = ""
        key: tuple[int, ...] = ()
        why: Callable[[int], str] | None = None
        for group in groups:
            for order in orders:
                key = history_key(seq, order)
                probs = self.tables_.distribution(group, key, weighted=self.weighted)
                if probs is not None:
                    level = f"{'cluster' if group >= 0 else 'all demos'} order {order}"
                    why = self._count_why(group, key)
                    break
            if probs is not None:
                break
        if probs is None:
            if self.backoff:
                probs, level = self.similarity_prior(query), "query-similarity prior"
                why = self._prior_why(query)
            else:
                probs = np.full(len(names), 1.0 / len(names))
                level = "unseen history key (uniform)"
        shown = tuple(
            "start" if i < 0 and i != UNSEEN else ("?" if i == UNSEEN else names[i]) for i in key
        )
        explanation: dict[str, Any] = {"cluster": cluster, "key": shown, "source": level}
        ood = None
        if self.ood_threshold_ is not None and distance > self.ood_threshold_:
            ood = (
                f"query is {distance:.3f} from its cluster centroid, beyond the "
                f"{self.ood_quantile:.0%} quantile of demonstrations ({self.ood_threshold_:.3f})"
            )
        if ood is None and self.vocab_check_ is not None:
            ood = self._memo(query, "vocabulary", self._vocabulary_reason)
        return Scores(probs, explanation, ood, tool_why=why)

    def _count_why(self, group: int, key: tuple[int, ...]) -> Callable[[int], str]:
        """`Scores.tool_why`: how often a label followed `key` in the demonstrations."""
        hit = self.tables_.lookup(group, key)
        assert hit is not None  # the key was found
        labels, counts = hit
        total = float(counts.sum())

        def why(i: int) -> str:
            found = np.flatnonzero(labels == i)
            seen = float(counts[found[0]]) if len(found) else 0.0
            return f"next after the key {seen:g} of {total:g} times"

        return why

    def _prior_why(self, query: str) -> Callable[[int], str]:
        """`Scores.tool_why` for the similarity prior: the tool's cosine to the request."""
        qvec: list[np.ndarray] = []  # encoded at the first call, then reused

        def why(i: int) -> str:
            if i >= len(self.fit_tools_) or self.tool_embeddings_ is None:
                return "end-of-plan base rate"
            if not qvec:
                qvec.append(self._query_vector(query))
            return f"cosine={float(self.tool_embeddings_[i] @ qvec[0]):.3f}"

        return why

    def _vocabulary_reason(self, query: str) -> str | None:
        return None if self.vocab_check_ is None else self.vocab_check_.reason(self.encoder_, query)

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        state = {
            "n_clusters": self.n_clusters_,
            "ood_threshold": self.ood_threshold_,
            "vocab_threshold": None if self.vocab_check_ is None else self.vocab_check_.threshold,
        }
        arrays = {"centroids": self.centroids_, "cluster_sizes": self.cluster_sizes_}
        arrays.update(self.tables_.to_arrays())
        return state, arrays

    def _set_state(self, state: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        try:
            self.n_clusters_ = int(state["n_clusters"])
            thr = state["ood_threshold"]
            self.ood_threshold_ = None if thr is None else float(thr)
            vocab = state.get("vocab_threshold")
            self.vocab_check_ = None if vocab is None else VocabularyCheck(float(vocab))
            self.centroids_ = np.asarray(arrays["centroids"], dtype=np.float64)
            self.cluster_sizes_ = np.asarray(arrays["cluster_sizes"], dtype=np.int64)
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelLoadError(f"corrupt DTDR-C state: missing or bad {exc}") from exc
        if self.centroids_.ndim != 2 or self.centroids_.shape[0] != self.n_clusters_:
            raise ModelArrayError("centroids", "does not match n_clusters")
        if self.encoder_ is not None and self.centroids_.shape[1] != self.encoder_.dim:
            raise ModelArrayError("centroids", "does not match the encoder")
        if self.cluster_sizes_.shape != (self.n_clusters_,) or (self.cluster_sizes_ < 0).any():
            raise ModelArrayError(
                "cluster_sizes", f"must hold {self.n_clusters_} demonstration counts >= 0"
            )
        check_threshold(self.ood_threshold_, "ood_threshold", upper=None)
        check_threshold(vocab, "vocab_threshold", upper=1.0)
        rows = arrays.get("markov_rows")
        width = rows.shape[1] - 3 if rows is not None and rows.ndim == 2 else -1
        if (
            isinstance(self.order, bool)
            or not isinstance(self.order, int)
            or max(self.order, 1) != width
            or not isinstance(self.backoff, bool)
        ):
            raise ModelLoadError(
                f"corrupt DTDR-C state: parameter 'order' ({self.order!r}) or 'backoff' does "
                "not match the saved Markov tables"
            )
        self._centroid_sq = (self.centroids_**2).sum(axis=1)
        orders = self._orders()
        self.tables_ = MarkovTables.from_arrays(
            len(self.labels_), orders, dict(arrays), n_groups=self.n_clusters_
        )


class StaticDR(DTDRC):
    """Static Dependency Retriever (ToolNet): one cluster, order 1, so the query is ignored.

    DTDR paper, Appendix I: "Static Dependency Retrieval is implemented by setting the number
    of clusters k = 1 and using order N = 1".
    """

    retriever_id: ClassVar[str] = "dr"
    bench_default: ClassVar[bool] = True

    n_clusters: int | Literal["auto"] = 1
    order: int = 1
    backoff: bool = False
    ood_quantile: float | None = None
