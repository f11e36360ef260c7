"""TinyAgent's published data (Hugging Face ``squeeze-ai-lab/TinyAgent-dataset``).

The format, as serialised by ``src/utils/data_utils.py`` of the SqueezeAILab/TinyAgent
repository (``Data.serialize`` / ``DataPoint.serialize`` / ``PlanStep.serialize``):
``training_data.json`` (about 40,000 samples) and ``testing_data.json`` are one JSON object
``{sample_id: {"input": query, "output": [data_point, ...], "closest_5_queries": [...]}}``
where a data point is ``{"type": "plan" | "join" | "replan", "raw_input", "raw_output",
"parsed_output", "id", "index"}``. For a ``"plan"`` point, ``parsed_output`` is the
LLMCompiler plan as ``[{"tool_name": name, "tool_args": [positional args]}, ...]`` ending with
``{"tool_name": "join", ...}``.

Dependencies follow LLMCompiler's rule (``src/llm_compiler/output_parser.py``): step ``k``
needs every earlier step ``i`` whose id appears as ``$i`` or ``${i}`` in its arguments. Step
ids are the numbers of the plan lines (``2. send_sms(["$1"], ...)``) in ``raw_output``
when it can be read, else 1, 2, 3, ... The final ``join`` is LLMCompiler's end-of-plan action;
it becomes the package's own end-of-plan token, so it is not a call (DTDR's "17 tools" for
TinyAgent are the 16 tools plus join). Steps after a ``join`` are dropped, as LLMCompiler's
parser does; that, a plan without ``join``, a sample without a ``"plan"`` point and a
``raw_output`` whose numbering does not match ``parsed_output`` are reported as problems.

The catalogue is not a separate file: the planner prompt in each ``raw_input`` lists the
tools offered (ToolRAG picks a subset per query) as ``"<n>. name(arg: type, ...) -> type"``
followed by ``" - "`` lines, which are read as the tool's description and argument schema.
A called tool never described in any prompt gets no description, reported once. Give
`tools_path` to use your own catalogue instead.

The file is read as a stream (one sample at a time), so the 734 MB training file does not
need to fit in memory as a whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Unpack

from pydantic import Field

from dtdr_agents.datasets._io import (
    Catalogue,
    DatasetNotFoundError,
    LoadOptions,
    Report,
    json_type,
    make_demo,
    read_tools_file,
    require_exists,
    require_file,
    resolve_unknown,
    start_load,
    where,
)
from dtdr_agents.datasets._json import (
    iter_json_object,
)
from dtdr_agents.datasets._raw import Name, RawRecord, parse
from dtdr_agents.datasets.base import Dataset
from dtdr_agents.datasets.plans import PlanCycleError, order_plan
from dtdr_agents.foundation.types import Tool

JOIN = "join"
"""LLMCompiler's final action: the end of the plan."""

FILES = {"train": "training_data.json", "test": "testing_data.json"}
_SPLIT_ALIASES = {"training": "train", "testing": "test"}

_STEP_ID = re.compile(r"\$\{?(\d+)\}?")
_PLAN_LINE = re.compile(r"^\s*(\d+)\. (\w+)\(", re.MULTILINE)
_TOOL_LINE = re.compile(r"^\d+\. (\w+)\((.*)\) -> (.+)$")


class Step(RawRecord):
    """One parsed plan step: the tool and its arguments."""

    tool_name: Name = Field(description="the called tool's name")
    tool_args: Any = Field(default_factory=list)


class PlanEntry(RawRecord):
    """The ``output`` entry of type ``plan``: the model's prompt, raw plan and parsed steps."""

    parsed_output: list[Step] = Field(description="the plan's steps, a list")
    raw_output: Any = None
    raw_input: Any = None


class Sample(RawRecord):
    """One sample (a value of the top-level object; its key is the sample id)."""

    input: Any = None
    output: list[Any] = Field(description="a list of {type, ...} entries")


