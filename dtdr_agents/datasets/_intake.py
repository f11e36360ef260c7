"""One sample of a load call, where it was read, and where it goes.

A loader reads records one by one; each becomes a `SampleAt`: the file and line it came
from, with the load call's catalogue, unknown-tools policy, problem report and collector. Its
methods are the steps every loader takes (parse the record, check its tools, add its plan),
so a loader's per-sample code names only what its format adds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from dtdr_agents.datasets._io import (
    Catalogue,
    Collector,
    Load,
    Report,
    UnknownTools,
    call_arguments,
    make_demo,
    resolve_unknown,
)
from dtdr_agents.datasets._raw import RawRecord, parse
from dtdr_agents.datasets.base import Dataset
from dtdr_agents.datasets.plans import PlanCycleError, order_plan
from dtdr_agents.foundation.types import CallArguments

M = TypeVar("M", bound=RawRecord)
R = TypeVar("R")

Arguments = Callable[[Sequence[int]], Sequence[CallArguments] | None]
"""A sample's recorded arguments in a given call order (`add_plan`'s ``arguments``)."""


@dataclasses.dataclass(frozen=True)
class Intake:
    """Where one load call's samples go: its catalogue, policy, report and collector."""

    catalogue: Catalogue
    policy: UnknownTools
    report: Report
    out: Collector

    @classmethod
    def start(cls, load: Load, catalogue: Catalogue) -> Intake:
        """The intake of `load` (its policy, report and a new collector) into `catalogue`."""
        return cls(catalogue, load.policy, load.report, load.collector())

    def take(self, records: Iterable[R]) -> Iterator[R]:
        """The `records`, until the collector is full (``limit``)."""
        for record in records:
            if self.out.full:
                return
            yield record

    def dataset(self, name: str, tools_file: Path, source: str, **extra: Any) -> Dataset:
        """The loaded dataset: the catalogue (read from `tools_file`), samples and problems."""
        return Dataset(
            name=name,
            tools=self.catalogue.toolset(tools_file),
            demos=tuple(self.out.demos),
            problems=self.report.problems,
            source=source,
            **extra,
        )

    def at(self, path: Path, line: int | None) -> SampleAt:
        """The sample read from `path` at `line`."""
        return SampleAt(self, path, line)


@dataclasses.dataclass(frozen=True)
class SampleAt:
    """One sample: the file and line it was read from, and the intake it goes to."""

    intake: Intake
    path: Path
    line: int | None

    @property
    def report(self) -> Report:
        """The load call's problem report."""
        return self.intake.report

    def malformed(self, message: str) -> None:
        """The sample does not follow the format: raise, or skip it and record why."""
        self.report.malformed(message, self.path, self.line)

    def skipped(self, message: str) -> None:
        """Record that the well-formed sample is left out on purpose."""
        self.report.skipped(message, self.path, self.line)

    def kept(self, message: str) -> None:
        """Record that the sample is kept as published, with a remark."""
        self.report.kept(message, self.path, self.line)

    def repaired(self, message: str) -> None:
        """Record that the sample is kept after a documented repair."""
        self.report.repaired(message, self.path, self.line)

    def parse(self, model: type[M], record: Any) -> M | None:
        """`record` as a `model`, or None once reported as malformed (`_raw.parse`)."""
        return parse(model, record, self.report, self.path, self.line)

    def known(self, calls: Sequence[str], catalogue_label: str) -> bool:
        """Apply the ``unknown_tools`` policy to the sample's calls; True if it is kept."""
        intake = self.intake
        return resolve_unknown(
            calls,
            intake.catalogue,
            intake.policy,
            self.report,
            self.path,
            self.line,
            catalogue_label,
        )

    def arguments(
        self, values: Sequence[Any], labels: Sequence[str | None], field: str
    ) -> Arguments:
        """The sample's recorded arguments (`call_arguments`), read in the plan's order."""
        return lambda order: call_arguments(
            values, labels, field, self.report, self.path, self.line, order
        )

    def add(
        self,
        query: Any,
        calls: Sequence[str],
        edges: Iterable[tuple[int, int]] | None,
        sample_id: str | None,
        *,
        cycle: str,
        arguments: Arguments,
    ) -> None:
        """Order the calls by `edges` and add the sample; a cycle skips it (``cycle: ...``).

        `arguments` gets the plan's order (`OrderedPlan.order`) and gives the calls' arguments
        in that order (or None).
        """
        path, line, out = self.path, self.line, self.intake.out
        try:
            plan = order_plan(calls, edges)
        except PlanCycleError as exc:
            self.report.skipped(f"{cycle}: {exc}", path, line)
            return
        demo = make_demo(
            self.report, path, line, query, plan.calls, plan.edges, sample_id, arguments(plan.order)
        )
        if demo is not None:
            out.add(demo, path, line)
