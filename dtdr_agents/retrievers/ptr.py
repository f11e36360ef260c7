"""PTR, precision-driven tool recommendation, over any base retriever (`ptr`, `ptr:<base>`).

Paper 004 (Gao and Zhang), Section 2 and Algorithm 1, with a learned set size on top:

1. **Bundle acquisition.** The tool sets of the `bundle_k` demonstrations most similar to the
   request (cosine of the base retriever's request embeddings; the paper uses k = 1).
2. **Functional coverage mapping** (needs `chat_model`). The Appendix F prompts extract the
   request's requirements and match each to the bundle's tools; tools that match nothing are
   dropped and requirements that no tool matches are the unsolved problems. Without a chat
   model this stage is skipped and the explanation says so; an unusable answer (not JSON, a tool
   outside the catalogue, no requirement) falls back to the offline path, which says so too.
3. **Multi-view re-ranking.** For each unsolved problem: the top `view_size` tools of direct
   semantic alignment (the base retriever's ranking), of historical query correlation (the
   tools of the most similar demonstrations) and of contextual tool expansion (the tools most
   similar to the best-aligned one), ranked by how many views list them; the best is added.

**Offline path** (no chat model, or an unusable answer). Stage 2 cannot run, so the stages
become evidence for one learned decision: for every tool, its base probability and rank, its
membership in the Stage-1 bundle, a similarity-weighted vote of the nearest bundles, its
multi-view count and its direct similarity are combined by a logistic regression fitted on
held-out demonstrations (the base is cross-fitted, so its scores are out-of-sample). The set
holds the `SetSizeModel`'s most likely number of tools, best first. Each tool says whether it
came from the bundle (Stage 1) or from the re-ranking (Stage 3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from dtdr_agents.foundation.chat import ChatModel
from dtdr_agents.foundation.checks import check_number
from dtdr_agents.foundation.encoders import Encoder, get_encoder
from dtdr_agents.foundation.errors import ChatModelError, ModelArrayError, NotFittedError
from dtdr_agents.foundation.types import END_OF_PLAN, Demonstration, Ranking, Toolset, as_history
from dtdr_agents.recommend.prompts import MalformedAnswerError
from dtdr_agents.recommend.record import Recommendation, Stage
from dtdr_agents.recommend.size import SetSizeModel, unit_rows
from dtdr_agents.recommend.stages import (
    VIEW_SIZE,
    Bundle,
    bundle_acquisition,
    coverage_mapping,
    multi_view_rank,
    top_indices,
)
from dtdr_agents.retrievers.base import Scores, ToolRetriever
from dtdr_agents.retrievers.composite import CompositeRetriever

FEATURES = ("base_p", "base_rr", "bundle", "vote", "views", "similarity")
"""The per-tool evidence the offline path combines (see the module docstring)."""
_DEFAULT_WEIGHTS = np.array([2.0, 1.0, 2.0, 2.0, 1.0, 1.0])
_DEFAULT_BIAS = -3.0


def _clone(retriever: ToolRetriever) -> ToolRetriever:
    """An unfitted copy with the same parameters (nested retrievers copied too)."""
    params = {
        k: _clone(v) if isinstance(v, ToolRetriever) else v
        for k, v in retriever.get_params().items()
    }
    return type(retriever)(**params)


class PTRRecommender(CompositeRetriever):
    """PTR tool-set recommendation over a base retriever (composite id ``ptr:<base>``).

    Args:
        base: The base retriever (fitted by `fit`); its encoder matches the bundles.
        chat_model: A `ChatModel` for Stage 2 (not saved: pass it again at load). None skips
            Stage 2 and uses the offline path.
        bundle_k: How many historical bundles Stage 1 merges (the paper: 1).
        min_similarity: Demonstrations less similar than this give no bundle (Stage 3 alone
            answers then).
        view_size: Candidates per view in Stage 3 (the PTR code: 7).
        n_neighbors: Demonstrations behind the bundle vote and the set-size model.
        folds: Cross-fitting folds for the offline fusion (0: fixed weights, no refits).
        use_bundles: Stage 1 on (False: the w/o Stage-1 ablation).
        use_coverage: Stage 2 on when a chat model is given (False: w/o Stage-2).
        use_rerank: Stage 3 on (False: w/o Stage-3, the set is the bundle).
        prior_weight: Weight of the query-similarity prior for tools added after fit.
        seed: Seed of the cross-fitting folds.
    """

    retriever_id: ClassVar[str] = "ptr"
    default_base: ClassVar[str] = "dtdr-l-s"
    runtime_params: ClassVar[tuple[str, ...]] = ("chat_model",)
    uses_history: ClassVar[bool] = True

    base: ToolRetriever | None = None
    chat_model: ChatModel | None = None
    bundle_k: int = 1
    min_similarity: float = 0.25
    view_size: int = VIEW_SIZE
    n_neighbors: int = 10
    folds: int = 3
    use_bundles: bool = True
    use_coverage: bool = True
    use_rerank: bool = True
    prior_weight: float = 0.1
    seed: int = 0

    # ------------------------------------------------------------------------------ fitting
    def _check_params(self) -> None:
        super()._check_params()
        for name in ("bundle_k", "view_size", "n_neighbors"):
            check_number(getattr(self, name), name, low=1, integer=True)
        check_number(self.folds, "folds", low=0, integer=True)
        check_number(self.min_similarity, "min_similarity", low=-1.0, high=1.0)

    def _encoder(self) -> Encoder:
        enc = self.fitted_base().encoder_
        return enc if enc is not None else get_encoder("default")

    def _fit_composite(self, demos: list[Demonstration], tools: Toolset) -> None:
        encoder = self._encoder()
        self.encoder_ = encoder
        base = self.fitted_base()
        tool_emb = base.tool_embeddings_
        if tool_emb is None:
            tool_emb = encoder.encode([t.text() for t in tools])
        self.tool_vectors_ = unit_rows(tool_emb)
        self.tool_embeddings_ = self.tool_vectors_  # ranks tools added after fit (prior)
        self.demo_vectors_ = unit_rows(encoder.encode([d.query for d in demos]))
        self.demo_ids_ = [d.id or str(i) for i, d in enumerate(demos)]
        index = {n: i for i, n in enumerate(tools.names)}
        self.bundles_ = [tuple(dict.fromkeys(d.calls)) for d in demos]
        self.membership_ = np.zeros((len(demos), len(tools)), dtype=np.float32)
        for row, bundle in enumerate(self.bundles_):
            self.membership_[row, [index[t] for t in bundle]] = 1.0
        self.size_model_ = SetSizeModel(n_neighbors=max(self.n_neighbors, 20)).fit(
            self.demo_vectors_, [max(1, len(b)) for b in self.bundles_]
        )
        self.weights_ = _DEFAULT_WEIGHTS.copy()
        self.bias_ = _DEFAULT_BIAS
        self.fusion_ = "default weights"
        self._names_cache: tuple[tuple[str, ...] | None, np.ndarray] = (None, np.zeros(0))
        if self.folds >= 2 and len(demos) >= 2 * self.folds:
            self._fit_fusion(demos, tools)

    def _fit_fusion(self, demos: list[Demonstration], tools: Toolset) -> None:
        """Logistic regression over the per-tool evidence of held-out demonstrations."""
        from sklearn.linear_model import LogisticRegression

        rng = np.random.default_rng(self.seed)
        fold_of = rng.permutation(len(demos)) % self.folds
        rows: list[np.ndarray] = []
        labels: list[np.ndarray] = []
        for fold in range(self.folds):
            held = np.flatnonzero(fold_of == fold)
            train_idx = np.flatnonzero(fold_of != fold)
            model = _clone(self.fitted_base()).fit([demos[i] for i in train_idx], tools)
            for i in held:
                sims = self.demo_vectors_[train_idx] @ self.demo_vectors_[i]
                base_p = self._base_probs(model.rank(demos[i].query))
                x = self._features(base_p, sims, self.demo_vectors_[i], self.membership_[train_idx])
                rows.append(x)
                labels.append(self.membership_[i])
        x_all = np.concatenate(rows)
        y_all = np.concatenate(labels)
        if len(np.unique(y_all)) < 2:
            return
        clf = LogisticRegression(C=1.0, max_iter=1000).fit(x_all, y_all)
        self.weights_ = clf.coef_[0].astype(np.float64)
        self.bias_ = float(clf.intercept_[0])
        self.fusion_ = f"logistic regression on {self.folds}-fold held-out demonstrations"

    # ------------------------------------------------------------------------------ evidence
    def _base_probs(self, ranking: Ranking) -> np.ndarray:
        """The base ranking's probabilities over the fitted catalogue's tools."""
        cached_names, positions = getattr(self, "_names_cache", (None, np.zeros(0)))
        if cached_names is not ranking.names:
            where = {n: i for i, n in enumerate(ranking.names)}
            positions = np.array([where.get(n, -1) for n in self.fit_tools_.names], dtype=np.int64)
            self._names_cache = (ranking.names, positions)
        probs = np.where(positions >= 0, ranking.probabilities[positions], 0.0)
        out: np.ndarray = probs.astype(np.float64)
        return out

    def _features(
        self,
        base_p: np.ndarray,
        sims: np.ndarray,
        query_vec: np.ndarray,
        membership: np.ndarray,
    ) -> np.ndarray:
        """One row of `FEATURES` per fitted tool."""
        n_tools = len(base_p)
        x = np.zeros((n_tools, len(FEATURES)))
        top = base_p.max()
        x[:, 0] = base_p / top if top > 0 else 0.0
        order = np.argsort(-base_p, kind="stable")
        ranks = np.empty(n_tools)
        ranks[order] = np.arange(1, n_tools + 1)
        x[:, 1] = 1.0 / ranks
        near = top_indices(sims, self.n_neighbors)
        if self.use_bundles and len(near) and sims[near[0]] >= self.min_similarity:
            x[:, 2] = membership[near[: self.bundle_k]].max(axis=0)
            temp = self.size_model_.temperature_
            w = np.exp((sims[near] - sims[near[0]]) / temp)
            x[:, 3] = (w / w.sum()) @ membership[near]
        dsa = order[: self.view_size]
        hqc = (
            np.flatnonzero(membership[near[: self.view_size]].max(axis=0))
            if len(near)
            else np.zeros(0, dtype=np.int64)
        )
        direct = self.tool_vectors_ @ query_vec
        cte = top_indices(self.tool_vectors_ @ self.tool_vectors_[dsa[0]], self.view_size)
        np.add.at(x[:, 4], dsa, 1.0 / 3.0)
        np.add.at(x[:, 4], np.asarray(hqc, dtype=np.int64), 1.0 / 3.0)
        np.add.at(x[:, 4], cte, 1.0 / 3.0)
        x[:, 5] = direct
        return x

    def _scores(self, x: np.ndarray) -> np.ndarray:
        z = x @ self.weights_ + self.bias_
        out: np.ndarray = 1.0 / (1.0 + np.exp(-z))
        return out

    def _evidence(self, query: str) -> tuple[Ranking, np.ndarray, np.ndarray, np.ndarray]:
        """(base ranking, similarities to the demonstrations, request vector, tool scores)."""
        ranking = self.fitted_base().rank(query, ())
        vec = self._query_vec(query)
        sims = self.demo_vectors_ @ vec
        x = self._features(self._base_probs(ranking), sims, vec, self.membership_)
        return ranking, sims, vec, self._scores(x)

    def _query_vec(self, query: str) -> np.ndarray:
        assert self.encoder_ is not None
        vec = np.asarray(self.encoder_.encode([query])[0], dtype=np.float32)
        out: np.ndarray = vec / max(float(np.linalg.norm(vec)), 1e-12)
        return out

    def size_distribution(self, query: str) -> np.ndarray:
        """P(|A| = n) for n = 0, 1, ..., the largest demonstrated set (the learned set size)."""
        self._check_fitted()
        sims = self.demo_vectors_ @ self._query_vec(query)
        dist: np.ndarray = self.size_model_.predict_proba_from_sims(sims)[0]
        return dist

    def set_size(self, query: str) -> int | None:
        """The learned set size: the most likely number of tools for `query` (>= 1).

        None in the zero-shot state (no demonstrations): the default policy decides.
        """
        if getattr(self, "zero_shot_", False):
            return None
        dist = self.size_distribution(query).copy()
        dist[0] = 0.0
        return max(1, int(dist.argmax()))

    # ------------------------------------------------------------------------------ ranking
    def _score(self, query: str, history: tuple[str, ...]) -> Scores:
        ranking, _, _, scores = self._evidence(query)
        end = ranking.probability(END_OF_PLAN) if history else 0.0
        total = scores.sum()
        probs = scores / total * (1.0 - end) if total > 0 else np.full(len(scores), 1.0)
        return Scores(
            np.append(probs, end),
            {"base": self._base_id(), "fusion": self.fusion_},
            ood_reason=ranking.fallback_reason if ranking.fallback else None,
        )

    def _base_id(self) -> str:
        base = getattr(self, "base_", None) or self.base
        return (base.retriever_id or type(base).__name__) if base is not None else "none"

    # --------------------------------------------------------------------------- recommend
    def recommend(
        self,
        query: str,
        history: Sequence[str] | str | None = (),
        *,
        ignore_unknown: bool = False,
    ) -> Recommendation:
        """The PTR tool set for `query` (tools already called in `history` stay in it).

        Args:
            query: The user's request.
            history: Tools called so far for this request.
            ignore_unknown: Drop history names missing from the catalogue instead of raising.

        Returns:
            A non-empty `Recommendation` whose explanation says which stages ran, unless the
            request is out of distribution (then empty, with the reason).
        """
        self._check_fitted()
        if getattr(self, "zero_shot_", False):  # no bundles: the base's ranking, cut
            return super().recommend(query, history, ignore_unknown=ignore_unknown)
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        called = [
            h
            for h in dict.fromkeys(self._validate_history(as_history(history), ignore_unknown))
            if self.tools_.has(h)
        ]
        ranking, sims, _, scores = self._evidence(query)
        bundle = (
            bundle_acquisition(
                sims, self.bundles_, k=self.bundle_k, min_similarity=self.min_similarity
            )
            if self.use_bundles
            else Bundle((), (), float("nan"))
        )
        notes: dict[str, Any] = {"method": self.retriever_id, "base": self._base_id()}
        notes["stage1"] = self._stage1_note(bundle)
        similar = len(sims) > 0 and float(sims.max()) >= self.min_similarity
        if ranking.fallback and not similar:  # both the base and the demonstrations say so
            reason = ranking.fallback_reason or "the request looks out of distribution"
            return Recommendation(
                (),
                (),
                fallback=True,
                reason=f"{reason}; no similar demonstration either",
                policy="learned set size",
                explanation=notes,
            )
        size_dist = self.size_model_.predict_proba_from_sims(sims)[0]
        size_dist[0] = 0.0
        n_hat = max(1, int(size_dist.argmax()))
        score_of = dict(zip(self.fit_tools_.names, scores.tolist(), strict=True))
        chosen: dict[str, Stage] = {h: "history" for h in called}
        llm_done = False
        if self.chat_model is not None and self.use_coverage and bundle.tools:
            try:
                llm_done = self._llm_path(query, bundle, chosen, notes)
            except (MalformedAnswerError, ChatModelError) as exc:
                notes["stage2"] = f"unusable answer ({exc}); offline path used"
                chosen = {h: "history" for h in called}
        elif self.chat_model is None:
            notes["stage2"] = "skipped: no chat model (offline path)"
        else:
            notes["stage2"] = "off" if not self.use_coverage else "skipped: no bundle"
        policy = "chat-model coverage mapping decides the size"
        if not llm_done:
            policy = f"learned set size ({n_hat}, P={size_dist[n_hat]:.2f})"
            self._offline_path(bundle, score_of, n_hat, chosen, notes)
        names = [n for n in chosen if self.tools_.has(n)]
        if not names:  # never empty in distribution: the best-scored tool at least
            best = max(score_of, key=lambda n: score_of[n] if self.tools_.has(n) else -1.0)
            chosen[best] = "rerank"
            names = [best]
        names = [
            *[n for n in names if chosen[n] == "history"],
            *sorted(
                (n for n in names if chosen[n] != "history"), key=lambda n: -score_of.get(n, 0.0)
            ),
        ]
        notes["set_size"] = {"predicted": n_hat, "recommended": len(names)}
        return Recommendation(
            tuple(names),
            tuple(float(score_of.get(n, ranking.probability(n))) for n in names),
            why={n: self._why(n, chosen[n], bundle, score_of) for n in names},
            stages={n: chosen[n] for n in names},
            policy=policy,
            explanation=notes,
        )

    def _stage1_note(self, bundle: Bundle) -> str:
        if not self.use_bundles:
            return "off"
        if not bundle.tools:
            return (
                f"no similar bundle (best similarity {bundle.similarity:.2f} < "
                f"{self.min_similarity})"
            )
        sources = ", ".join(self.demo_ids_[i] for i in bundle.sources)
        return f"bundle of demonstration {sources} (similarity {bundle.similarity:.2f})"

    def _why(self, name: str, stage: Stage, bundle: Bundle, score_of: Mapping[str, float]) -> str:
        p = score_of.get(name, 0.0)
        if stage == "history":
            return "already called in this request"
        if stage == "bundle":
            return f"stage 1: in the bundle of a similar request; p={p:.3f}"
        if stage == "coverage":
            return "stage 2: fulfils a requirement of the request (coverage mapping)"
        if stage == "rerank":
            return f"stage 3: multi-view re-ranking; p={p:.3f}"
        return f"base ranking; p={p:.3f}"

    def _offline_path(
        self,
        bundle: Bundle,
        score_of: Mapping[str, float],
        n_hat: int,
        chosen: dict[str, Stage],
        notes: dict[str, Any],
    ) -> None:
        """Add the best `n_hat` tools by fused score to `chosen` (offline Stage 3).

        Tools already in `chosen` (called in this request) count when they are among the best
        `n_hat`; a call outside them widens the set.
        """
        in_bundle = set(bundle.tools)
        ranked = sorted((n for n in score_of if self.tools_.has(n)), key=lambda n: -score_of[n])
        if self.use_rerank:
            for name in ranked[:n_hat]:
                chosen.setdefault(name, "bundle" if name in in_bundle else "rerank")
            notes["stage3"] = f"offline fusion of the views ({self.fusion_})"
            return
        pool = [n for n in ranked if n in in_bundle]
        if pool:
            notes["stage3"] = "off: the set is the bundle (cut to the learned size)"
        else:
            pool = ranked
            notes["stage3"] = "off; no bundle, so the base ranking fills the set"
        for name in [n for n in pool[:n_hat] if n not in chosen]:
            chosen[name] = "bundle" if name in in_bundle else "ranking"

    def _llm_path(
        self, query: str, bundle: Bundle, chosen: dict[str, Stage], notes: dict[str, Any]
    ) -> bool:
        """Stages 2 and 3 with the chat model; True when they produced the set."""
        assert self.chat_model is not None
        offered = {n: self.fit_tools_[self.fit_tools_.index(n)].description for n in bundle.tools}
        coverage = coverage_mapping(self.chat_model, query, offered, list(self.tools_.names))
        notes["stage2"] = (
            f"coverage mapping: {coverage.verdict}; {len(coverage.requirements)} requirements, "
            f"kept {list(coverage.keep)}, unsolved {list(coverage.unsolved)}"
        )
        for name in coverage.keep:
            chosen.setdefault(name, "coverage")
        added: list[str] = []
        if self.use_rerank:
            for problem in coverage.unsolved:
                best = self._multi_view(problem)
                if best and best not in chosen:  # already in the set: ignored (paper)
                    chosen[best] = "rerank"
                    added.append(best)
            notes["stage3"] = (
                f"multi-view re-ranking of {len(coverage.unsolved)} problems added {added}"
            )
        else:
            notes["stage3"] = "off"
        return any(stage != "history" for stage in chosen.values())

    def _multi_view(self, problem: str) -> str | None:
        """Algorithm 1 for one unsolved problem: the top tool of the three views."""
        vec = self._query_vec(problem)
        ranking = self.fitted_base().rank(problem, ())
        dsa = [n for n in ranking.ranked_names() if n != END_OF_PLAN][: self.view_size]
        near = top_indices(self.demo_vectors_ @ vec, self.view_size)
        hqc = list(dict.fromkeys(t for i in near for t in self.bundles_[int(i)]))
        cte: list[str] = []
        if dsa and self.fit_tools_.has(dsa[0]):
            primary = self.tool_vectors_[self.fit_tools_.index(dsa[0])]
            idx = top_indices(self.tool_vectors_ @ primary, self.view_size)
            cte = [self.fit_tools_.names[int(i)] for i in idx]
        ranked = [n for n in multi_view_rank(dsa, hqc, cte) if self.tools_.has(n)]
        return ranked[0] if ranked else None

    # ------------------------------------------------------------------------ persistence
    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        size_state, size_arrays = self.size_model_.state()
        state = {
            "demo_ids": self.demo_ids_,
            "bundles": [list(b) for b in self.bundles_],
            "size_model": size_state,
            "bias": self.bias_,
            "fusion": self.fusion_,
        }
        arrays = {
            "tool_vectors": self.tool_vectors_,
            "demo_vectors": self.demo_vectors_,
            "membership": self.membership_,
            "weights": np.asarray(self.weights_, dtype=np.float64),
            **size_arrays,
        }
        return state, arrays

    def _set_state(self, state: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        sizes = arrays.get("sizes")
        if sizes is not None and (sizes.ndim != 1 or not len(sizes) or (sizes < 0).any()):
            raise ModelArrayError("sizes", "must hold tool-set sizes >= 0, one per demonstration")
        try:
            self.demo_ids_ = [str(i) for i in state["demo_ids"]]
            self.bundles_ = [tuple(str(t) for t in b) for b in state["bundles"]]
            self.size_model_ = SetSizeModel.from_state(state["size_model"], arrays)
            self.bias_ = float(state["bias"])
            self.fusion_ = str(state["fusion"])
            self.tool_vectors_ = np.asarray(arrays["tool_vectors"], dtype=np.float32)
            self.tool_embeddings_ = self.tool_vectors_
            self.demo_vectors_ = np.asarray(arrays["demo_vectors"], dtype=np.float32)
            self.membership_ = np.asarray(arrays["membership"], dtype=np.float32)
            self.weights_ = np.asarray(arrays["weights"], dtype=np.float64)
        except KeyError as exc:
            raise NotFittedError(f"saved ptr state lacks {exc}") from None
        self._check_arrays()
        self._names_cache = (None, np.zeros(0))

    def _check_arrays(self) -> None:
        """Shapes and ranges of the loaded arrays (for `_set_state`)."""
        n_demos, n_tools = len(self.demo_ids_), len(self.fit_tools_)
        if self.tool_vectors_.ndim != 2 or len(self.tool_vectors_) != n_tools:
            raise ModelArrayError("tool_vectors", f"must have one row per tool ({n_tools})")
        dim = self.tool_vectors_.shape[1]
        if self.demo_vectors_.shape != (n_demos, dim):
            raise ModelArrayError("demo_vectors", f"must have shape ({n_demos}, {dim})")
        if self.membership_.shape != (n_demos, n_tools):
            raise ModelArrayError("membership", f"must have shape ({n_demos}, {n_tools})")
        if ((self.membership_ < 0) | (self.membership_ > 1)).any():
            raise ModelArrayError("membership", "must hold values in [0, 1]")
        if len(self.size_model_.sizes_) != len(self.size_model_.embeddings_):
            raise ModelArrayError("sizes", "must hold one tool-set size per demonstration")