def load_tinyagent(
    path: str | Path,
    *,
    split: str | None = None,
    tools_path: str | Path | None = None,
    **options: Unpack[LoadOptions],
) -> Dataset:
    """Load TinyAgent plans (LLMCompiler format) with their dependencies.

    Args:
        path: ``training_data.json`` / ``testing_data.json``, or the folder holding them.
        split: ``"train"`` or ``"test"`` for a folder; None reads both files present
            (training first).
        tools_path: A tools file (see `load_jsonl`) to use as the catalogue instead of the
            tool descriptions found in the prompts.
        **options: ``skip_bad``, ``limit``, ``keep_duplicates`` (see `dtdr_agents.datasets`) and
            ``unknown_tools``: With `tools_path`, calls to tools it lacks: ``"skip"`` the sample
            (default), ``"add"`` placeholders, or ``"error"``. JSON syntax errors always raise
            (the file is one JSON document).

    Returns:
        The dataset (name ``"tinyagent"``); demonstration ids are the sample keys.

    Raises:
        DatasetNotFoundError: No data file found.
        DatasetFormatError: Invalid JSON, or a malformed sample with ``skip_bad=False``.
    """
    load = start_load("load_tinyagent", options)
    policy = load.policy
    files = _data_files(path, split)
    report = load.report
    if tools_path is not None:
        catalogue: Catalogue | None = read_tools_file(Path(tools_path), report)
    else:
        catalogue = None
    described: dict[str, Tool] = {}
    first_call: dict[str, str] = {}
    out = load.collector()
    for data_path in files:
        for key, line, value in iter_json_object(data_path):
            if out.full:
                break
            parsed = _parse_sample(key, value, data_path, line, report)
            if parsed is None:
                continue
            query, calls, edges, raw_input = parsed
            if catalogue is not None:
                if not resolve_unknown(
                    calls, catalogue, policy, report, data_path, line, f"{tools_path}"
                ):
                    continue
            elif any(c not in described for c in calls):
                for name, tool in _tools_in_prompt(raw_input).items():
                    described.setdefault(name, tool)
            try:
                plan = order_plan(calls, edges)
            except PlanCycleError as exc:  # cannot happen with backward-only $ids; kept safe
                report.skipped(f"dependencies: {exc}", data_path, line)
                continue
            demo = make_demo(report, data_path, line, query, plan.calls, plan.edges, key)
            if demo is not None and out.add(demo, data_path, line):
                for c in demo.calls:
                    first_call.setdefault(c, where(data_path, line))
    if catalogue is None:
        catalogue = Catalogue()
        missing = []
        for name, here in first_call.items():
            if name in described:
                catalogue.add(described[name], here)
            else:
                catalogue.add_placeholder(name, here)
                missing.append(name)
        if missing:
            report.kept(
                f"no description of {', '.join(map(repr, missing))} in any prompt "
                "(raw_input); added without a description",
                files[0],
            )
    return Dataset(
        name="tinyagent",
        tools=catalogue.toolset(files[0]),
        demos=tuple(out.demos),
        problems=report.problems,
        source=", ".join(str(f) for f in files),
    )


def _data_files(path: str | Path, split: str | None) -> list[Path]:
    p = require_exists(path, "TinyAgent path")
    if p.is_file():
        return [p]
    if split is not None:
        key = _SPLIT_ALIASES.get(split, split)
        name = FILES.get(key, f"{split}.json")
        return [require_file(p / name, f"TinyAgent {split!r} file")]
    found = [p / name for name in FILES.values() if (p / name).is_file()]
    if not found:
        raise DatasetNotFoundError(
            f"no TinyAgent data file ({' or '.join(FILES.values())}) in this folder", str(p)
        )
    return found


