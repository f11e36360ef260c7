"""The live-agent benchmark's tables, in Markdown, from its results JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _cell(figure: Mapping[str, Any] | None, scale: float = 1.0, digits: int = 1) -> str:
    if not figure or figure.get("value") is None:
        return "-"
    text = f"{figure['value'] * scale:.{digits}f}"
    ci = figure.get("ci")
    if ci is not None:
        text += f" [{ci[0] * scale:.{digits}f}, {ci[1] * scale:.{digits}f}]"
    return text


def format_agent_bench_markdown(report: Mapping[str, Any]) -> str:
    """Markdown tables of a results JSON: one row per contestant, then the paired comparisons.

    Success, precision and recall are in percent; every figure has its 95% bootstrap interval
    over plans. The model is named in the heading.
    """
    model = report.get("model", "?")
    lines = [
        f"Live agents on {report.get('dataset', '?')} ({report.get('n_plans', '?')} plans), "
        f"model {model}{' (replayed)' if report.get('replay') else ''}",
        "",
        "| contestant | plan success % | precision % | recall % | outside calls/run "
        "| model calls/run | prompt tokens/run | model ms/run | failures |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in report.get("contestant_order", []):
        c = report["contestants"][name]
        if not c["scored"] and c["does_not_fit"]:
            size = c.get("does_not_fit_prompt_tokens")
            lines.append(
                f"| {name} | does not fit ({size} prompt tokens) | - | - | - | - | - | - | - |"
            )
            continue
        failures = ", ".join(f"{k} {v}" for k, v in c["failures"].items() if v) or "-"
        if c["endpoint_errors"]:
            failures += f"; {c['endpoint_errors']} endpoint errors"
        lines.append(
            f"| {name} | {_cell(c['success'], 100)} | {_cell(c['precision'], 100)} "
            f"| {_cell(c['recall'], 100)} | {_cell(c['outside_calls'], digits=2)} "
            f"| {_cell(c['model_calls'], digits=2)} | {_cell(c['prompt_tokens'], digits=0)} "
            f"| {_cell(c['model_ms'], digits=0)} | {failures} |"
        )
    comps = report.get("comparisons") or []
    if comps:
        lines += [
            "",
            "| A vs B | plan success diff (pts) | verdict | recall diff (pts) "
            "| model calls diff | prompt tokens A/B |",
            "|---|---|---|---|---|---|",
        ]
        for comp in comps:
            label = f"{comp['a']} vs {comp['b']}"
            if "skipped" in comp:
                lines.append(f"| {label} | - | {comp['skipped']} | - | - | - |")
                continue
            lines.append(
                f"| {label} | {_cell(comp['success_diff'], 100)} "
                f"| {comp['success_diff'].get('verdict', '-')} "
                f"| {_cell(comp['recall_diff'], 100)} "
                f"| {_cell(comp['model_calls_diff'], digits=2)} "
                f"| {_cell(comp['prompt_tokens_ratio'], digits=2)} |"
            )
    return "\n".join(lines) + "\n"


__all__ = ["format_agent_bench_markdown"]
