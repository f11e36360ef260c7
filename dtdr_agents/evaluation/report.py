"""Results of seeded runs as JSON, text tables and Markdown: `demo`, `bench` and `report`.

A run fits and scores every retriever once per seed (`dtdr_agents.evaluation.protocol`); the report
keeps, per retriever under ``results.<id>``, the mean over seeds of every figure, the 95%
bootstrap interval over requests of `tool_mrr` and `stop_f1` (`dtdr_agents.evaluation.intervals`),
each seed's figure, and the seeds. ``comparisons`` holds the paired differences between `hybrid`
and every other retriever of the run. ``provenance`` records the command line, the package
version, the git commit, the core count and the seeds; ``protocol`` names the protocol.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dtdr_agents._version import __version__
from dtdr_agents.evaluation.intervals import estimate, paired_difference, verdict
from dtdr_agents.evaluation.protocol import PROTOCOL, EvalResult
from dtdr_agents.foundation.atomic import atomic_write_text

ANCHOR = "hybrid"
"""The retriever every other one is compared with (paired bootstrap), when it is in the run."""

COLUMNS: tuple[tuple[str, str], ...] = (
    ("tool_mrr", "tool_mrr"),
    ("tool_mrr_ci", "95% CI"),
    ("tool_top1", "top1"),
    ("tool_f1", "f1"),
    ("tool_recall@5", "recall@5"),
    ("tool_ndcg@10", "ndcg@10"),
    ("stop_f1", "stop_f1"),
    ("end_first_at_tool_steps", "end_first"),
    ("paper_mrr", "paper_mrr"),
    ("tracc", "tracc"),
    ("size_error", "size_error"),
    ("ms_per_step", "ms_per_step"),
    ("fit_s", "fit_s"),
)
"""(JSON key, header) of the results tables, in order."""

STOP_COLUMNS = ("stop_f1", "end_first_at_tool_steps")
"""Columns of sequential data only (set-valued data has no end of plan)."""
SET_COLUMNS = ("tracc", "size_error")
"""Columns of set-valued data only (the recommended set's TRACC and size error)."""

LEGEND = (
    "tool_mrr, top1, f1 (F1@k, k = gold set size), recall@5, ndcg@10: tools ranked alone at "
    "steps that need a tool; 95% CI: bootstrap over requests; stop_f1: the stop decision "
    "(end-of-plan ranked first; the shared stop rule for retrievers marked *); end_first: "
    "share of tool steps where end-of-plan came first; paper_mrr: end-of-plan ranked among "
    "the tools (paper protocol)."
)

SEEDED = ("tool_mrr", "stop_f1")
"""Figures reported with an interval (`<key>_ci`)."""


def _mean(values: Sequence[Any]) -> Any:
    nums = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    nums = [v for v in nums if not math.isnan(v)]
    return sum(nums) / len(nums) if nums else None


def _mean_dicts(dicts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    keys = list(dict.fromkeys(k for d in dicts for k in d))
    return {k: _mean([d[k] for d in dicts if k in d]) for k in keys}


def seeded_entry(
    runs: Sequence[EvalResult],
    seeds: Sequence[int],
    *,
    same_requests: bool,
    breakdowns: bool = False,
) -> dict[str, Any]:
    """One retriever's figures over its seeds' runs (means, intervals, per-seed figures)."""
    summaries = [run.summary() for run in runs]
    entry: dict[str, Any] = {}
    for key in dict.fromkeys(k for s in summaries for k in s):
        values = [s.get(key) for s in summaries]
        if key == "latency_ms" or key == "recommend_ms":
            entry[key] = _mean_dicts([v for v in values if v])
        elif key in ("stop_rule", "recommend_policy"):
            entry[key] = values[0]
        elif key == "error":
            errors = [f"seed {seed}: {v}" for seed, v in zip(seeds, values, strict=True) if v]
            entry[key] = "; ".join(errors)
        else:
            entry[key] = _mean(values)
    per_seed: dict[str, list[float]] = {}
    for key in SEEDED:
        if entry.get(key) is None:
            continue
        est = estimate(runs, key, same_requests=same_requests)
        entry[key] = est.mean
        entry[f"{key}_ci"] = list(est.ci)
        per_seed[key] = list(est.per_seed)
    per_seed["paper_mrr"] = [float(s.get("paper_mrr") or math.nan) for s in summaries]
    entry["per_seed"] = per_seed
    entry["seeds"] = list(seeds)
    if breakdowns:
        for key in ("by_plan_length", "by_step"):
            groups = [getattr(run, key) for run in runs]
            labels = sorted({g for d in groups for g in d})
            entry[key] = {str(g): _mean_dicts([d[g] for d in groups if g in d]) for g in labels}
    return entry


def compare(
    runs: Mapping[str, Sequence[EvalResult]], *, same_requests: bool, anchor: str = ANCHOR
) -> list[dict[str, Any]]:
    """Paired `tool_mrr` differences of `anchor` against every other retriever, best first.

    The first entry is the best other retriever (highest mean `tool_mrr`); each entry has the
    difference, its interval and the verdict ("beats" only when the interval excludes 0).
    """
    if anchor not in runs:
        return []
    scored = {
        rid: estimate(rs, "tool_mrr", same_requests=same_requests).mean
        for rid, rs in runs.items()
        if rid != anchor and all(r.rows and r.error is None for r in rs)
    }
    out = []
    for rid in sorted(scored, key=lambda r: -scored[r]):
        diff = paired_difference(runs[anchor], runs[rid], "tool_mrr", same_requests=same_requests)
        out.append(
            {
                "metric": "tool_mrr",
                "a": anchor,
                "b": rid,
                "diff": diff.mean,
                "diff_ci": list(diff.ci),
                "verdict": verdict(diff),
            }
        )
    return out


def _git(*args: str) -> str | None:
    """The output of `git args...` in this package's folder, or None (no git, no checkout)."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), *args],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _git_commit() -> str | None:
    return _git("rev-parse", "HEAD")


def _repo_root() -> Path | None:
    """The git checkout this package runs from, or None (an installed copy)."""
    top = _git("rev-parse", "--show-toplevel")
    return Path(top) if top else None


def repo_relative(args: Sequence[str], root: Path | None) -> list[str]:
    """`args` with absolute paths that start in the checkout `root` made relative to it.

    A published command line then reads the same on every machine (`--json
    docs/results/x.json`, not the recording machine's `/home/.../docs/results/x.json`); it is
    meant to be run from the checkout. `--option=PATH` is rewritten too; other paths are kept.
    """
    if root is None:
        return list(args)
    prefix = str(root).rstrip(os.sep) + os.sep

    def rewrite(text: str) -> str:
        if text.startswith(prefix):
            return os.path.relpath(os.path.normpath(text), root)
        return text

    out = []
    for arg in args:
        option, eq, value = arg.partition("=")
        out.append(f"{option}={rewrite(value)}" if eq and arg.startswith("-") else rewrite(arg))
    return out


def provenance(seeds: Sequence[int], argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Where a result came from: command line, version, git commit, cores, Python, seeds.

    Paths inside the checkout are recorded relative to it (`repo_relative`).
    """
    args = repo_relative(sys.argv[1:] if argv is None else argv, _repo_root())
    return {
        "command": " ".join(["dtdr-agents", *args]),
        "version": __version__,
        "commit": _git_commit(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "seeds": list(seeds),
    }


def build_report(
    *,
    dataset: str,
    n_train: int,
    n_test: int,
    encoder: str,
    runs: Mapping[str, Sequence[EvalResult]],
    seeds: Sequence[int],
    same_requests: bool,
    extra: Mapping[str, Any] | None = None,
    breakdowns: bool = False,
    argv: Sequence[str] | None = None,
    origin: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON report of a seeded run (see the module docstring).

    `origin` is the run's `provenance`, taken when it started (the commit of the code that
    ran); by default it is taken now.
    """
    n_steps = max((r.n_steps for rs in runs.values() for r in rs), default=0)
    out: dict[str, Any] = {
        "kind": "bench",
        "protocol": PROTOCOL,
        "dataset": dataset,
        "n_train": n_train,
        "n_test": n_test,
        "n_steps": n_steps,
        "encoder": encoder,
        "same_requests": same_requests,
        "provenance": dict(origin) if origin is not None else provenance(seeds, argv),
        "results": {
            rid: seeded_entry(rs, seeds, same_requests=same_requests, breakdowns=breakdowns)
            for rid, rs in runs.items()
        },
        "comparisons": compare(runs, same_requests=same_requests),
    }
    if extra:
        out.update(extra)
    return out


def _cell(value: Any, column: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if column.endswith("_ci") and isinstance(value, list | tuple) and len(value) == 2:
        return f"[{value[0]:.3f}, {value[1]:.3f}]"
    if column == "fit_s":
        return f"{value:.1f}"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _shown(results: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    rows = list(results.values())

    def present(key: str) -> bool:
        return any(r.get(key) is not None for r in rows)

    return [
        (key, head)
        for key, head in COLUMNS
        if (key not in SET_COLUMNS or present(key)) and (key not in STOP_COLUMNS or present(key))
    ]


def _label(rid: str, entry: Mapping[str, Any]) -> str:
    return f"{rid}*" if entry.get("stop_rule") == "shared" else rid


def _table_rows(report: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    results = report["results"]
    shown = _shown(results)
    header = ["retriever", *(head for _, head in shown)]
    body = [
        [_label(rid, e), *(_cell(e.get(key), key) for key, _ in shown)]
        for rid, e in results.items()
    ]
    return header, body


def _policies(entries: Mapping[str, Mapping[str, Any]]) -> str:
    """The line naming each retriever's recommendation policy, or "" when none has one."""
    found = [
        f"{rid}: {e['recommend_policy']}" for rid, e in entries.items() if e.get("recommend_policy")
    ]
    return "Recommended sets (tracc, size_error): " + "; ".join(found) if found else ""


def comparison_lines(report: Mapping[str, Any]) -> list[str]:
    """One sentence per paired comparison, e.g. "hybrid beats qts: +0.120 [0.100, 0.140]"."""
    lines = []
    for c in report.get("comparisons") or []:
        said = (
            f"{c['a']} {c['verdict']} {c['b']}"
            if c["verdict"] in ("beats", "loses to")
            else f"{c['a']} against {c['b']}: {c['verdict']}"
        )
        lines.append(
            f"{said} on {c['metric']}: {c['diff']:+.3f} "
            f"[{c['diff_ci'][0]:+.3f}, {c['diff_ci'][1]:+.3f}] (paired bootstrap over requests)"
        )
    return lines


def format_table(report: Mapping[str, Any]) -> str:
    """A fixed-width text table of a report, one row per retriever, then the comparisons."""
    header, body = _table_rows(report)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    lines = [line(header), "  ".join("-" * w for w in widths), *(line(r) for r in body)]
    seeds = report.get("provenance", {}).get("seeds") or []
    note = f"means over {len(seeds)} seed(s) {seeds}"
    if any(e.get("stop_rule") == "shared" for e in report["results"].values()):
        note += "; * = judged by the shared stop rule"
    lines.append(note)
    policies = _policies(report["results"])
    if policies:
        lines.append(policies)
    lines.extend(comparison_lines(report))
    errors = [f"  {rid}: {e['error']}" for rid, e in report["results"].items() if e.get("error")]
    if errors:
        lines.append("errors:")
        lines.extend(errors)
    return "\n".join(lines)


def format_markdown(report: Mapping[str, Any]) -> str:
    """A Markdown table of a report (one row per retriever), then its skipped retrievers."""
    header, body = _table_rows(report)
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    lines.extend("| " + " | ".join(row) + " |" for row in body)
    for rid, reason in (report.get("skipped") or {}).items():
        lines.append(f"| {rid} | skipped: {reason} |" + " |" * (len(header) - 2))
    policies = _policies(report["results"])
    if policies:
        lines.extend(["", policies])
    return "\n".join(lines)


def write_json(path: str | Path, data: Mapping[str, Any]) -> Path:
    """Write a JSON report atomically."""
    return atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


ABLATION_TITLES = (
    ("history_length", "history length"),
    ("n_clusters", "k-means clusters"),
    ("n_demos", "demonstrations"),
)
"""The ablations of a bench report (the DTDR paper's Figure 6), with their titles."""


ABLATION_FIGURES = ("tool_mrr", "stop_f1", "end_first_at_tool_steps", "paper_mrr")
"""The figures kept per ablation point (with `tool_mrr_ci`)."""


def aggregate_ablations(
    per_seed: Sequence[Mapping[str, Mapping[Any, Mapping[str, EvalResult]]]],
    *,
    same_requests: bool,
) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """Ablation points over seeds: {ablation: {x: {retriever: figures}}}.

    Each point keeps the mean over the seeds that ran it of `ABLATION_FIGURES`, the interval
    of `tool_mrr` (`tool_mrr_ci`) and its seed count (`n_seeds`).
    """
    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for key, _ in ABLATION_TITLES:
        points: dict[str, dict[str, list[EvalResult]]] = {}
        for seed_run in per_seed:
            for x, by_id in (seed_run.get(key) or {}).items():
                for rid, result in by_id.items():
                    points.setdefault(str(x), {}).setdefault(rid, []).append(result)
        if not points:
            continue
        out[key] = {}
        for x in sorted(points, key=float):
            out[key][x] = {}
            for rid, runs in points[x].items():
                summaries = [r.summary() for r in runs]
                fig: dict[str, Any] = {
                    f: _mean([s.get(f) for s in summaries]) for f in ABLATION_FIGURES
                }
                if fig["tool_mrr"] is not None:
                    est = estimate(runs, "tool_mrr", same_requests=same_requests)
                    fig["tool_mrr"], fig["tool_mrr_ci"] = est.mean, list(est.ci)
                fig["n_seeds"] = len(runs)
                out[key][x][rid] = fig
    return out


def format_ablation(
    rows: Mapping[str, Mapping[str, Mapping[str, Any]]], title: str, figure: str = "tool_mrr"
) -> str:
    """A Markdown table of one ablation: `figure` per retriever and point (tool-MRR with CI)."""
    ids = list(dict.fromkeys(rid for values in rows.values() for rid in values))
    lines = [f"| {title} | " + " | ".join(ids) + " |", "|---:|" + "---:|" * len(ids)]
    for x, values in rows.items():
        cells = []
        for i in ids:
            if i not in values:
                cells.append("-")
                continue
            cell = _cell(values[i].get(figure), figure)
            if figure == "tool_mrr":
                cell += f" {_cell(values[i].get('tool_mrr_ci'), 'tool_mrr_ci')}"
            cells.append(cell)
        lines.append(f"| {x} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


CURVE_TITLES = (
    ("tool_mrr", "tool-MRR [95% CI]"),
    ("stop_f1", "stop F1"),
    ("paper_mrr", "paper-protocol MRR"),
)
"""The figures of an ablation shown in reports, with their titles."""


def format_ablations(rows: Mapping[str, Mapping[str, Mapping[str, Any]]], title: str) -> str:
    """One Markdown table per figure of `CURVE_TITLES` for one ablation."""
    parts = []
    for figure, name in CURVE_TITLES:
        parts += [f"{name} by {title}:", "", format_ablation(rows, title, figure), ""]
    return "\n".join(parts[:-1])


def format_report_markdown(report: Mapping[str, Any]) -> str:
    """A bench JSON report as Markdown: a header line, the results, comparisons, ablations."""
    seeds = report.get("provenance", {}).get("seeds") or []
    lines = [
        f"{report['dataset']}: {report['n_train']} demonstrations, {report['n_test']} test "
        f"plans, {report['n_steps']} steps, encoder {report['encoder']}, "
        f"means over seeds {seeds}",
        "",
        format_markdown(report),
    ]
    comparisons = comparison_lines(report)
    if comparisons:
        lines += ["", *(f"- {c}" for c in comparisons)]
    ablations = report.get("ablations") or {}
    for key, title in ABLATION_TITLES:
        rows = ablations.get(key) or {}
        if rows:
            lines += ["", format_ablations(rows, title)]
    return "\n".join(lines)
