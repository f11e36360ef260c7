# ruff: noqa: E501  (the paper's prompts, verbatim)
"""PTR's functional-coverage-mapping prompts (paper 004, Appendix F), in one place.

The wording of the two prompts is the paper's (Appendix F.1 and F.2, as in the PTR code's
`promptE.py`); each ends with one added sentence asking for JSON, so that an answer can be
checked instead of scraped line by line. Steps 3 and 4 (completeness and unsolved problems)
are computed from the two answers, as in the PTR code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

EXTRACT_REQUIREMENTS = """You are an assistant helping to extract key requirements from user queries.

Example 1:
User Query:
"I want a website where users can create accounts, post messages, and follow other users."

Key Requirements:
- Users can create accounts
- Users can post messages
- Users can follow other users

Example 2:
User Query:
"I need an e-commerce platform that supports product listings, shopping cart functionality, payment processing, and order tracking."

Key Requirements:
- Supports product listings
- Provides shopping cart functionality
- Handles payment processing
- Offers order tracking

Now, given the following user query, extract the key requirements.

User Query:
"{query}"

Key Requirements:
"""
"""Appendix F.1: Extraction of Key Functionalities (`{query}`)."""

MATCH_TOOLS = """You are an assistant helping to match tools to requirements, as long as the tool description can roughly provid the needed information for requirments, it does not need to be very specific, ignore the proper nouns.

Available Tools:
{tools}
Example 1:
Requirement:
"I want to know the latest news about Tesla"

Matched Tools:
- NewsTool: Stay connected to global events with our up-to-date news around the world.

Example 2:
Requirement:
"Please provide me with the current stock price of Apple"

Matched Tools:
- FinanceTool: Stay informed with the latest financial updates, real-time insights, and analysis on a wide range of options, stocks, cryptocurrencies, and more.

Now, for the following requirement, list the tools from the available tools that can fulfill it.

Requirement:
"{requirement}"

Matched Tools:
"""
"""Appendix F.2: Matching Tools to Functionalities (`{tools}`, `{requirement}`)."""

JSON_REQUIREMENTS = (
    'Answer with only a JSON array of strings, one per key requirement, e.g. ["...", "..."].'
)
"""Added to F.1 so the answer can be checked."""
JSON_MATCHES = (
    "Answer with only a JSON array of the matched tool names exactly as listed above, "
    'e.g. ["NewsTool"], or [] when no tool fulfils the requirement.'
)
"""Added to F.2 so the answer can be checked."""

_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


class MalformedAnswerError(ValueError):
    """A coverage-mapping answer that cannot be used (the offline path takes over)."""


def requirements_prompt(query: str) -> str:
    """The F.1 prompt for `query`, with the JSON instruction."""
    return EXTRACT_REQUIREMENTS.format(query=query) + "\n" + JSON_REQUIREMENTS


def matching_prompt(requirement: str, tools: Mapping[str, str]) -> str:
    """The F.2 prompt for one requirement over `tools` (name -> description)."""
    listing = "".join(f"- **{name}**: {desc}\n" for name, desc in tools.items())
    return MATCH_TOOLS.format(tools=listing, requirement=requirement) + "\n" + JSON_MATCHES


def _json_list(answer: str, what: str) -> list[str]:
    text = answer.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedAnswerError(
            f"the {what} answer is not JSON ({exc.msg}): {answer[:80]!r}"
        ) from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MalformedAnswerError(
            f"the {what} answer must be a JSON array of strings: {answer[:80]!r}"
        )
    return [v.strip() for v in value if v.strip()]


def parse_requirements(answer: str) -> list[str]:
    """The requirements of an F.1 answer (a non-empty JSON array of strings).

    Raises:
        MalformedAnswerError: Not JSON, not an array of strings, or empty.
    """
    reqs = list(dict.fromkeys(_json_list(answer, "requirements")))
    if not reqs:
        raise MalformedAnswerError("the requirements answer is an empty list")
    return reqs


def parse_matches(answer: str, offered: Sequence[str], catalogue: Sequence[str]) -> list[str]:
    """The matched tool names of an F.2 answer, restricted to the `offered` tools.

    Raises:
        MalformedAnswerError: Not JSON, not an array of strings, or a name outside `catalogue`.
    """
    names = _json_list(answer, "tool matching")
    known = set(catalogue)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise MalformedAnswerError(
            f"the tool matching answer names tools outside the catalogue: {unknown}"
        )
    allowed = set(offered)
    return [n for n in dict.fromkeys(names) if n in allowed]
