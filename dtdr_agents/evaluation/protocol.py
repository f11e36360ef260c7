"""The one evaluation protocol: teacher-forced steps, tools ranked apart from the stop decision.

Every retriever is scored the same way: at each step of a test plan it ranks the tools given
the query and the recorded calls so far (teacher forcing); the step's acceptable tools come from
the plan's dependency edges (or the recorded order); end-of-plan is the last step. Query-only
retrievers rank once per query and reuse that ranking at every step (DTDR paper, Algorithm 7).

Three views of each step (protocol `PROTOCOL`):

* **Tools** (`tool_*`): at a step whose gold next set holds tools, the tools alone are ranked
  (end-of-plan removed) and scored against those tools.
* **Stop**: at every step, "stop" is predicted when end-of-plan is ranked first; retrievers
  without an end-of-plan model (`ToolRetriever.predicts_end` False) are judged by the one
  shared stop rule (`dtdr_agents.evaluation.stop_rule`) instead of their constant base rate.
* **Paper** (`paper_*`): end-of-plan ranked among the tools, as the DTDR paper scores it.

Set-valued datasets have one step per query whose acceptable set is the whole tool set; the
end-of-plan token is left out of their rankings (a set has no end to predict), so their tool
and paper figures agree and they have no stop figures.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dtdr_agents.evaluation.metrics import DEFAULT_KS, mean_metrics, step_metrics, tracc
from dtdr_agents.evaluation.stop_rule import STOP_THRESHOLD, StopRule
from dtdr_agents.foundation.progress import Progress, no_progress, ticking
from dtdr_agents.foundation.types import END_OF_PLAN, Demonstration, Ranking, Step, Toolset
from dtdr_agents.recommend import Recommendation, recommend_from_ranking
from dtdr_agents.retrievers.base import ToolRetriever


class _Prefixer:
    """Ranked-name prefixes long enough for exact metrics, without a Python loop over all tools.

    Every metric looks only at the top `max(ks)` names and at the positions of the acceptable
    ones, so a step needs the ranking up to its last acceptable tool (at least `max(ks)`).
    """

    def __init__(self, min_len: int) -> None:
        self.min_len = min_len
        self._names: tuple[str, ...] | None = None
        self._index: dict[str, int] = {}

    def _see(self, ranking: Ranking) -> None:
        if ranking.names is not self._names:  # retrievers reuse one names tuple across steps
            self._names = ranking.names
            self._index = {name: i for i, name in enumerate(ranking.names)}

    def end_index(self, ranking: Ranking) -> int:
        """Index of end-of-plan in `ranking.names`."""
        self._see(ranking)
        return self._index[END_OF_PLAN]

    def __call__(self, ranking: Ranking, acceptable: frozenset[str], drop_end: bool) -> list[str]:
        self._see(ranking)
        order = ranking.order
        if drop_end:
            order = order[order != self._index[END_OF_PLAN]]
        positions = np.empty(len(ranking.names), dtype=np.int64)
        positions[order] = np.arange(len(order))
        wanted = [self._index[n] for n in acceptable if n in self._index]
        if drop_end:
            wanted = [i for i in wanted if ranking.names[i] != END_OF_PLAN]
        last = int(positions[wanted].max()) + 1 if wanted else len(order)
        return [ranking.names[int(i)] for i in order[: max(last, self.min_len)]]


PROTOCOL = "dtdr-eval/2"
"""Version of the protocol and of its JSON results (1: end-of-plan ranked among the tools only)."""


def recommend_for(retriever: ToolRetriever, query: str) -> Recommendation:
    """`retriever.recommend(query)`, or its default-policy recommendation if it has none."""
    own = getattr(retriever, "recommend", None)
    if callable(own):
        rec = own(query, (), ignore_unknown=True)
        assert isinstance(rec, Recommendation)
        return rec
    return recommend_from_ranking(retriever.rank(query, (), ignore_unknown=True))


def set_metrics(recommended: Sequence[str], relevant: frozenset[str]) -> dict[str, float]:
    """TRACC of the recommended set and its size error ``| |B| - |A| |`` (set-valued data)."""
    return {
        "tracc": tracc(recommended, relevant),
        "size_error": float(abs(len(set(recommended)) - len(relevant))),
    }


def eval_steps(demo: Demonstration, *, set_valued: bool = False) -> list[Step]:
    """The steps a demonstration is scored on."""
    if set_valued:
        return [Step((), frozenset(demo.calls), demo.calls[0] if demo.calls else END_OF_PLAN)]
    return demo.steps()


def has_own_stop(retriever: ToolRetriever) -> bool:
    """Whether `retriever` (or, for a composite, its base) scores end-of-plan itself.

    A learned retriever fitted on no demonstrations (its zero-shot state) does not: its
    end-of-plan is the zero-shot stop rule's.
    """
    if getattr(retriever, "zero_shot_", False):
        return False
    if retriever.composite:
        base = getattr(retriever, "base_", None) or getattr(retriever, "base", None)
        if isinstance(base, ToolRetriever):
            return has_own_stop(base)
    return retriever.predicts_end


@dataclass(frozen=True)
class ScoredStep:
    """One scored step of the protocol.

    Attributes:
        query: Index of the test request.
        step: Step index (0 = before the first call).
        plan_length: Calls in the request's plan.
        paper: The paper protocol's metrics (end-of-plan ranked among the tools).
        tool: Tool-only metrics (end-of-plan removed; the gold set's tools), or None at a step
            whose gold next set holds no tool.
        stop_gold: Whether the plan is done at this step (None: set-valued data).
        stop_pred: Whether the retriever (or the shared stop rule) said "stop".
        end_score: Its end-of-plan probability at this step.
    """

    query: int
    step: int
    plan_length: int
    paper: dict[str, float]
    tool: dict[str, float] | None
    stop_gold: bool | None = None
    stop_pred: bool | None = None
    end_score: float | None = None


def stop_metrics(rows: Sequence[ScoredStep]) -> dict[str, float | None]:
    """Stop precision, recall, F1 and AUROC of the end score, and "END first at tool steps".

    Pooled over steps. "Stop" is predicted when end-of-plan is ranked first (or, for
    retrievers judged by the shared stop rule, when its probability is at least one half).
    AUROC is None when the steps hold one class only.
    """
    scored = [r for r in rows if r.stop_gold is not None]
    if not scored:
        return {}
    tp = sum(1 for r in scored if r.stop_gold and r.stop_pred)
    fp = sum(1 for r in scored if not r.stop_gold and r.stop_pred)
    fn = sum(1 for r in scored if r.stop_gold and not r.stop_pred)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    tool_steps = [r for r in scored if r.tool is not None]
    gold = [bool(r.stop_gold) for r in scored]
    auroc: float | None = None
    if any(gold) and not all(gold):
        from sklearn.metrics import roc_auc_score

        auroc = float(roc_auc_score(gold, [float(r.end_score or 0.0) for r in scored]))
    return {
        "stop_precision": precision,
        "stop_recall": recall,
        "stop_f1": 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0,
        "stop_auroc": auroc,
        "end_first_at_tool_steps": (
            sum(1 for r in tool_steps if r.stop_pred) / len(tool_steps) if tool_steps else None
        ),
    }


@dataclass
class EvalResult:
    """Scores of one retriever on one test set.

    Attributes:
        retriever_id: Which retriever.
        metrics: The paper protocol: mean of every per-step metric (`mrr`, `top1`, `f1`,
            `recall@5`, ...) with end-of-plan ranked among the tools.
        tool_metrics: Means over the steps whose gold next set holds tools, ranking the tools
            only: `tool_mrr`, `tool_top1`, `tool_f1`, `tool_recall@5`, `tool_ndcg@10`, ...
        stop: The stop decision (`stop_metrics`), empty for set-valued data.
        stop_rule: "own" (the retriever's end-of-plan score) or "shared" (`StopRule`).
        n_queries: Test queries scored.
        n_steps: Steps scored.
        n_tool_steps: Steps whose gold next set holds tools.
        fit_s: Seconds spent in `fit` (None when the retriever came fitted).
        ms_per_step: Mean ranking time per step in milliseconds (query-only retrievers
            spread their one call over the query's steps).
        latency_ms: p50 / p99 / mean of single `rank` calls, in milliseconds.
        by_plan_length: Paper and tool metrics grouped by the number of calls in the plan.
        by_step: Paper and tool metrics grouped by step index (0 = first call).
        rows: The scored steps.
        recommend_policy: How the scored recommendations chose their size (set-valued data:
            `tracc` and `size_error` score the recommended set itself).
        recommend_ms: p50 / p99 / mean of single `recommend` calls, in milliseconds.
        error: The error that stopped this retriever, if any (results so far are kept).
    """

    retriever_id: str
    metrics: dict[str, float] = field(default_factory=dict)
    tool_metrics: dict[str, float] = field(default_factory=dict)
    stop: dict[str, float | None] = field(default_factory=dict)
    stop_rule: str = "own"
    n_queries: int = 0
    n_steps: int = 0
    n_tool_steps: int = 0
    fit_s: float | None = None
    ms_per_step: float = 0.0
    latency_ms: dict[str, float] = field(default_factory=dict)
    by_plan_length: dict[int, dict[str, float]] = field(default_factory=dict)
    by_step: dict[int, dict[str, float]] = field(default_factory=dict)
    rows: list[ScoredStep] = field(default_factory=list)
    recommend_policy: str | None = None
    recommend_ms: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    def summary(self) -> dict[str, Any]:
        """One flat dict: tool metrics, stop metrics, paper metrics (`paper_` prefix), timings."""
        out: dict[str, Any] = dict(self.tool_metrics)
        out.update(self.stop)
        out.update({f"paper_{k}": v for k, v in self.metrics.items() if k not in SET_KEYS})
        out.update({k: v for k, v in self.metrics.items() if k in SET_KEYS})
        out.update(
            {
                "stop_rule": self.stop_rule,
                "ms_per_step": self.ms_per_step,
                "fit_s": self.fit_s,
                "n_queries": self.n_queries,
                "n_steps": self.n_steps,
                "n_tool_steps": self.n_tool_steps,
                "latency_ms": self.latency_ms,
            }
        )
        if self.recommend_policy is not None:
            out["recommend_policy"] = self.recommend_policy
            out["recommend_ms"] = self.recommend_ms
        if self.error:
            out["error"] = self.error
        return out


SET_KEYS = ("tracc", "size_error")
"""Metrics of the recommended set (set-valued data), kept without the `paper_` prefix."""


def _breakdown(rows: Sequence[ScoredStep], key: str) -> dict[int, dict[str, float]]:
    """Mean paper metrics per group, with `tool_mrr` / `tool_top1` over the group's tool steps."""
    groups: dict[int, list[ScoredStep]] = {}
    for r in rows:
        groups.setdefault(int(getattr(r, key)), []).append(r)
    out: dict[int, dict[str, float]] = {}
    for g in sorted(groups):
        members = groups[g]
        entry = mean_metrics([r.paper for r in members])
        tools = [r.tool for r in members if r.tool is not None]
        if tools:
            entry.update(mean_metrics(tools))
        out[g] = entry
    return out


def evaluate(
    retriever: ToolRetriever,
    test: Sequence[Demonstration],
    *,
    set_valued: bool = False,
    ks: Sequence[int] = DEFAULT_KS,
    progress: Progress | None = None,
    retriever_id: str | None = None,
    stop_rule: StopRule | None = None,
) -> EvalResult:
    """Score a fitted retriever on `test` with the teacher-forced protocol.

    At every step the paper protocol ranks end-of-plan among the tools. At a step whose gold
    next set holds tools, the tools are also ranked alone (end-of-plan removed) for the
    `tool_*` metrics. The stop decision is scored at every step: by the retriever's own
    end-of-plan score, or by `stop_rule` when given (the protocol gives one to every retriever
    without an end-of-plan model, see `fit_and_evaluate`).

    A failure on one query stops this retriever but keeps the rows scored so far; the error
    is recorded in the result instead of being raised.
    """
    rid = retriever_id or retriever.retriever_id or type(retriever).__name__
    result = EvalResult(rid, stop_rule="shared" if stop_rule is not None else "own")
    wrap = progress or no_progress
    calls_ms: list[float] = []
    rec_ms: list[float] = []
    policies: dict[str, None] = {}
    rank_total = 0.0
    prefix = _Prefixer(max(ks))
    # The encoder work of every step in batches first (an agent encodes a request once).
    retriever.warm(
        [(d.query, s.history) for d in test for s in eval_steps(d, set_valued=set_valued)]
    )
    try:
        for qi, demo in enumerate(wrap(test, rid, len(test))):
            steps = eval_steps(demo, set_valued=set_valued)
            once: Ranking | None = None
            for si, step in enumerate(steps):
                if once is None or retriever.uses_history:
                    t0 = time.perf_counter()
                    ranking = retriever.rank(demo.query, step.history, ignore_unknown=True)
                    dt = (time.perf_counter() - t0) * 1000.0
                    calls_ms.append(dt)
                    rank_total += dt
                    once = ranking
                ranked = prefix(once, step.acceptable, drop_end=set_valued)
                paper = step_metrics(ranked, step.acceptable, ks=ks)
                if set_valued:  # score the recommended set itself: TRACC and size error
                    t0 = time.perf_counter()
                    rec = recommend_for(retriever, demo.query)
                    rec_ms.append((time.perf_counter() - t0) * 1000.0)
                    policies[rec.policy.split(" (")[0]] = None
                    paper.update(set_metrics(rec.names, step.acceptable))
                    as_tools = {f"tool_{k}": v for k, v in paper.items() if k not in SET_KEYS}
                    result.rows.append(ScoredStep(qi, si, len(demo.calls), paper, as_tools))
                    continue
                gold_tools = step.acceptable - {END_OF_PLAN}
                tool_row: dict[str, float] | None = None
                if gold_tools:
                    tool_ranked = prefix(once, gold_tools, drop_end=True)
                    scores = step_metrics(tool_ranked, gold_tools, ks=ks)
                    tool_row = {f"tool_{k}": v for k, v in scores.items()}
                end_i = prefix.end_index(once)
                if stop_rule is not None:
                    end_score = stop_rule.probability(demo.query, step.history)
                    stop_pred = end_score >= STOP_THRESHOLD
                else:
                    end_score = float(once.probabilities[end_i])
                    stop_pred = int(once.order[0]) == end_i
                result.rows.append(
                    ScoredStep(
                        qi,
                        si,
                        len(demo.calls),
                        paper,
                        tool_row,
                        stop_gold=not gold_tools,
                        stop_pred=stop_pred,
                        end_score=end_score,
                    )
                )
            result.n_queries += 1
    except Exception as exc:  # keep the rows so far; report the failure
        result.error = f"{type(exc).__name__}: {exc} (after {result.n_queries} queries)"
    scored = result.rows
    result.n_steps = len(scored)
    if scored:
        result.metrics = mean_metrics([r.paper for r in scored])
        tool_rows = [r.tool for r in scored if r.tool is not None]
        result.n_tool_steps = len(tool_rows)
        if tool_rows:
            result.tool_metrics = mean_metrics(tool_rows)
        result.stop = stop_metrics(scored)
        result.by_plan_length = _breakdown(scored, "plan_length")
        result.by_step = _breakdown(scored, "step")
        result.ms_per_step = rank_total / len(scored)
    if policies:
        result.recommend_policy = "; ".join(policies)
    if rec_ms:
        result.recommend_ms = _latency(rec_ms)
    if calls_ms:
        result.latency_ms = _latency(calls_ms)
    return result


def _latency(values_ms: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(values_ms)
    return {
        "p50": float(np.percentile(arr, 50)),
        "p99": float(np.percentile(arr, 99)),
        "mean": float(statistics.fmean(values_ms)),
    }


def fit_and_evaluate(
    retriever: ToolRetriever,
    train: Sequence[Demonstration],
    test: Sequence[Demonstration],
    tools: Toolset,
    **kwargs: Any,
) -> EvalResult:
    """Fit `retriever` on `train` (timed) and `evaluate` it on `test`; failures are recorded.

    A retriever without an end-of-plan model of its own (`has_own_stop`) has its stop
    decision judged by the shared `StopRule`, fitted on the same `train` (with no
    demonstrations: `StopRule.zero_shot()`, as `bench --n-demos 0` does).
    """
    rid = kwargs.get("retriever_id") or retriever.retriever_id or type(retriever).__name__
    t0 = time.perf_counter()
    try:
        with ticking(kwargs.get("progress"), f"fit {rid}"):
            retriever.fit(train, tools)
    except Exception as exc:
        return EvalResult(
            rid, fit_s=time.perf_counter() - t0, error=f"fit failed: {type(exc).__name__}: {exc}"
        )
    fit_s = time.perf_counter() - t0
    if not kwargs.get("set_valued") and not has_own_stop(retriever):
        kwargs.setdefault("stop_rule", StopRule().fit(train) if train else StopRule.zero_shot())
    result = evaluate(retriever, test, **kwargs)
    result.fit_s = fit_s
    return result
