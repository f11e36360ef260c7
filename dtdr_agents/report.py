"""Tables and JSON reports shared by `dtdr-agents demo` and `dtdr-agents bench`."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dtdr_agents.atomic import atomic_write_text
from dtdr_agents.evaluation import EvalResult

DEMO_COLUMNS = ("mrr", "top1", "f1", "ms_per_step", "fit_s")
BENCH_COLUMNS = (
    "mrr",
    "top1",
    "f1",
    "recall@5",
    "ndcg@10",
    "completeness@10",
    "tracc",
    "size_error",
    "ms_per_step",
    "fit_s",
)
SET_COLUMNS = ("tracc", "size_error")
"""Columns of set-valued datasets only (the recommended set's TRACC and size error); tables
leave them out when no retriever has them."""


def _shown(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return [c for c in columns if c not in SET_COLUMNS or any(r.get(c) is not None for r in rows)]


def _policies(entries: Mapping[str, Mapping[str, Any]]) -> str:
    """The line naming each retriever's recommendation policy, or "" when none has one."""
    found = [
        f"{rid}: {e['recommend_policy']}" for rid, e in entries.items() if e.get("recommend_policy")
    ]
    return "Recommended sets (tracc, size_error): " + "; ".join(found) if found else ""


def _cell(value: Any, column: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if column in ("ms_per_step",):
        return f"{value:.3f}"
    if column == "fit_s":
        return f"{value:.1f}"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def format_table(results: Mapping[str, EvalResult], columns: Sequence[str] = DEMO_COLUMNS) -> str:
    """A fixed-width text table, one row per retriever, in the given order."""
    summaries = {rid: res.summary() for rid, res in results.items()}
    columns = _shown(columns, list(summaries.values()))
    header = ["retriever", *columns]
    body: list[list[str]] = []
    for rid, summary in summaries.items():
        body.append([rid, *(_cell(summary.get(c), c) for c in columns)])
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w)
            for i, (h, w) in enumerate(zip(header, widths, strict=True))
        )
    ]
    lines.append("  ".join("-" * w for w in widths))
    for row in body:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    policies = _policies(summaries)
    if policies:
        lines.append(policies)
    errors = [f"  {rid}: {res.error}" for rid, res in results.items() if res.error]
    if errors:
        lines.append("errors:")
        lines.extend(errors)
    return "\n".join(lines)


def format_markdown(report: Mapping[str, Any], columns: Sequence[str] = BENCH_COLUMNS) -> str:
    """A Markdown table of a JSON report written by `build_report` (one row per retriever)."""
    columns = _shown(columns, list(report["results"].values()))
    lines = [
        "| retriever | " + " | ".join(columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for rid, entry in report["results"].items():
        cells = [_cell(entry.get(c), c) for c in columns]
        lines.append(f"| {rid} | " + " | ".join(cells) + " |")
    for rid, reason in (report.get("skipped") or {}).items():
        lines.append(f"| {rid} | skipped: {reason} |" + " |" * (len(columns) - 1))
    policies = _policies(report["results"])
    if policies:
        lines.extend(["", policies])
    return "\n".join(lines)


def build_report(
    *,
    dataset: str,
    n_train: int,
    n_test: int,
    encoder: str,
    results: Mapping[str, EvalResult],
    columns: Sequence[str] = DEMO_COLUMNS,
    extra: Mapping[str, Any] | None = None,
    breakdowns: bool = False,
) -> dict[str, Any]:
    """The JSON report: dataset, sizes, encoder and per-retriever figures."""
    n_steps = max((r.n_steps for r in results.values()), default=0)
    out: dict[str, Any] = {
        "dataset": dataset,
        "n_train": n_train,
        "n_test": n_test,
        "n_steps": n_steps,
        "encoder": encoder,
        "results": {},
    }
    for rid, res in results.items():
        summary = res.summary()
        entry = {c: summary.get(c) for c in columns}
        entry["latency_ms"] = res.latency_ms
        if res.recommend_policy is not None:
            entry["recommend_policy"] = res.recommend_policy
            entry["recommend_ms"] = res.recommend_ms
        if res.error:
            entry["error"] = res.error
        if breakdowns:
            entry["by_plan_length"] = {str(k): v for k, v in res.by_plan_length.items()}
            entry["by_step"] = {str(k): v for k, v in res.by_step.items()}
        out["results"][rid] = entry
    if extra:
        out.update(extra)
    return out


def write_json(path: str | Path, data: Mapping[str, Any]) -> Path:
    """Write a JSON report atomically."""
    return atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


ABLATION_TITLES = (
    ("history_length", "history length"),
    ("n_clusters", "k-means clusters"),
    ("n_demos", "demonstrations"),
)
"""The ablations of a bench report (the DTDR paper's Figure 6), with their titles."""


def format_report_markdown(report: Mapping[str, Any]) -> str:
    """A bench JSON report as Markdown: a header line, the results and the ablations."""
    lines = [
        f"{report['dataset']}: {report['n_train']} demonstrations, {report['n_test']} test "
        f"plans, {report['n_steps']} steps, encoder {report['encoder']}",
        "",
        format_markdown(report),
    ]
    ablations = report.get("ablations") or {}
    for key, title in ABLATION_TITLES:
        rows = ablations.get(key) or {}
        if not rows:
            continue
        ids = sorted({rid for values in rows.values() for rid in values})
        lines += ["", f"MRR by {title}:", ""]
        lines.append(f"| {title} | " + " | ".join(ids) + " |")
        lines.append("|---:|" + "---:|" * len(ids))
        for x, values in rows.items():
            cells = [f"{values[i]:.3f}" if i in values else "-" for i in ids]
            lines.append(f"| {x} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
