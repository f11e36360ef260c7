"""The ToolQP prompt (paper 003, Fig. 14), in one place, and the parsers of the planner's turns.

The conversation follows Fig. 14 of *Beyond Single-Shot: Multi-step Tool Retrieval via Query
Planning* (ToolQP-Prompting):

1. system: `FIG14_SYSTEM_PROMPT` (the figure's first-turn instruction, verbatim) followed by
   `OUTPUT_FORMAT` (the tagged first-turn format of the ToolQP SFT example, Fig. 7, so that the
   plan can be read); human: `FIRST_TURN` with the request.
2. The planner answers with ``<task_breakdown>...</task_breakdown>`` and
   ``<sub_goals>[...]</sub_goals>``; human: `NEXT_QUERY_TURN`.
3. The planner answers with one functional query (plain text; a ``<query>`` tag is accepted)
   or ``<stop_retrieval>``; the query runs through the base retriever and the human turn is
   `FEEDBACK_TURN` with the top results (names and short descriptions), then the next query
   is asked for again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from dtdr_agents.foundation.errors import DTDRError

FIG14_SYSTEM_PROMPT = (
    "You are an expert AI Planner. Your goal is to find the best tools to solve a user's query by "
    "interacting with a tool retrieval system. You will be given the user's query.\n\n"
    "For the first turn, you should deconstruct the user's query into a logical plan that you "
    "can follow to retrieve the correct tools by extracting the underlying user intents from the "
    "input query. You should preserve all the underlying user request and the extracted user "
    "intents should be easily understood without extra context information. You should "
    "carefully read the given user query to understand its different intents. Then identify "
    "what the specific intents are.\n\n"
    "From the second turn on, you must generate a search query that targets an individual "
    "intent from the intents you extracted. Do not use any tags or formatting, any text you "
    "output will be used as the search query. A good tool query is a descriptive 'functional "
    "query' that captures the tool's purpose, possibly including likely parameter names (e.g., "
    "'city: string'), categories, or library types to aid retrieval, but not specific "
    "filled-in parameter values (e.g. 'city: Chicago') that may harm retrieval. To end the "
    "retrieval process, you must output the <stop_retrieval> tag without any other text when "
    "you have found the best tools for all intents."
)
"""The first-turn instruction of the paper's Fig. 14 (ToolQP-Prompting), verbatim."""

OUTPUT_FORMAT = (
    "Format of the first turn: output a <task_breakdown> block followed by a <sub_goals> block "
    "on the next line; the <sub_goals> block holds a JSON list of strings, one per intent. "
    'Example: <task_breakdown> ... </task_breakdown>\n<sub_goals> ["first intent", "second '
    'intent"] </sub_goals>'
)
"""Our addition (from the ToolQP SFT format, Fig. 7): how the first turn is written."""

SYSTEM_PROMPT = f"{FIG14_SYSTEM_PROMPT}\n\n{OUTPUT_FORMAT}"
"""The system message the chat planner sends."""

FIRST_TURN = "User Query: {query}. Breakdown of user's intents:"
"""Fig. 14, first turn (the human message), with ``{query}``."""

NEXT_QUERY_TURN = "Next search query (or <stop_retrieval> if best tools found for all intents):"
"""Fig. 14, second turn."""

FEEDBACK_TURN = "System retrieved tools for previous query:\n\n{formatted_retrieved_results}"
"""Fig. 14, third turn on (retrieval feedback), with ``{formatted_retrieved_results}``."""

STOP_TAG = "<stop_retrieval>"
"""The tag that ends the retrieval loop."""

DESCRIPTION_CHARS = 120
"""Feedback shows at most this many characters of a tool's description."""

_TAG = re.compile(r"<\s*(/?)\s*([a-z_]+)\s*>", re.IGNORECASE)
_BREAKDOWN = re.compile(r"<task_breakdown>(.*?)</task_breakdown>", re.IGNORECASE | re.DOTALL)
_SUB_GOALS = re.compile(r"<sub_goals>(.*?)(?:</sub_goals>|$)", re.IGNORECASE | re.DOTALL)
_QUERY = re.compile(r"<query>(.*?)(?:</query>|$)", re.IGNORECASE | re.DOTALL)
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s*")


