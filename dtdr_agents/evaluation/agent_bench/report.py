"""The live-agent benchmark's tables, in Markdown, from its results JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dtdr_agents.evaluation.e2e.report import interval_text


def format_agent_bench_markdown(report: Mapping[str, Any]) -> str:
    """Markdown tables of a results JSON: one row per contestant, then the paired comparisons.

    Success, precision and recall are in percent; every figure has its 95% bootstrap interval
    over plans. The model is named in the heading. A re-ask is a model call after an answer
    with no tool call (DTDR's widen-and-retry); "successes after one" counts the successful
    runs that had one (shown only for files that count re-asks).
    """
    model = report.get("model", "?")
    # re-asks: counted in files written since they were (a column only where they are)
    reasks = any("reasks" in c for c in (report.get("contestants") or {}).values())
    reask_head = " | re-asks/run (successes after one)" if reasks else ""
    lines = [
        f"Live agents on {report.get('dataset', '?')} ({report.get('n_plans', '?')} plans), "
        f"model {model}{' (replayed)' if report.get('replay') else ''}",
        "",
        "| contestant | plan success % | precision % | recall % | outside calls/run "
        f"| model calls/run{reask_head} | prompt tokens/run | model ms/run | failures |",
        "|---|---|---|---|---|---|---|---|---|" + ("---|" if reasks else ""),
    ]
    for name in report.get("contestant_order", []):
        c = report["contestants"][name]
        if not c["scored"] and c["does_not_fit"]:
            size = c.get("does_not_fit_prompt_tokens")
            dashes = " - |" * (7 + reasks)
            lines.append(f"| {name} | does not fit ({size} prompt tokens) |{dashes}")
            continue
        failures = ", ".join(f"{k} {v}" for k, v in c["failures"].items() if v) or "-"
        if c["endpoint_errors"]:
            failures += f"; {c['endpoint_errors']} endpoint errors"
        lines.append(
            f"| {name} | {interval_text(c['success'])} | {interval_text(c['precision'])} "
            f"| {interval_text(c['recall'])} | {interval_text(c['outside_calls'], 1.0, 2)} "
            f"| {interval_text(c['model_calls'], 1.0, 2)}{_reasks(c) if reasks else ''} "
            f"| {interval_text(c['prompt_tokens'], 1.0, 0)} "
            f"| {interval_text(c['model_ms'], 1.0, 0)} | {failures} |"
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
                f"| {label} | {interval_text(comp['success_diff'])} "
                f"| {comp['success_diff'].get('verdict', '-')} "
                f"| {interval_text(comp['recall_diff'])} "
                f"| {interval_text(comp['model_calls_diff'], 1.0, 2)} "
                f"| {interval_text(comp['prompt_tokens_ratio'], 1.0, 2)} |"
            )
    return "\n".join(lines) + "\n"


def _reasks(contestant: Mapping[str, Any]) -> str:
    """The re-asks cell: per run with its interval, then the successes after one."""
    return (
        f" | {interval_text(contestant['reasks'], 1.0, 2)} "
        f"({contestant.get('successes_after_reask', 0)})"
    )


__all__ = ["format_agent_bench_markdown"]
