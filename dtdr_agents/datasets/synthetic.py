"""The embedded demonstration set used by `dtdr-agents demo`: procedural, offline, seeded.

A personal-assistant domain in the style of TinyAgent (contacts, email, SMS, calendar, notes,
reminders, files, PDF summaries, maps, weather, web search, Zoom, translation). Each demonstration
comes from one of a few dozen task templates ("intents"): a query paraphrase with filled slots
(people, files, notes, dates, places, topics) and a plan of calls with their data dependencies.

The data is built so that history-aware retrieval matters, as in real agent traces:

* repeated calls: one `get_email_address` / `get_phone_number` per person the query names;
* branching after a shared prefix: many intents start with `open_file -> summarize_pdf` (or
  `get_current_location -> maps_show_directions`, `web_search`, ...) and then diverge, so the
  last call alone does not determine the next tool but the request and the longer history do;
* parallel calls with a joint successor: e.g. several address look-ups all feeding
  `compose_email`; the recorded order of the calls of a stage is shuffled and `edges` keep the
  real dependencies, so a step can have several acceptable next tools;
* plans of 1 to 7 calls, common and rare intents, and paraphrases shared between intents
  ("send it to Bob" by email or by text) so the query alone is sometimes ambiguous.

The tools, slot values and templates are tables in `dtdr_agents.datasets.demo_data`; this
module is the generator. Everything is derived from `random.Random(seed)`: the same
`(n, seed)` gives the same dataset.
"""

from __future__ import annotations

import operator
import random
from typing import Any

from dtdr_agents.datasets.base import Dataset
from dtdr_agents.datasets.demo_data import INTENTS, PDF_STEMS, PEOPLE, POOLS, TOOLS, WRAPPERS
from dtdr_agents.foundation.types import Demonstration, Tool, Toolset

__all__ = ["DEMO_INTENTS", "DEMO_TOOLS", "make_demo_dataset"]