def _parse_sample(
    key: str, value: Any, path: Path, line: int, report: Report
) -> tuple[Any, list[str], list[tuple[int, int]], Any] | None:
    """(query, calls, edges, raw_input) of one sample, or None (reported)."""
    label = f"sample {key!r}: "
    sample = parse(Sample, value, report, path, line, prefix=label)
    if sample is None:
        return None
    plans = [
        (k, o)
        for k, o in enumerate(sample.output)
        if isinstance(o, Mapping) and o.get("type") == "plan"
    ]
    if not plans:
        report.skipped(f"sample {key!r} has no 'plan' entry in 'output'", path, line)
        return None
    if len(plans) > 1:
        report.kept(f"sample {key!r} has {len(plans)} 'plan' entries; used the first", path, line)
    at, raw_plan = plans[0]
    point = parse(PlanEntry, raw_plan, report, path, line, at=f"output[{at}]", prefix=label)
    if point is None:
        return None
    names = [step.tool_name for step in point.parsed_output]
    args = [step.tool_args for step in point.parsed_output]
    ids = _step_ids(point.raw_output, names, key, report, path, line)
    if JOIN in names:
        end = names.index(JOIN)
        if end < len(names) - 1:
            report.repaired(
                f"sample {key!r}: dropped {len(names) - end - 1} step(s) after join() "
                "(LLMCompiler stops at join)",
                path,
                line,
            )
    else:
        end = len(names)
        report.kept(f"sample {key!r}: the plan does not end with join()", path, line)
    edges: list[tuple[int, int]] = []
    for j in range(end):
        used = {int(m) for m in _STEP_ID.findall(json.dumps(args[j], ensure_ascii=False))}
        edges.extend((i, j) for i in range(j) if ids[i] in used and ids[i] < ids[j])
    return sample.input, names[:end], edges, point.raw_input


def _step_ids(
    raw_output: Any, names: Sequence[str], key: str, report: Report, path: Path, line: int
) -> list[int]:
    """The plan-line numbers of the steps (from raw_output), or 1, 2, 3, ..."""
    default = list(range(1, len(names) + 1))
    if not isinstance(raw_output, str):
        return default
    found = [(int(n), name) for n, name in _PLAN_LINE.findall(raw_output)]
    if [name for _, name in found[: len(names)]] == list(names) and len(found) >= len(names):
        return [n for n, _ in found[: len(names)]]
    report.kept(
        f"sample {key!r}: the step numbers in raw_output do not match parsed_output; "
        "assumed the steps are numbered 1, 2, 3, ...",
        path,
        line,
    )
    return default


def _prompt_text(raw_input: Any) -> str:
    if isinstance(raw_input, str):
        return raw_input
    if isinstance(raw_input, Mapping):
        content = raw_input.get("content")
        return content if isinstance(content, str) else ""
    if isinstance(raw_input, list):
        return "\n".join(_prompt_text(m) for m in raw_input)
    return ""


def _tools_in_prompt(raw_input: Any) -> dict[str, Tool]:
    """The tools an LLMCompiler planner prompt lists, with descriptions and argument schemas."""
    tools: dict[str, Tool] = {}
    lines = _prompt_text(raw_input).splitlines()
    k = 0
    while k < len(lines):
        m = _TOOL_LINE.match(lines[k])
        k += 1
        if m is None or m.group(1) == JOIN:
            continue
        bullets = []
        while k < len(lines) and lines[k].lstrip().startswith("- "):
            bullets.append(lines[k].lstrip()[2:].strip())
            k += 1
        tools.setdefault(
            m.group(1),
            Tool(
                name=m.group(1),
                description=" ".join(b for b in bullets if b),
                parameters=_signature_schema(m.group(2)),
            ),
        )
    return tools


def _signature_schema(signature: str) -> dict[str, Any]:
    """JSON schema of ``"title: str, invitees: list[str]"`` (all arguments required)."""
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in signature:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    props: dict[str, Any] = {}
    for part in parts:
        name, _, annotation = part.partition(":")
        name = name.split("=")[0].strip()
        if name.isidentifier():
            props[name] = json_type(annotation.split("=")[0].strip())
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if props:
        schema["required"] = list(props)
    return schema