class PlanningError(DTDRError, ValueError):
    """The planner's output cannot be used (the retriever then falls back to its base)."""


@dataclass(frozen=True)
class FirstTurn:
    """The parsed first turn: the task breakdown and the sub-goals."""

    breakdown: str
    sub_goals: tuple[str, ...]


def first_turn_message(query: str) -> str:
    """The first human message for `query`."""
    return FIRST_TURN.replace("{query}", query.strip().rstrip("."))


def feedback_message(results: Sequence[tuple[str, str]]) -> str:
    """The feedback turn for retrieved ``(name, description)`` pairs, best first."""
    lines = []
    for pos, (name, description) in enumerate(results, start=1):
        short = " ".join(description.split())
        if len(short) > DESCRIPTION_CHARS:
            short = short[: DESCRIPTION_CHARS - 3] + "..."
        lines.append(f"{pos}. {name}: {short}" if short else f"{pos}. {name}")
    shown = "\n".join(lines) if lines else "(no tools)"
    return FEEDBACK_TURN.replace("{formatted_retrieved_results}", shown)


def _sub_goal_list(block: str) -> list[str]:
    text = block.strip()
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, list):
        return [" ".join(str(v).split()) for v in value if isinstance(v, str) and v.strip()]
    if isinstance(value, str):
        return [value.strip()] if value.strip() else []
    return [
        _BULLET.sub("", line).strip().strip('"').strip()
        for line in text.splitlines()
        if _BULLET.sub("", line).strip().strip('"').strip()
    ]


def parse_first_turn(text: str) -> FirstTurn:
    """Read the task breakdown and sub-goals of the planner's first answer.

    Raises:
        PlanningError: No ``<sub_goals>`` block (garbage or missing tags), or it names no
            sub-goal.
    """
    if not isinstance(text, str) or not text.strip():
        raise PlanningError("the planner's first turn is empty")
    goals = _SUB_GOALS.search(text)
    if goals is None:
        shown = " ".join(text.split())[:120]
        raise PlanningError(f"the planner's first turn has no <sub_goals> block: {shown!r}")
    sub_goals = _sub_goal_list(goals.group(1))
    if not sub_goals:
        raise PlanningError("the planner's plan names no sub-goal")
    breakdown = _BREAKDOWN.search(text)
    return FirstTurn(
        breakdown=" ".join(breakdown.group(1).split()) if breakdown else "",
        sub_goals=tuple(sub_goals),
    )


def parse_query_turn(text: str) -> str | None:
    """The functional query of a later turn, or None for ``<stop_retrieval>``.

    A ``<query>`` tag is accepted; any other tag, or an empty answer, is an error.

    Raises:
        PlanningError: The answer is empty or is not a query.
    """
    if not isinstance(text, str) or not text.strip():
        raise PlanningError("the planner answered an empty query turn")
    if STOP_TAG in text.lower().replace(" ", ""):
        return None
    tagged = _QUERY.search(text)
    query = tagged.group(1) if tagged else text
    others = {m.group(2).lower() for m in _TAG.finditer(query)}
    if others:
        raise PlanningError(
            f"the planner's query turn has tags {sorted(others)} instead of a plain query"
        )
    query = " ".join(query.split())
    if not query:
        raise PlanningError("the planner answered an empty query turn")
    return query


__all__ = [
    "DESCRIPTION_CHARS",
    "FEEDBACK_TURN",
    "FIG14_SYSTEM_PROMPT",
    "FIRST_TURN",
    "NEXT_QUERY_TURN",
    "OUTPUT_FORMAT",
    "STOP_TAG",
    "SYSTEM_PROMPT",
    "FirstTurn",
    "PlanningError",
    "feedback_message",
    "first_turn_message",
    "parse_first_turn",
    "parse_query_turn",
]
