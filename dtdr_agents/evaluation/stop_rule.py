"""The evaluation protocol's shared stop rule, for retrievers with no end-of-plan model.

A query-only retriever (BM25, QTS, TGR, Less-is-More, static LR, the graph-tool-call peer)
cannot tell when a plan is done, so its ranking gives end-of-plan a constant base rate. Judged
by that rate its stop decision is meaningless, and on a large catalogue the rate outranks every
tool. The protocol therefore decides "stop" for all of them with one rule, the same for each:
a logistic regression fitted on the training demonstrations' steps, from features every
retriever has — how many calls were made so far, and how many clauses (sub-goals) the request
states (`request_clauses`, the split `hybrid` uses) — and the request's length. It predicts
"stop" when its probability is at least one half. It never sees a retriever's tool ranking, so
no query-only retriever gets a better or worse rule than another.

With no demonstrations there is nothing to fit: `StopRule.zero_shot()` is the rule's
well-defined zero-shot state, which stops once the calls so far cover the request's sub-goals
(a logistic curve in calls made minus `sub_goals` stated, `ZERO_SHOT_SLOPE`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Self

import numpy as np

from dtdr_agents.foundation.clauses import request_clauses, zero_shot_stop_probability
from dtdr_agents.foundation.types import END_OF_PLAN, Demonstration

STOP_THRESHOLD = 0.5
"""The rule predicts "stop" when its probability is at least this."""

MAX_CALLS_FEATURE = 5
"""Calls-so-far counts at or above this share one indicator."""

N_FEATURES = MAX_CALLS_FEATURE + 1 + 4


def stop_features(query: str, n_calls: int) -> np.ndarray:
    """The rule's features of one step: calls so far (one-hot), clauses, their gap, length."""
    clauses = len(request_clauses(query))
    x = np.zeros(N_FEATURES)
    x[min(n_calls, MAX_CALLS_FEATURE)] = 1.0
    base = MAX_CALLS_FEATURE + 1
    x[base] = min(clauses, 8) / 8.0
    x[base + 1] = max(-4, min(4, n_calls - clauses)) / 4.0
    x[base + 2] = float(n_calls >= clauses)
    x[base + 3] = math.log1p(len(query.split())) / 5.0
    return x


class StopRule:
    """P(the plan is done | request, number of calls so far), fitted on demonstrations.

    Attributes:
        constant_: The probability when the demonstrations hold one class only, else None.
        model_: The fitted logistic regression (None when `constant_` is set or zero-shot).
        zero_shot_: True for the rule built without demonstrations (`zero_shot`).
    """

    def __init__(self, c: float = 1.0) -> None:
        """Store the inverse regularisation strength `c` of the logistic regression."""
        self.c = c

    def fit(self, demos: Sequence[Demonstration]) -> Self:
        """Fit on every teacher-forced step of `demos` (label: the step is end-of-plan).

        Raises:
            ValueError: If `demos` is empty (there is nothing to learn a stop rule from).
        """
        from sklearn.linear_model import LogisticRegression

        if not demos:
            raise ValueError("the stop rule needs at least one demonstration")
        rows: list[np.ndarray] = []
        labels: list[int] = []
        for demo in demos:
            for step in demo.steps():
                rows.append(stop_features(demo.query, len(step.history)))
                labels.append(int(step.target == END_OF_PLAN))
        y = np.asarray(labels)
        self.zero_shot_ = False
        self.model_: LogisticRegression | None = None
        self.constant_: float | None = None
        if y.min() == y.max():
            self.constant_ = float(y[0])
        else:
            self.model_ = LogisticRegression(C=self.c, max_iter=1000).fit(np.stack(rows), y)
        return self

    @classmethod
    def zero_shot(cls, c: float = 1.0) -> StopRule:
        """The rule without demonstrations: stop once the calls cover the request's sub-goals."""
        rule = cls(c)
        rule.zero_shot_ = True
        rule.model_ = None
        rule.constant_ = None
        return rule

    def probability(self, query: str, history: Sequence[str]) -> float:
        """P(stop) before the next call, given the calls made so far."""
        if not hasattr(self, "model_"):
            raise RuntimeError("StopRule is not fitted: call fit(demos) or zero_shot() first")
        if getattr(self, "zero_shot_", False):
            return zero_shot_stop_probability(query, len(history))
        if self.model_ is None:
            assert self.constant_ is not None
            return self.constant_
        x = stop_features(query, len(history))[None, :]
        return float(self.model_.predict_proba(x)[0, 1])
