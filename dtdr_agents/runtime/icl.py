"""The in-context text of the end-to-end function-calling prompts (DTDR paper, Section 5)."""

from __future__ import annotations

from collections.abc import Sequence

AGENT_INSTRUCTIONS = (
    "You are a function-calling agent. You solve the user's request as a plan of function "
    "calls, one call per turn. At each turn, call exactly one of the functions you are given: "
    "the next function of the plan. When every part of the request has been handled, call "
    "`{end}`."
)
"""System instructions of the end-to-end evaluation (`{end}` is the end-of-plan function)."""

END_PLAN_DESCRIPTION = (
    "Call this when every part of the user's request has been handled (the plan is complete)."
)
"""Description of the end-of-plan function bound at every step of the end-to-end evaluation."""

EXAMPLE_HEADER = "# Example\nHere is an example task and the plan of function calls that solves it:"
"""Heads the one example demonstration every prompt carries (Section 5: "1 randomly selected")."""

RAW_DEMOS_HEADER = (
    "# Demonstrations\nHere are solved tasks whose plans use functions relevant to this step:"
)
"""Heads the retrieved demonstrations of the Raw Demonstrations method (Section 5)."""


def render_demonstration(query: str, calls: Sequence[str], end: str) -> str:
    """One demonstration as text: the query, then its plan of calls ending with `end`.

    Example:
        >>> print(render_demonstration("Caption it", ["Image Captioning"], "end_plan"))
        Query: 'Caption it'
        Plan: Image Captioning -> end_plan
    """
    return f"Query: {query!r}\nPlan: {' -> '.join([*calls, end])}"


__all__ = [
    "AGENT_INSTRUCTIONS",
    "END_PLAN_DESCRIPTION",
    "EXAMPLE_HEADER",
    "RAW_DEMOS_HEADER",
    "render_demonstration",
]
