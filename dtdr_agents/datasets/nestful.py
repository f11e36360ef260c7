"""NESTFUL (IBM/NESTFUL ``data/non-executable/``) in its published format.

- ``<name>-data.json`` (e.g. ``non-executable-glaive-data.json``): a JSON array (JSON lines
  are accepted too) of ``{"input": query, "output": [{"name", "arguments", "label"}]}``; the
  calls are the ``output`` entries in order.
- ``<name>-spec.json``: a JSON array of tool specs ``{"name", "description", <arguments>,
  "output_parameters"}`` where the arguments are under ``parameters``, ``query_parameters``
  or ``arguments`` (``{arg: {"type"?, "description", "required"?, "allowed_values"?,
  "default_value"?}}``); turned into JSON schemas. The keys of ``output_parameters`` are the
  tool's `outputs`.

Dependencies. Each call has a ``label`` (``"var1"``) and a later argument ``"$var1$"`` or
``"$var1.field$"`` (alone or inside a longer string) takes that call's output, which is an
edge. With ``order="dependencies"`` (default) those are the edges and unrelated calls are
independent; ``order="recorded"`` gives edges None. Published quirks, each a `Problem`:

- The trailing ``var_result`` entry is not a tool call but NESTFUL's way of naming the final
  answer (its arguments list the results); it is dropped, as documented here, without a
  problem.
- A label given to two calls (``"var1"`` twice): a reference goes to the nearest earlier call
  with that label (the only reading under which the data is consistent); reported.
- A reference to a label no earlier call has: an edge to the first later call with it (then
  `order_plan` reorders), or ignored if no call has it; reported.
- Calls to tools missing from the spec (11 calls in glaive): ``unknown_tools="skip"``
  (default) leaves the sample out; ``"add"`` keeps it with placeholder tools.
- Strings like ``"$100-$200"`` are not references (a label starts with a letter).

``split=None`` on a folder loads every ``*-data.json`` there (glaive, then sgd) with the
union of their specs; ``split="glaive"`` or ``"sgd"`` loads one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Unpack

from pydantic import Field

from dtdr_agents.datasets._intake import Intake, SampleAt
from dtdr_agents.datasets._io import (
    Catalogue,
    DatasetNotFoundError,
    LoadOptions,
    Report,
    add_tool,
    object_schema,
    require_exists,
    require_file,
    start_load,
    text_of,
)
from dtdr_agents.datasets._json import iter_records
from dtdr_agents.datasets._raw import Name, RawRecord, parse
from dtdr_agents.datasets.base import Dataset
from dtdr_agents.datasets.sealtools import PlanOrder

RESULT_PSEUDO_CALL = "var_result"
"""The final ``output`` entry naming the answer; not a tool."""

_REF = re.compile(r"\$([A-Za-z_]\w*)(?:[.\[][^$]*)?\$")
_DATA_SUFFIX = "-data"
_SPEC_SUFFIX = "-spec"
_ARG_KEYS = ("parameters", "query_parameters", "arguments")


class Spec(RawRecord):
    """One tool of a ``*-spec.json`` file.

    The first of ``parameters``, ``query_parameters`` and ``arguments`` that is an object
    maps argument names to their specs.
    """

    name: str = Field(description="the tool's name")
    description: Any = None
    parameters: Any = None
    query_parameters: Any = None
    arguments: Any = None
    output_parameters: Any = None


class Step(RawRecord):
    """One entry of a sample's ``output``: a call, its arguments and its result label."""

    name: Name = Field(description="the called tool's name")
    label: str | None = Field(default=None, description="the result's label, a string")
    arguments: Any = Field(default_factory=dict)


class Sample(RawRecord):
    """One sample of a ``*-data.json`` file (the last ``var_result`` step is not a call)."""

    input: Any = None
    output: list[Step] = Field(description="a list of calls")


def load_nestful(
    path: str | Path,
    *,
    split: str | None = None,
    spec_path: str | Path | None = None,
    order: PlanOrder = "dependencies",
    **options: Unpack[LoadOptions],
) -> Dataset:
    """Load NESTFUL samples and tool specs.

    Args:
        path: The ``non-executable`` folder, or one ``*-data.json`` file (its spec is the
            ``*-spec.json`` next to it unless `spec_path` is given).
        split: ``"glaive"``, ``"sgd"`` (or a full file stem) when `path` is a folder; None
            loads every data file there.
        spec_path: The spec file, when it is not next to the data file.
        order: ``"dependencies"`` (edges from ``$varN$`` references) or ``"recorded"``.
        **options: ``skip_bad``, ``limit``, ``keep_duplicates`` (see `dtdr_agents.datasets`) and
            ``unknown_tools``: Calls to tools missing from the spec: ``"skip"`` the sample
            (default), ``"add"`` placeholder tools, or ``"error"``.

    Returns:
        The dataset (name ``"nestful"``); sample ids are ``<split>-<index>``.

    Raises:
        DatasetNotFoundError: A data or spec file is missing.
        DatasetFormatError: A malformed sample or spec, with ``skip_bad=False``.
    """
    if order not in ("dependencies", "recorded"):
        raise ValueError(f"order must be 'dependencies' or 'recorded', got {order!r}")
    load = start_load("load_nestful", options)
    pairs = _data_and_specs(path, split, spec_path)
    report = load.report
    catalogue = Catalogue()
    raw_specs: dict[str, Any] = {}
    for _, spec in pairs:
        _read_spec(spec, catalogue, report, raw_specs)
    intake = Intake.start(load, catalogue)
    for data_path, _ in pairs:
        prefix = _short_name(data_path)
        for index, line, record in intake.take(iter_records(data_path, report)):
            _add_sample(record, f"{prefix}-{index}", intake.at(data_path, line), order)
    return intake.dataset("nestful", pairs[0][1], ", ".join(str(d) for d, _ in pairs))


