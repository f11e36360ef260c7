"""The hybrid's combiner: its features, its zero-shot prior and the cross-fitted fit.

A conditional-logit combiner (a softmax over a step's candidates of a linear score of per-tool
features, `FEATURES`), fitted on the cross-fitting's held-out steps and pulled towards the
zero-shot prior `PRIOR_WEIGHTS` (see `dtdr_agents.retrievers.hybrid`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

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
    # zero-shot, against the calls so far
    "spent",
    "request_after_call",
    "open_sub_goal_rank",
    "graph_rank",
    "artefact_flow",
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
    "knn_follow",
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
    "end_knn_follow",
    "end_zero_shot",
)
"""The combiner's features, in weight order (see the module docstring)."""

_F = {name: i for i, name in enumerate(FEATURES)}

FEATURE_REVISION = 6
"""Bumped when a feature keeps its name but changes its meaning; a saved hybrid records it.

Weights fitted on the old meaning would load and rank differently, so such a model is refused
(fit it again). 2: `end_zero_shot` follows the new sub-goal count and the graph's hold on the
stop, and a given graph's `graph_rank` counts `GIVEN_GRAPH_SCALE` times. 3: the sub-goal
count behind `end_zero_shot` leaves out clauses that name a parameter of the call before and
clauses that only thank. 4: `open_sub_goal_rank` ranks by each open sub-goal's softmax over
the candidates (`SUB_GOAL_TEMPERATURE`), not by the raw cosine. 5: the sub-goal count behind
`end_zero_shot` counts a request's marked steps ("First, ... Then, ... Finally, ...") as one
sub-goal each, and a clause such as "I have a file that I need to translate" asks. 6: a tool
the request's words do not match has `bm25_rank` just after the tools they match (not the
last rank), and `end_knn_follow` keeps only the neighbours that go on (its part below 0)."""

PRIOR_WEIGHTS: dict[str, float] = {
    "bm25_rank": 1.0,
    "dense_rank": 1.0,
    "spent": 1.0,
    "request_after_call": -0.5,
    "open_sub_goal_rank": 1.0,
    "graph_rank": 2.0,
    "artefact_flow": 2.0,
    "end_zero_shot": 1.0,
    "knn_follow": 6.0,
    "end_knn_follow": 6.0,
}
"""Zero-shot prior of the combiner: the zero-shot model itself.

A tool's score is the sum of its ranks' ``-log(1 + rank)`` by BM25, by dense similarity to
the request, by similarity to the request's open sub-goals and by its edge in the tool graph
from the last call; a tool already called loses its request ranks (`spent`). Once a call is
made, the request's two ranks count half (`request_after_call`: the request is partly done,
and the open sub-goals say what is left) and the edge from the last call counts double (as
much as the request's two ranks before the first call): on TaskBench-HF, Seal-Tools and
NESTFUL, seed 0, this raised tool-MRR on all three (0.592 -> 0.612, 0.849 -> 0.858,
0.843 -> 0.848), where either change alone lowered one of them. A file the request names
is the output of a call before the first (`artefact_flow`, `ArtefactFlow`): a tool that takes
it, or that needs a kind nothing gives, gains or loses as much as an edge from the last call
(zero demonstrations, seeds 0 to 2, TaskBench-HF with its graph given: tool-MRR 0.6457 ->
0.6643; Seal-Tools 0.8664 -> 0.8662; NESTFUL 0.8482, unchanged). End-of-plan's
`end_zero_shot` makes its probability the zero-shot stop rule's. Used as is with no
demonstrations, and as the centre of the combiner's penalty otherwise, so that a few
demonstrations move the hybrid from the zero-shot model rather than from a weaker one. Rank
fusion needs no score scale, so it does not favour BM25 or dense similarity on catalogues
where the other is the better zero-shot ranker (BM25 on Seal-Tools' short requests, dense on
TaskBench-HF).

The demonstrations count from the first one (`knn_follow`, `end_knn_follow`, 0 with none): a
close demonstration whose first calls are the calls made so far votes for its next call, or
against end-of-plan where its plan goes on, as far as its request stands out from the
request's typical demonstration (`_KnnVotes`). With two matching demonstrations among five,
the recipe request of issue 40 ranked end-of-plan first after two of its four calls without
them (the zero-shot stop rule counts two clauses); with them, every step's demonstrated call
first (`tests/test_few_demos.py`). Weight 6: at 3 and 4, two of that test's six requests
lost a step to a tool their words match better. The trip request there lost its first step
at 6 too while a tool the request's words did not match ranked last by BM25 (one shared
word, "trip", was worth 4.6 to the one tool that had it); tied after the matched tools, it
leads every step."""

