"""A request's clauses: the sub-goals a multi-step request usually states one per clause.

Framework-free and import-light: the hybrid's `clause_*` features and the shared stop rule both
split requests this way.
"""

from __future__ import annotations

import re

MAX_CLAUSES = 16
"""Clauses of a request kept (the first ones)."""

_CLAUSE_SPLIT = re.compile(
    r"[.;!?]+\s+|,?\s+(?:and then|then|after that|afterwards|finally|next|and)\s+|,\s+",
    re.IGNORECASE,
)


def request_clauses(query: str, limit: int = MAX_CLAUSES) -> list[str]:
    """The request split into clauses of at least three words (sentences, "then", "and").

    A multi-step request usually states one sub-goal per clause; the hybrid's `clause_*`
    features ask which clauses the calls so far have not covered. A request without such a
    split is one clause.
    """
    parts = [p.strip() for p in _CLAUSE_SPLIT.split(query) if p and len(p.split()) >= 3]
    return parts[:limit] or [query]


__all__ = ["MAX_CLAUSES", "request_clauses"]