def _short_name(data_path: Path) -> str:
    stem = data_path.stem
    if stem.endswith(_DATA_SUFFIX):
        stem = stem[: -len(_DATA_SUFFIX)]
    return stem.removeprefix("non-executable-").removeprefix("executable-")


def _data_and_specs(
    path: str | Path, split: str | None, spec_path: str | Path | None
) -> list[tuple[Path, Path]]:
    p = require_exists(path, "NESTFUL path")
    if p.is_file():
        data_files = [p]
    else:
        found = sorted(p.glob(f"*{_DATA_SUFFIX}.json")) + sorted(p.glob(f"*{_DATA_SUFFIX}.jsonl"))
        if split is not None:
            found = [f for f in found if split in (f.stem, _short_name(f))]
            if not found:
                raise DatasetNotFoundError(
                    f"no NESTFUL data file for split {split!r} (expected e.g. "
                    f"non-executable-{split}-data.json)",
                    str(p),
                )
        if not found:
            raise DatasetNotFoundError("no NESTFUL data files (*-data.json) in this folder", str(p))
        data_files = found
    if spec_path is not None:
        if len(data_files) > 1:
            raise ValueError("spec_path is given but several data files would be read; give one")
        return [(data_files[0], require_file(Path(spec_path), "NESTFUL spec file"))]
    pairs = []
    for data in data_files:
        stem = data.stem
        base = stem[: -len(_DATA_SUFFIX)] if stem.endswith(_DATA_SUFFIX) else stem
        spec = data.with_name(f"{base}{_SPEC_SUFFIX}.json")
        pairs.append((data, require_file(spec, f"NESTFUL spec file for {data.name}")))
    return pairs


def _read_spec(path: Path, catalogue: Catalogue, report: Report, raw: dict[str, Any]) -> None:
    """Add a spec file's tools; `raw` maps names to the spec records read so far.

    A tool listed again with the same record (the glaive spec repeats six) adds nothing and is
    not reported; a different record under a taken name is reported and the first one kept.
    """
    for _, line, record in iter_records(path, report):
        spec = parse(Spec, record, report, path, line)
        if spec is None:
            continue
        name = spec.name
        key, args = next(
            ((k, v) for k in _ARG_KEYS if isinstance(v := getattr(spec, k), Mapping)), ("", {})
        )
        if not all(isinstance(v, Mapping) for v in args.values()):
            report.malformed(f"field {key!r}: each argument must be an object", path, line)
            continue
        required = [a for a, spec in args.items() if spec.get("required") is True]
        desc = spec.description
        outs = spec.output_parameters
        tool = {
            "name": name,
            "description": desc if isinstance(desc, str) else "",
            "parameters": object_schema(args, required),
            "outputs": [str(k) for k in outs if str(k).strip()]
            if isinstance(outs, Mapping)
            else [],
        }
        if name in catalogue:
            if raw.get(name) == record:
                continue
            report.kept(
                f"tool {name!r} is defined differently at {catalogue.first_seen(name)}; kept that "
                "definition",
                path,
                line,
            )
            continue
        add_tool(catalogue, report, tool, path, line)
        raw[name] = record


def _add_sample(record: Any, sample_id: str, at: SampleAt, order: PlanOrder) -> None:
    sample = at.parse(Sample, record)
    if sample is None:
        return
    output = sample.output
    steps = output[:-1] if output and output[-1].name == RESULT_PSEUDO_CALL else output
    calls = [s.name for s in steps]
    if not at.known(calls, "the spec file"):
        return
    edges = None if order == "recorded" else _reference_edges(steps, at)
    at.add(
        sample.input,
        calls,
        edges,
        sample_id,
        cycle="$var references",
        arguments=at.arguments(
            [s.arguments for s in steps], [s.label or None for s in steps], "output[{k}].arguments"
        ),
    )


def _reference_edges(steps: Sequence[Step], at: SampleAt) -> list[tuple[int, int]]:
    """Edges (producer, consumer) from ``$label...$`` arguments."""
    holders: dict[str, list[int]] = {}
    for k, step in enumerate(steps):
        if step.label is not None:
            holders.setdefault(step.label, []).append(k)
    shared = {lab: ps for lab, ps in holders.items() if len(ps) > 1}
    for lab, positions in shared.items():
        at.repaired(
            f"label {lab!r} is given to calls {', '.join(map(str, positions))}; a reference "
            "goes to the nearest earlier call with that label"
        )
    edges: set[tuple[int, int]] = set()
    for j, step in enumerate(steps):
        for text in text_of(step.arguments):
            for lab in _REF.findall(text):
                ks = holders.get(lab)
                if ks is None:
                    if re.fullmatch(r"var\d+", lab):
                        at.kept(
                            f"output[{j}] refers to ${lab}$, which no call is labelled; "
                            "ignored the reference"
                        )
                    continue
                earlier = [k for k in ks if k < j]
                if earlier:
                    edges.add((earlier[-1], j))
                    continue
                later = [k for k in ks if k > j]
                if later:
                    at.repaired(
                        f"output[{j}] refers to ${lab}$ before the call labelled {lab!r} "
                        f"(output[{later[0]}]); moved that call first"
                    )
                    edges.add((later[0], j))
                    continue
                at.kept(f"output[{j}] refers to its own label ${lab}$; ignored the reference")
    return sorted(edges)
