"""A request's clauses: the sub-goals a multi-step request usually states one per clause.

Framework-free and import-light: the hybrid's `clause_*` features and the shared stop rule both
split requests this way; the zero-shot stop probability counts `sub_goals`, the clauses with
the ones that only add an argument merged back into theirs.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable
from collections.abc import Set as AbstractSet

MAX_CLAUSES = 16
"""Clauses of a request kept (the first ones)."""

_CLAUSE_SPLIT = re.compile(
    r"[.;!?]+\s+|,?\s+(?:and then|then|after that|afterwards|finally|next|and)\s+|,\s+",
    re.IGNORECASE,
)


_QUOTED = re.compile(
    r"""(?<![\w'"`])(?:'(?:[^'\n]|(?<=\w)'(?=\w))*?'|"[^"\n]*?"|`[^`\n]*?`|“[^”\n]*?”"""
    r"""|‘(?:[^’\n]|(?<=\w)’(?=\w))*?’)(?![\w'"`])"""
)
"""A quoted value: a text in quotes that open and close outside words (the apostrophe of
"What's" neither opens nor closes one)."""


def request_clauses(query: str, limit: int = MAX_CLAUSES) -> list[str]:
    """The request split into clauses of at least three words (sentences, "then", "and").

    A multi-step request usually states one sub-goal per clause; the hybrid's `clause_*`
    features ask which clauses the calls so far have not covered. A quoted value is never
    split (its sentences and commas are the value's, not the request's), unless it is the
    whole request. A request without such a split is one clause.
    """
    quoted: list[str] = []
    whole = _QUOTED.fullmatch(query.strip())
    text = whole.group(0)[1:-1] if whole else query

    def _hold(match: re.Match[str]) -> str:
        quoted.append(match.group(0))
        return f"\x00{len(quoted) - 1}\x00"

    held = _CLAUSE_SPLIT.split(_QUOTED.sub(_hold, text))
    if quoted:
        held = [re.sub("\x00(\\d+)\x00", lambda m: quoted[int(m.group(1))], p) for p in held if p]
    parts = [p.strip() for p in held if p and len(p.split()) >= 3]
    return parts[:limit] or [query]


_CONTINUATION = re.compile(
    r"""^(?:["'`$\d(]|(?:a|an|the|its|their|his|her|my|your|our|this|these|those|with|for|from|
    to|in|on|at|of|by|as|using|via|per)\b)""",
    re.IGNORECASE | re.VERBOSE,
)


_CONTEXT = re.compile(
    r"""^(?!.*\bquestions?\b)(?!.*\b(?:need|want|wish|like)\s+(?:you\s+)?to\b)
    (?:(?:so|and|also|now),?\s+)?
    (?:(?:i|we)\s+(?:have|had|got|own)\b|(?:i|we)'ve\s+got\b|given\b|here\s+(?:is|are)\b|
    thanks?\b|thank\s+you\b|
    there\s+(?:is|are)\b|the\s+(?:document|text|file|image|audio|video|passage|article|table)
    \s*(?:is\s*)?[:'"`])""",
    re.IGNORECASE | re.VERBOSE,
)
"""A clause that states what the user has ("I have an image 'example.jpg'", "Given the text
'...'", "The document: '...'") or thanks ("Thank you for your help.") rather than asking for
something ("I have a question: '...'" asks for an answer, and so does "I have a document
that I need to translate")."""

_STEP_MARKER = re.compile(
    r"""(?:(?<=[.!?])|(?<=[.!?]['"]))\s+(?:and\s+)?
    (?:first(?:ly)?|second(?:ly)?|third(?:ly)?|then|next|after\s+(?:that|this)|afterwards|
    subsequently|finally|lastly|additionally|moreover|furthermore|in\s+addition|besides|also|
    once\b[^,.]*,|after\s+\w+ing\b[^,.]*,)\b
    |(?:^|\s)\d{1,2}[.)]\s""",
    re.IGNORECASE | re.VERBOSE,
)
"""A sentence that opens a new step of a request ("Then, ...", "Finally, ...", "After
verifying the block, ...") or a numbered item ("2. ...")."""

_LIST_OPENER = re.compile(r"\s*(?:first(?:ly)?\b|1[.)])", re.IGNORECASE)
"""The first marker of a list ("First, ...", "1. ..."): the text before it announces the list."""

STEP_MARKERS_NEEDED = 2
"""Marked sentences from which a request's steps are its marked segments (`sub_goals`)."""


def sub_goals(query: str, limit: int = MAX_CLAUSES) -> list[str]:
    """The request's clauses that ask for something, arguments merged into the clause before.

    A clause that opens with an article, a preposition, a number or a quote ("an allowance of
    500", "'Los Angeles' using driving mode") continues the clause before it (a list of
    arguments split on "and" or a comma) rather than stating a new sub-goal. A clause that
    only states what the user has (`_CONTEXT`: "I have an audio file 'example.wav'") is no
    sub-goal, and neither are its arguments; a request of nothing else is its one sub-goal.
    """
    steps = _marked_steps(query)
    if steps is not None:
        return steps[:limit]
    return _clause_goals(query, limit)


def _marked_steps(query: str) -> list[str] | None:
    """A request's marked steps ("First, ... Then, ... Finally, ..."), or None.

    From `STEP_MARKERS_NEEDED` marked sentences on, a request states one step per marked
    segment: the sentences after a marker (details, arguments, a restatement) belong to its
    step. The text before the first marker is a step of its own unless it only states context.
    """
    marks = list(_STEP_MARKER.finditer(query))
    if len(marks) < STEP_MARKERS_NEEDED:
        return None
    cuts = [m.start() for m in marks] + [len(query)]
    lead = query[: cuts[0]].strip()  # empty when the request opens with a marked step
    rest = [seg for a, b in itertools.pairwise(cuts) if (seg := query[a:b].strip())]
    announces = lead.endswith(":") or bool(_LIST_OPENER.match(marks[0].group(0)))
    if lead and not announces and any(not _CONTEXT.match(c) for c in request_clauses(lead)):
        rest.insert(0, lead)
    return rest or None


def _clause_goals(query: str, limit: int) -> list[str]:
    """`sub_goals` of a request without marked steps: its asking clauses."""
    goals: list[str] = []
    context = False  # the clause before stated context (its arguments are context too)
    for clause in request_clauses(query, limit):
        if _CONTINUATION.match(clause) and (context or goals):
            if not context:
                goals[-1] = f"{goals[-1]}, {clause}"
        elif not (context := bool(_CONTEXT.match(clause))):
            goals.append(clause)
    return goals or [query]


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD = re.compile(r"[a-z0-9]+")
_STEM = re.compile(r"(?<=[a-z0-9]{3})(?:ing|es|ed|s)$")


def words(text: str) -> list[str]:
    """The lower-case words of `text` or of a name (camelCase and separators split)."""
    return _WORD.findall(_CAMEL.sub(" ", text).lower())


def word_stems(text: str) -> frozenset[str]:
    """The words of `text` or of a name, lower-case, each with a last "ing", "es", "ed" or "s" cut.

    camelCase and separators split a name; "starting" and "start" are one stem.
    """
    return frozenset(_STEM.sub("", w) for w in words(text))


def fills_parameter(
    clause: str, parameters: Iterable[str], generic: AbstractSet[str] = frozenset()
) -> bool:
    """Whether `clause` names one of `parameters` (a tool's parameter names).

    It does when it holds every word of the parameter's name that is not in `generic`
    (words so common among the catalogue's parameter names that they name none: "text",
    "id") and no number, and the name has such a word: "slope height of 24.3 meters" names
    ``slope_height``; "convert it to text" names no ``text``.
    """
    said = word_stems(clause)
    for name in parameters:
        specific = {w for w in word_stems(name) if not w.isdigit()} - generic  # image_2
        if specific and specific <= said:
            return True
    return False


ZERO_SHOT_SLOPE = 4.0
"""Zero-shot rule: P(stop) = sigmoid(slope * (calls - sub-goals + 0.5)), 0.88 when every
sub-goal has a call, 0.12 when one is left."""


def stop_probability(n_goals: int, n_calls: int) -> float:
    """P(stop) without demonstrations after `n_calls` calls for a request of `n_goals` sub-goals.

    A logistic curve in calls made minus sub-goals stated (`ZERO_SHOT_SLOPE`).
    """
    gap = n_calls - n_goals + 0.5
    return 1.0 / (1.0 + math.exp(-ZERO_SHOT_SLOPE * gap))


def zero_shot_stop_probability(query: str, n_calls: int) -> float:
    """P(stop) without demonstrations: `stop_probability` of the request's `sub_goals`."""
    return stop_probability(len(sub_goals(query)), n_calls)


__all__ = [
    "MAX_CLAUSES",
    "ZERO_SHOT_SLOPE",
    "fills_parameter",
    "request_clauses",
    "stop_probability",
    "sub_goals",
    "word_stems",
    "words",
    "zero_shot_stop_probability",
]
