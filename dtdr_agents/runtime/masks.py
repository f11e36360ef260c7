"""The mask modes' prompt text (DTDR paper, Section 5 and Appendix G).

The paper compares four ways of putting the retrieved tools `F_t` into the prompt:

* hard mask: only the retrieved tools are offered to the model;
* soft mask: every tool is offered, and the guidelines name the retrieved ones as preferred;
* weighted hard / weighted soft mask: the same, plus each retrieved tool's probability.

This module is the one place that holds that text: the guidelines and notes added to a
tool-calling model's system message, and Appendix G's function list and selection prompt for
agents that prompt a model with plain text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

from dtdr_agents.foundation.types import Tool, Toolset

MaskMode = Literal["hard", "hard_weighted", "soft", "soft_weighted"]
"""How the retrieved tools reach the model (DTDR paper, Section 5)."""

MASK_MODES: tuple[MaskMode, ...] = get_args(MaskMode)

# --------------------------------------------------------------------------- Appendix G text
FUNCTION_LIST_HEADER = "Set of available functions and their descriptions:"
"""Heads the function list (Appendix G.1-G.3)."""

WEIGHTED_LIST_HEADER = (
    "Set of available functions, their descriptions, and the percentage of times they appear "
    "in the ground truth sequences of training queries right after this current function call "
    "history:"
)
"""Heads the function list of the weighted hard mask (Appendix G.4)."""

CHOOSE_ONE = "You will choose one of the function names above."
"""Closes every function list (Appendix G)."""

_SOFT_INTRO = (
    "To help guide your decision, here is a set of functions extracted from ground truth "
    "sequences of training queries. The functions in this list are functions that have come "
    'right after your latest function call history of "{history}"'
)
_SOFT_WEIGHTED_INTRO = (
    "To help guide your decision, here is a set of functions extracted from ground truth "
    "sequences of training queries, with the percentage of times each has come right after "
    'your latest function call history of "{history}"'
)
_SOFT_OUTRO = "Please use this to guide your decision-making on function selection."
_WEIGHTED_HARD_NOTE = (
    "The functions available at this step, with the percentage of times they appear in the "
    "ground truth sequences of training queries right after this current function call "
    'history of "{history}":'
)
_GUIDELINES_TITLE = "# Soft Mask guidelines"
_TOOL_GUIDANCE_TITLE = "# Tool guidance"


def check_mode(mode: str) -> MaskMode:
    """Validate a mask mode name.

    Args:
        mode: One of `MASK_MODES`.

    Returns:
        The mode, typed.

    Raises:
        ValueError: If `mode` is not a known mode.
    """
    if mode not in MASK_MODES:
        raise ValueError(f"unknown mask mode {mode!r}; choose one of {list(MASK_MODES)}")
    return mode


def binds_all_tools(mode: MaskMode) -> bool:
    """Whether the mode offers every tool to the model (the soft masks)."""
    return check_mode(mode).startswith("soft")


def is_weighted(mode: MaskMode) -> bool:
    """Whether the mode shows the retriever's probabilities."""
    return check_mode(mode).endswith("_weighted")


def format_history(history: Sequence[str], key: Sequence[str] | None = None) -> str:
    """The call history as the paper prints it: a tuple that starts with ``'start'``.

    Args:
        history: Tools called so far, in order.
        key: The history key the retriever used (e.g. DTDR-C's padded Markov key); shown
            instead of the full history when given.

    Returns:
        For example ``('start', 'create_note')``.
    """
    shown = tuple(key) if key else ("start", *history)
    return repr(shown)


def _round(p: float) -> float:
    return round(float(p), 3)


def render_function_list(
    tools: Sequence[Tool],
    probabilities: Mapping[str, float] | None = None,
    *,
    descriptions: bool = True,
) -> str:
    """The Python-literal function list of Appendix G.

    Args:
        tools: The tools to list, in the order to show.
        probabilities: When given, each entry carries its ``'probability'`` (rounded to 3
            decimals), as in the weighted masks.
        descriptions: Include each tool's ``'description'``.

    Returns:
        For example ``[{'function': 'a', 'description': 'Does a', 'probability': 0.714}]``.
    """
    entries: list[dict[str, Any]] = []
    for tool in tools:
        entry: dict[str, Any] = {"function": tool.name}
        if descriptions:
            entry["description"] = tool.description
        if probabilities is not None:
            entry["probability"] = _round(probabilities.get(tool.name, 0.0))
        entries.append(entry)
    return str(entries)


