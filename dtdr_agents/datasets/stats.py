"""Dataset statistics in the style of the DTDR paper's Table 5.

Table 5 reports, per dataset: the number of plans, the number of tools, tool calls per plan
and tool dependencies per plan (mean ± std), where "a tool dependency" is a call whose
parameter is the output of an earlier call: an edge of the plan. `dataset_stats` gives the
same plus the tools actually used, the longest plan and the problems the loader reported.

Conventions: calls are counted without the end-of-plan token (DTDR's tool counts include it
as a tool, e.g. 23 + 1 = 24 for TaskBench-HuggingFace: see ``tools_with_end``); standard
deviations are population standard deviations; dependencies are averaged over the plans that
have edges (``edges=None`` means "recorded order only", for which no dependency count exists;
set-valued datasets have none).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dtdr_agents.datasets.base import Dataset, Problem
from dtdr_agents.foundation.words import plural


def _mean_std(values: Sequence[int]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / len(values)
    return mean, math.sqrt(var)


def problems_by_action(problems: Iterable[Problem]) -> dict[str, int]:
    """Count problems by what the loader did (``skipped``, ``repaired``, ``kept``, ``other``)."""
    actions: Counter[str] = Counter()
    for p in problems:
        head, sep, _ = p.message.partition(":")
        actions[head if sep and " " not in head else "other"] += 1
    return dict(sorted(actions.items()))


def problem_summary(problems: Sequence[Problem]) -> str:
    """One line for the command line, e.g. "167 problems (kept 24, repaired 4, skipped 139)"."""
    counts = problems_by_action(problems)
    detail = ", ".join(f"{action} {n}" for action, n in counts.items())
    return f"{plural(len(problems), 'problem')} ({detail})"


def dataset_stats(ds: Dataset) -> dict[str, Any]:
    """Table-5-style statistics of a dataset.

    Args:
        ds: The dataset.

    Returns:
        A plain dict: ``name``, ``plans``, ``tools`` (catalogue size), ``tools_with_end``
        (catalogue + the end-of-plan token, as DTDR counts), ``tools_used``,
        ``calls_mean``, ``calls_std``, ``max_calls``, ``plans_with_edges``,
        ``dependencies_mean``, ``dependencies_std`` (None when no plan has edges),
        ``set_valued``, ``tool_graph_edges`` (None without a tool graph), ``problems`` and
        ``problems_by_action`` (``{"skipped": n, "repaired": n, "kept": n, ...}``).
    """
    calls = [len(d.calls) for d in ds.demos]
    deps = [len(d.edges) for d in ds.demos if d.edges is not None]
    used = {c for d in ds.demos for c in d.calls}
    calls_mean, calls_std = _mean_std(calls)
    deps_mean, deps_std = _mean_std(deps) if not ds.set_valued else (None, None)
    return {
        "name": ds.name,
        "plans": len(ds.demos),
        "tools": len(ds.tools),
        "tools_with_end": len(ds.tools) + 1,
        "tools_used": len(used),
        "calls_mean": calls_mean,
        "calls_std": calls_std,
        "max_calls": max(calls, default=0),
        "plans_with_edges": len(deps),
        "dependencies_mean": deps_mean,
        "dependencies_std": deps_std,
        "set_valued": ds.set_valued,
        "tool_graph_edges": None if ds.tool_graph is None else len(ds.tool_graph),
        "problems": len(ds.problems),
        "problems_by_action": problems_by_action(ds.problems),
    }


def _pm(mean: Any, std: Any) -> str:
    if mean is None or std is None:
        return "-"
    return f"{mean:.2f}±{std:.2f}"


def format_stats(stats: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> str:
    """A plain-text table of one or more `dataset_stats` results (one row per dataset).

    Args:
        stats: One stats dict, or several.

    Returns:
        The table, columns as in DTDR's Table 5 (means and standard deviations with two
        decimals) plus tools used, longest plan and problems.
    """
    rows = [stats] if isinstance(stats, Mapping) else list(stats)
    header = (
        "Dataset",
        "# Plans",
        "# Tools",
        "# Tool calls per plan",
        "# Tool dependencies per plan",
        "Tools used",
        "Max calls",
        "Problems",
    )
    table = [header]
    for s in rows:
        problems = str(s["problems"])
        by_action = s.get("problems_by_action") or {}
        if by_action:
            problems += " (" + ", ".join(f"{k} {v}" for k, v in by_action.items()) + ")"
        deps = _pm(s["dependencies_mean"], s["dependencies_std"])
        if deps != "-" and s["plans_with_edges"] < s["plans"]:
            deps += f" ({s['plans_with_edges']} plans)"
        table.append(
            (
                str(s["name"]) + (" (sets)" if s.get("set_valued") else ""),
                str(s["plans"]),
                str(s["tools"]),
                _pm(s["calls_mean"], s["calls_std"]),
                deps,
                str(s["tools_used"]),
                str(s["max_calls"]),
                problems,
            )
        )
    widths = [max(len(r[k]) for r in table) for k in range(len(header))]
    lines = []
    for i, r in enumerate(table):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