RIDGE = 0.1
"""A plain L2 on the weights added to the combiner's pull on the scores (relative to it).

Without it, a feature that is small or rare on a handful of held-out steps (the neighbours'
votes, BM25's score difference) is nearly free, and 12 demonstrations of two plans were
enough to rank a demonstrated tool above the only relevant, never demonstrated one."""


FIT_OPTIONS: dict[str, float] = {"maxiter": 10000, "ftol": 1e-15, "gtol": 1e-10, "maxcor": 40}
"""L-BFGS-B's stopping rule for the combiner: run to the optimum, not near it.

The loss is strictly convex, so its optimum is one point, the same on every machine. SciPy's
default stop (a relative reduction of 2.2e-9) left the weights up to 0.1 from it, at a point
that depended on the order of floating-point sums: a fit with 1 thread and one with 2 gave
probabilities up to 0.0067 apart, so an end-to-end prompt (probabilities to 3 decimals)
recorded on one machine was not rebuilt on another. Run to this tolerance, they agree to
about 1e-6 (TaskBench-HF, 624 demonstrations). L-BFGS keeps 40 past steps (SciPy's default
is 10): on 2,500 demo-set demonstrations (214,940 held-out rows) the fit took 7.7 s instead
of 21.7 s, to weights 2e-5 apart and a lower loss."""


