"""The in-memory form every dataset loader returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from dtdr_agents.foundation.types import Demonstration, Toolset


@dataclass(frozen=True)
class Problem:
    """A sample a loader kept, repaired or skipped, with the reason (file and line if known)."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass(frozen=True)
class Dataset:
    """Demonstrations with their tool catalogue.

    Attributes:
        name: Dataset id (e.g. "taskbench", "sealtools", "demo").
        tools: The tool catalogue.
        demos: The demonstrations, in file order.
        set_valued: True when plans are unordered tool sets (RecTools/MetaTool): such data
            are scored as sets, not per step.
        tool_graph: Optional published tool dependency graph as (source, target) name pairs
            (e.g. TaskBench's `graph_desc.json`).
        problems: Samples the loader reported (kept with a repair, or skipped).
        source: Where the data came from (a path or "embedded").
    """

    name: str
    tools: Toolset
    demos: Sequence[Demonstration]
    set_valued: bool = False
    tool_graph: tuple[tuple[str, str], ...] | None = None
    problems: tuple[Problem, ...] = field(default_factory=tuple)
    source: str = ""

    def __len__(self) -> int:
        return len(self.demos)
