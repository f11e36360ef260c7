"""The `Recommendation` record: a tool *set* for a request, with why and which stage chose each."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Stage = Literal["history", "bundle", "coverage", "rerank", "ranking"]
"""Which part chose a tool.

- ``"history"``: already called in this request (kept in the set);
- ``"bundle"``: PTR Stage 1, the bundle of the most similar demonstration;
- ``"coverage"``: PTR Stage 2, kept by the chat model's coverage mapping;
- ``"rerank"``: PTR Stage 3, multi-view re-ranking (offline: the learned fusion of the views);
- ``"ranking"``: a plain retriever's ranking cut by its selection policy or set-size model.
"""

STAGES: tuple[Stage, ...] = ("history", "bundle", "coverage", "rerank", "ranking")
"""Every `Stage`, in pipeline order."""


@dataclass(frozen=True)
class Recommendation:
    """The tools to hand to the model for a whole request: names, probabilities, why, stage.

    A recommendation is never empty unless the request looks out of distribution; then
    `fallback` is True, `reason` says why, and the caller should offer every tool.

    Attributes:
        names: The recommended tools, best first (no end-of-plan token).
        probabilities: One probability per name: the chance the tool belongs to the set.
        why: A one-line reason per name.
        stages: The `Stage` that chose each name.
        fallback: True when the request looked out of distribution (then `names` is empty).
        reason: Why the fallback fired, or None.
        policy: How the set size was decided (e.g. ``"learned set size"`` or
            ``"SelectionPolicy(k=5)"``).
        explanation: What ran and what was skipped (stage notes, bundle source, sizes).
    """

    names: tuple[str, ...]
    probabilities: tuple[float, ...]
    why: Mapping[str, str] = field(default_factory=dict)
    stages: Mapping[str, Stage] = field(default_factory=dict)
    fallback: bool = False
    reason: str | None = None
    policy: str = ""
    explanation: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.names) != len(self.probabilities):
            raise ValueError(
                f"names ({len(self.names)}) and probabilities ({len(self.probabilities)}) "
                "must have the same length"
            )
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"names must not repeat a tool, got {list(self.names)}")
        if not self.names and not self.fallback:
            raise ValueError("an empty recommendation must be a fallback with a reason")
        missing = [n for n in self.names if n not in self.stages]
        if missing:
            raise ValueError(f"stages must name the stage of every tool; missing {missing}")

    @property
    def size(self) -> int:
        """How many tools are recommended."""
        return len(self.names)

    def by_stage(self, stage: Stage) -> tuple[str, ...]:
        """The recommended names chosen by `stage`, in recommendation order."""
        return tuple(n for n in self.names if self.stages.get(n) == stage)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able view: names, probabilities, why, stages, fallback, policy, explanation."""
        return {
            "names": list(self.names),
            "probabilities": list(self.probabilities),
            "why": dict(self.why),
            "stages": dict(self.stages),
            "fallback": self.fallback,
            "reason": self.reason,
            "policy": self.policy,
            "explanation": dict(self.explanation),
        }
