"""The demo dataset as data: its tools, slot values and task templates ("intents").

The tables live in ``demo_data.json`` beside this module (package data); this module
loads them once, as tuples.

`dtdr_agents.datasets.synthetic` turns these tables into demonstrations. A tool is
``(name, description, required, parameters)``, each parameter ``(type, description[, extra
JSON-schema keywords])`` with ``string[]`` for a list of strings. An intent is a tool family's
dependency pattern: its weight (how common it is), its plan and its query paraphrases
(``{slot}`` placeholders, filled from `POOLS`; ``{x2}`` is a value different from ``{x}``).

A plan is its steps separated by spaces; a step is
``[label=]tool[*people|*people2]@stage[|stage...][<label,label...]``:

- ``*people``: one call per person the query names (1-3 people; ``*people2``: 1-2), all
  steps of one intent naming the same people;
- ``@1`` the stage (calls of one stage are recorded in a shuffled order); ``@0|1|1`` a stage
  drawn from these choices;
- ``<f,m`` the steps (by label) whose output the call needs: the demonstration's edges.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, NamedTuple

ToolRow = tuple[str, str, tuple[str, ...], dict[str, tuple[Any, ...]]]


class Intent(NamedTuple):
    """A task template: name, relative frequency, plan steps, query paraphrases."""

    name: str
    weight: float
    plan: str
    paraphrases: tuple[str, ...]


def _load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        resources.files(__package__).joinpath("demo_data.json").read_text(encoding="utf-8")
    )
    return data


_DATA = _load()

TOOLS: tuple[ToolRow, ...] = tuple(
    (
        t["name"],
        t["description"],
        tuple(t["required"]),
        {p: tuple(spec) for p, spec in t["parameters"].items()},
    )
    for t in _DATA["tools"]
)
"""The demo catalogue: 21 personal-assistant tools in the style of TinyAgent."""

POOLS: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in _DATA["pools"].items()}
"""Slot values by slot name (``{pdf}`` is drawn from `PDF_STEMS`)."""

PEOPLE: tuple[str, ...] = POOLS["person"]
"""The people a query may name (the ``{person}`` pool)."""

PDF_STEMS: tuple[str, ...] = tuple(_DATA["pdf_stems"])
"""File-name stems of the ``{pdf}`` slot."""

WRAPPERS: tuple[tuple[str, float], ...] = tuple((w, float(x)) for w, x in _DATA["wrappers"])
"""Politeness forms of a query (``{C}``/``{c}``: the clause capitalised or not), weighted."""

INTENTS: tuple[Intent, ...] = tuple(
    Intent(i["name"], float(i["weight"]), i["plan"], tuple(i["paraphrases"]))
    for i in _DATA["intents"]
)
"""The task templates, each a tool family's dependency pattern."""