def _prior_vector() -> np.ndarray:
    w = np.zeros(len(FEATURES))
    for name, value in PRIOR_WEIGHTS.items():
        w[_F[name]] = value
    return w


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

    def take(self, steps: np.ndarray) -> _HeldOut:
        """The held-out steps where `steps` (a boolean mask over steps) is true."""
        rows = steps[self.step_of_row]
        lengths = np.diff(np.append(self.starts, len(self.x)))[steps]
        return _HeldOut(self.x[rows], self.good[rows], np.cumsum(lengths) - lengths)

    def loss(self, weights: np.ndarray) -> float:
        """Summed negative log-probability of each step's acceptable candidates."""
        return float(self.step_losses(weights).sum())

    def step_losses(self, weights: np.ndarray) -> np.ndarray:
        """Each step's negative log-probability of its acceptable candidates."""
        return self.step_losses_of(self.x @ weights)

    def step_losses_of(self, s: np.ndarray) -> np.ndarray:
        """`step_losses` of given row scores `s`."""
        if self.n_steps == 0:
            return np.zeros(0)
        lse_good = self.log_sum_exp(np.where(self.good, s, -np.inf))
        return np.asarray(self.log_sum_exp(s) - lse_good, dtype=np.float64)

    @cached_property
    def step_of_row(self) -> np.ndarray:
        """Each row's step (computed once: the optimiser needs it at every evaluation)."""
        lengths = np.diff(np.append(self.starts, len(self.x)))
        return np.repeat(np.arange(self.n_steps), lengths)

    def log_sum_exp(self, s: np.ndarray) -> np.ndarray:
        """Per step, log sum exp of the row scores `s` (-inf rows count as absent)."""
        return _log_softmax(s, self.starts, self.step_of_row)[0]

    @cached_property
    def good_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The acceptable rows: their indices, features, steps and each step's first one.

        Every step has at least one (`stack`'s callers keep only such steps), so the
        combiner's loss can take the acceptable candidates' log-sum-exp over these rows alone.
        """
        rows = np.flatnonzero(self.good)
        steps = self.step_of_row[rows]
        starts = np.searchsorted(steps, np.arange(self.n_steps))
        return rows, self.x[rows], steps, starts


def _log_softmax(
    s: np.ndarray, starts: np.ndarray, step_of_row: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(per step, log sum exp of the row scores `s`; each row's softmax probability in its step).

    One exponential per row: the probabilities are the shifted exponentials over their
    step's sum, not a second exponential of the scores less the log-sum-exp.
    """
    top = np.maximum.reduceat(s, starts)
    e = np.exp(s - top[step_of_row])
    total = np.add.reduceat(e, starts)
    return top + np.log(total), e / total[step_of_row]


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
    good_rows, good_x, good_step, good_starts = held.good_rows
    second_moment = held.x.T @ held.x / len(held.x) + RIDGE * np.eye(held.x.shape[1])

    # The optimiser works on v = (w - prior) * scale: features on different scales become
    # alike (TaskBench-HF, 624 demonstrations, to `FIT_OPTIONS`: 501 iterations, not 1445).
    scale = np.sqrt(np.diag(second_moment))

    def loss_and_grad(v: np.ndarray) -> tuple[float, np.ndarray]:
        d = v / scale
        s = held.x @ (prior + d)
        lse_all, p_all = _log_softmax(s, held.starts, row_step)
        # the acceptable candidates' terms over their rows only (a few per step)
        lse_good, p_good = _log_softmax(s[good_rows], good_starts, good_step)
        gd = second_moment @ d
        loss = float((lse_all - lse_good).sum() + 0.5 * l2 * (d @ gd))
        return loss, (held.x.T @ p_all - good_x.T @ p_good + l2 * gd) / scale

    res = minimize(
        loss_and_grad,
        np.zeros(len(prior)),
        jac=True,
        method="L-BFGS-B",
        options=FIT_OPTIONS,
    )
    out: np.ndarray = prior + np.asarray(res.x, dtype=np.float64) / scale
    return out


def _select_l2(
    held: _HeldOut,
    groups: np.ndarray,
    prior: np.ndarray,
    choices: Sequence[float | None],
    clusters: np.ndarray | None = None,
    scores: dict[str, np.ndarray] | None = None,
) -> tuple[float | None, dict[str, float]]:
    """The pull among `choices` (None: the prior itself) that held-out groups of steps support.

    For each choice, the combiner is fitted on all groups of steps but one and each step of
    the left-out group is scored (`_HeldOut.step_losses`). The choice of least summed loss is
    the best; the strongest pull whose loss is within one standard error of the best's (of
    the paired per-step differences) is chosen: the one-standard-error rule of
    cross-validated penalties (Breiman et al. 1984; glmnet's ``lambda.1se``). A few held-out
    steps cannot tell a fitted mix from the prior, so few demonstrations keep the zero-shot
    model (and the neighbours' plans it reads) unless they clearly beat it; many steps give
    a small error and the best pull. `groups` gives each step's group (its
    demonstration's, so that no request is on both sides). `clusters` gives each step's
    demonstration: the steps of one plan are scored by parts that saw the same other plans,
    so their differences are summed per demonstration before the standard error is taken
    (a clustered standard error; None: each step on its own).

    `scores`, when given, is filled with each choice's out-of-group row scores
    (`out_of_group_scores`, by `pull_name`), for the caller to reuse.

    Returns:
        (the chosen pull, each choice's summed loss by `pull_name`).
    """
    scores = {} if scores is None else scores
    for c in choices:
        scores[pull_name(c)] = (
            held.x @ prior if c is None else out_of_group_scores(held, groups, prior, c)
        )
    per_step = {pull_name(c): held.step_losses_of(scores[pull_name(c)]) for c in choices}
    if clusters is not None:  # the steps' losses summed per demonstration
        ids, member = np.unique(np.asarray(clusters), return_inverse=True)
        per_step = {
            name: np.bincount(member, weights=v, minlength=len(ids)) for name, v in per_step.items()
        }
    losses = {name: float(v.sum()) for name, v in per_step.items()}
    best = min(choices, key=lambda c: (losses[pull_name(c)], _strength(c)))

    def within_one_error(c: float | None) -> bool:
        d = per_step[pull_name(c)] - per_step[pull_name(best)]
        if len(d) < 2:
            return c == best
        return float(d.sum()) <= float(d.std(ddof=1)) * float(np.sqrt(len(d)))

    chosen = max((c for c in choices if within_one_error(c)), key=_strength)
    return chosen, losses


def out_of_group_scores(
    held: _HeldOut, groups: np.ndarray, prior: np.ndarray, pull: float
) -> np.ndarray:
    """Each held-out row's score by a combiner fitted (pull `pull`) on the other groups' steps.

    What the combiner would score on requests it was not fitted on, as `_select_l2` judges
    a pull: the rows are in `held`'s order.
    """
    scores = np.empty(len(held.x))
    for g in np.unique(groups):
        steps = groups == g
        weights = _fit_combiner(held.take(~steps), prior, pull)
        rows = steps[held.step_of_row]
        scores[rows] = held.x[rows] @ weights
    return scores


def end_first_shift(held: _HeldOut, scores: np.ndarray, reference: np.ndarray) -> float:
    """How far to lower end-of-plan's score so that it leads no more tool steps than before.

    A premature stop ends an agent's work, a missed one costs a model call that can still
    answer; so the fitted mix may not put end-of-plan first at more of the held-out steps
    whose next call is a tool than the zero-shot prior does (`reference`: its row scores).
    Among the tool steps (end-of-plan, each step's last row, not acceptable), the
    reference's count of steps with end-of-plan first, less one binomial standard error, is
    allowed (new requests differ from the held-out ones by about that much); the returned
    shift (>= 0, to take off the `end` weight) is the least that brings `scores` to it: a
    Neyman-Pearson threshold on the stop decision, the rest of the mix untouched.

    Args:
        held: The held-out steps.
        scores: The mix's row scores (out of group where the pull was chosen by groups).
        reference: The zero-shot prior's row scores on the same rows.
    """
    ends = np.append(held.starts[1:], len(held.x)) - 1
    tool_steps = ~held.good[ends]
    if not tool_steps.any():
        return 0.0

    def margins(s: np.ndarray) -> np.ndarray:  # end-of-plan's lead over the best tool
        tools = s.copy()
        tools[ends] = -np.inf
        best = np.maximum.reduceat(tools, held.starts)
        lead: np.ndarray = np.asarray(s[ends] - best, dtype=np.float64)[tool_steps]
        return lead

    n, k = int(tool_steps.sum()), int(np.count_nonzero(margins(reference) > 0.0))
    allowed = int(np.floor(k - np.sqrt(k * (1.0 - k / n))))  # one binomial error below
    lead = np.sort(margins(scores))[::-1]
    if allowed >= len(lead) or lead[allowed] <= 0.0:
        return 0.0
    return float(lead[allowed]) + END_SHIFT_GAP


END_SHIFT_GAP = 1e-6
"""Added to `end_first_shift`'s threshold: a step at exactly the threshold is not led by end."""


def pull_name(pull: float | None) -> str:
    """A pull's name in `cv_["l2_losses"]`: its value, or "prior" for the prior itself."""
    return "prior" if pull is None else str(pull)


def _strength(pull: float | None) -> float:
    return float("inf") if pull is None else pull


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


__all__ = ["FEATURES", "FEATURE_REVISION", "PRIOR_WEIGHTS", "RIDGE"]