def _property(kind: str, description: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A JSON-schema property from a table entry (``string[]``: an array of strings)."""
    if kind == "string[]":
        return {"type": "array", "items": {"type": "string"}, "description": description}
    return {"type": kind, "description": description, **(extra or {})}


DEMO_TOOLS: tuple[Tool, ...] = tuple(
    Tool(
        name,
        description,
        {
            "type": "object",
            "properties": {p: _property(*spec) for p, spec in params.items()},
            "required": list(required),
        },
    )
    for name, description, required, params in TOOLS
)
"""The tool catalogue of the demo dataset (21 personal-assistant tools)."""

DEMO_INTENTS: tuple[str, ...] = tuple(i.name for i in INTENTS)
"""Names of the task templates the demo dataset draws from."""


class _Slots(dict[str, str]):
    """Slot values of one query, drawn on first use; `x2` draws a value different from `x`."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.rng = rng
        self.n_people: int | None = None

    def __missing__(self, key: str) -> str:
        if key == "pdf":
            stem = self.rng.choice(PDF_STEMS)
            value = f'"{stem}.pdf"' if self.rng.random() < 0.5 else f"{stem}.pdf"
        elif key.endswith("2") and key[:-1] in POOLS:
            first = self[key[:-1]]
            value = self.rng.choice([v for v in POOLS[key[:-1]] if v != first])
        elif key in POOLS:
            value = self.rng.choice(POOLS[key])
        else:
            raise KeyError(key)
        self[key] = value
        return value

    def people(self, top: int) -> int:
        """How many people the query names: drawn once (usually one, sometimes up to `top`)."""
        if self.n_people is None:
            k = self.rng.choices((1, 2, 3)[:top], weights=(0.45, 0.35, 0.2)[:top])[0]
            names = self.rng.sample(PEOPLE, k)
            self["people"] = names[0] if k == 1 else ", ".join(names[:-1]) + " and " + names[-1]
            self["person"] = names[0]
            self.n_people = k
        return self.n_people


def _wrap(rng: random.Random, clause: str) -> str:
    """Turn an imperative clause into a sentence with a random politeness wrapper."""
    forms = [w for w, _ in WRAPPERS]
    form = rng.choices(forms, weights=[w for _, w in WRAPPERS])[0]
    return form.format(C=clause[:1].upper() + clause[1:], c=clause)


def _plan(
    steps: str, rng: random.Random, slots: _Slots
) -> tuple[list[str], list[int], list[tuple[int, ...]]]:
    """The calls of a plan (see `demo_data`): tools, stages and dependencies by call."""
    tools: list[str] = []
    stages: list[int] = []
    deps: list[tuple[int, ...]] = []
    labels: dict[str, list[int]] = {}
    for step in steps.split():
        label, _, step = step.rpartition("=")
        step, _, needs = step.partition("<")
        call, _, stage_choices = step.partition("@")
        tool, _, people = call.partition("*")
        count = slots.people(2 if people == "people2" else 3) if people else 1
        choices = [int(c) for c in stage_choices.split("|")]
        stage = choices[0] if len(choices) == 1 else rng.choice(choices)
        before = tuple(d for name in needs.split(",") if name for d in labels[name])
        if any(stages[d] >= stage for d in before):
            raise AssertionError(f"{tool}: a dependency is not in an earlier stage")
        first = len(tools)
        for _ in range(count):
            tools.append(tool)
            stages.append(stage)
            deps.append(before)
        if label:
            labels[label] = list(range(first, len(tools)))
    return tools, stages, deps


def _record(
    plan: tuple[list[str], list[int], list[tuple[int, ...]]], rng: random.Random
) -> tuple[tuple[str, ...], tuple[tuple[int, int], ...]]:
    """The recorded call order (stages in order, shuffled within) and the remapped edges."""
    tools, stages, deps = plan
    keys = [(s, rng.random()) for s in stages]
    order = sorted(range(len(tools)), key=lambda i: keys[i])
    pos = {node: p for p, node in enumerate(order)}
    calls = tuple(tools[i] for i in order)
    edges = tuple(sorted((pos[d], pos[j]) for j in range(len(tools)) for d in deps[j]))
    return calls, edges


def _generate(n: int, seed: int) -> list[tuple[str, Demonstration]]:
    """`n` (intent name, demonstration) pairs drawn with `random.Random(seed)`."""
    try:
        count = operator.index(n)
    except TypeError:
        count = 0
    if isinstance(n, bool) or count < 1:
        raise ValueError(f"n must be a positive integer (number of demonstrations), got {n!r}")
    n = count
    rng = random.Random(seed)
    weights = [i.weight for i in INTENTS]
    width = max(5, len(str(n)))
    out: list[tuple[str, Demonstration]] = []
    for k in range(1, n + 1):
        intent = rng.choices(INTENTS, weights=weights)[0]
        slots = _Slots(rng)
        plan = _plan(intent.plan, rng, slots)
        query = _wrap(rng, rng.choice(intent.paraphrases).format_map(slots))
        calls, edges = _record(plan, rng)
        demo = Demonstration(query=query, calls=calls, edges=edges, id=f"demo-{k:0{width}d}")
        out.append((intent.name, demo))
    return out


def make_demo_dataset(n: int = 2400, seed: int = 0) -> Dataset:
    """Build the embedded demo dataset: `n` personal-assistant demonstrations.

    Each demonstration is a query drawn from one of `DEMO_INTENTS` (weighted: some intents
    are common, some rare) with slots filled in, and the plan of calls that answers it, with
    its data dependencies as `edges` (calls of one stage, such as contact look-ups, are
    recorded in a shuffled order). No file or network access; fully determined by `seed`.

    Args:
        n: Number of demonstrations (at least 1).
        seed: Seed of the `random.Random` generator that draws everything.

    Returns:
        A `Dataset` named "demo" with source "embedded", the `DEMO_TOOLS` catalogue and
        demonstrations with ids "demo-00001", "demo-00002", ...

    Raises:
        ValueError: If `n` is not a positive integer.
    """
    demos = tuple(demo for _, demo in _generate(n, seed))
    return Dataset(name="demo", tools=Toolset(DEMO_TOOLS), demos=demos, source="embedded")