def soft_mask_guidelines(
    preferred: Sequence[str],
    history: Sequence[str] = (),
    *,
    probabilities: Mapping[str, float] | None = None,
    key: Sequence[str] | None = None,
) -> str:
    """The soft-mask guidelines of Appendix G.2 (weighted when `probabilities` is given).

    Args:
        preferred: Retrieved tool names, best first.
        history: Tools called so far, in order.
        probabilities: The retriever's probability of each preferred tool (weighted soft mask).
        key: The history key the retriever used, shown instead of `history`.

    Returns:
        The guidelines text.
    """
    shown = format_history(history, key)
    if probabilities is None:
        intro = _SOFT_INTRO.format(history=shown)
        listing = str(list(preferred))
    else:
        intro = _SOFT_WEIGHTED_INTRO.format(history=shown)
        listing = str(
            [{"function": n, "probability": _round(probabilities.get(n, 0.0))} for n in preferred]
        )
    return f"{_GUIDELINES_TITLE}\n{intro}\nThe list is below:\n{listing}\n{_SOFT_OUTRO}"


def weighted_hard_note(
    bound: Sequence[str],
    probabilities: Mapping[str, float],
    history: Sequence[str] = (),
    *,
    key: Sequence[str] | None = None,
) -> str:
    """The probabilities of the weighted hard mask, for models given the tools through an API.

    The tool schemas (with their descriptions) reach the model through the provider's tool
    list, so only names and probabilities are repeated here (Appendix G.4 adds the
    probability to each entry of the function list).

    Args:
        bound: The tools offered to the model, best first.
        probabilities: The retriever's probability of each.
        history: Tools called so far.
        key: The history key the retriever used, shown instead of `history`.

    Returns:
        The note text.
    """
    head = _WEIGHTED_HARD_NOTE.format(history=format_history(history, key))
    listing = str(
        [{"function": n, "probability": _round(probabilities.get(n, 0.0))} for n in bound]
    )
    return f"{_TOOL_GUIDANCE_TITLE}\n{head}\n{listing}"


def render_selection_prompt(
    query: str,
    history: Sequence[str],
    catalogue: Toolset,
    preferred: Sequence[str],
    probabilities: Mapping[str, float] | None = None,
    *,
    mode: MaskMode = "hard",
    key: Sequence[str] | None = None,
) -> str:
    """The test part of Appendix G's function-selection prompt, for text-only agents.

    Hard masks list only `preferred`; soft masks list the whole catalogue and add the
    guidelines; weighted modes add the probabilities.

    Args:
        query: The user's request.
        history: Tools called so far, in order (shown as the executed plan).
        catalogue: Every tool.
        preferred: Retrieved tool names, best first.
        probabilities: The retriever's probabilities (needed by the weighted modes).
        mode: The mask mode.
        key: The history key the retriever used, shown in the guidelines.

    Returns:
        The prompt text, ending with the executed plan.
    """
    mode = check_mode(mode)
    probs = dict(probabilities or {})
    parts: list[str] = []
    if mode.startswith("hard"):
        shown = [catalogue[catalogue.index(n)] for n in preferred]
        header = WEIGHTED_LIST_HEADER if mode == "hard_weighted" else FUNCTION_LIST_HEADER
        weights = probs if mode == "hard_weighted" else None
        parts.append(f"# Test Functions\n{header}\n{render_function_list(shown, weights)}")
        parts.append(CHOOSE_ONE)
    else:
        parts.append(
            f"# Test Functions\n{FUNCTION_LIST_HEADER}\n{render_function_list(list(catalogue))}"
        )
        parts.append(CHOOSE_ONE)
        weights = probs if mode == "soft_weighted" else None
        parts.append(soft_mask_guidelines(preferred, history, probabilities=weights, key=key))
    plan = "\n".join(f"out_{i} = {name}(...)" for i, name in enumerate(history, start=1))
    parts.append(
        "# Test Task\nNow choose the next function call for this task:\n"
        f"User query: {query!r}.\nExecuted plan so far:{(chr(10) + plan) if plan else ' None'}"
    )
    return "\n\n".join(parts)


__all__ = [
    "CHOOSE_ONE",
    "FUNCTION_LIST_HEADER",
    "MASK_MODES",
    "WEIGHTED_LIST_HEADER",
    "MaskMode",
    "binds_all_tools",
    "check_mode",
    "format_history",
    "is_weighted",
    "render_function_list",
    "render_selection_prompt",
    "soft_mask_guidelines",
    "weighted_hard_note",
]
