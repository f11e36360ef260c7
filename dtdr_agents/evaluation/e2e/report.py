"""End-to-end reports: Markdown tables (like the paper's Table 3), FSA vs prompt tokens (Fig. 5)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dtdr_agents.evaluation.e2e.protocol import E2E_MODES


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100.0 * float(value):.1f}"


def _num(value: Any, digits: int = 0) -> str:
    return "-" if value is None else f"{float(value):.{digits}f}"


def _header(report: Mapping[str, Any]) -> str:
    counter = report.get("token_counter") or {}
    exact = "" if counter.get("exact") else " (an approximation)"
    model = report.get("model") or "no model (dry run)"
    lines = [
        f"{report['dataset']}: {report['n_train']} demonstrations, {report['n_test']} test plans, "
        f"{report['n_steps']} steps, {report.get('n_tools', '?')} tools; model {model}; "
        f"encoder {report.get('encoder')}; top-{report.get('k')} retrieved tools",
        f"prompt tokens counted with {counter.get('name', '?')}{exact}",
    ]
    if counter.get("note") and not counter.get("exact"):
        lines.append(f"({counter['note']})")
    return "\n".join(lines)


def format_e2e_markdown(report: Mapping[str, Any]) -> str:
    """An e2e JSON report as Markdown: the results table, FSA by retriever and mode, failures.

    A dry-run report gives the calls and prompt tokens per (retriever, mode) instead.
    """
    parts = [_header(report), ""]
    results: Sequence[Mapping[str, Any]] = report.get("results") or []
    if report.get("dry_run"):
        parts.append(
            "| retriever | mode | calls | cached | tools bound | prompt tokens/step "
            "| largest prompt | variable tokens/step | prompt tokens total |"
        )
        parts.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in results:
            parts.append(
                f"| {r['retriever']} | {r['mode']} | {r['calls']} | {r['cached']} | "
                f"{_num(r.get('tools_bound'), 1)} | {_num(r.get('prompt_tokens'), 1)} | "
                f"{_num(r.get('prompt_tokens_max'))} | "
                f"{_num(r.get('variable_tokens'), 1)} | {r['prompt_tokens_total']} |"
            )
        parts.append("")
        parts.append(
            f"total: {report.get('calls')} calls, {report.get('prompt_tokens_total')} prompt tokens"
        )
        parts.extend(_argument_prompts(report.get("arguments") or {}))
    else:
        parts.append(
            "| retriever | mode | FSA % | SR % (selection) | SR % (function + arguments) | "
            "arguments % | end-of-plan % | prompt tokens/step | "
            "variable tokens/step | p50 ms | p99 ms | unbound % | answered | errors |"
        )
        parts.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in results:
            lat = r.get("latency_ms") or {}
            errors = int(r.get("n_errors") or 0) + int(r.get("n_argument_errors") or 0)
            parts.append(
                f"| {r['retriever']} | {r['mode']} | {_pct(r.get('fsa'))} | {_pct(r.get('sr'))} | "
                f"{_pct(r.get('sr_full'))} | {_pct(r.get('argument_accuracy'))} | "
                f"{_pct(r.get('end_accuracy'))} | {_num(r.get('prompt_tokens'), 1)} | "
                f"{_num(r.get('variable_tokens'), 1)} | "
                f"{_num(lat.get('p50'))} | {_num(lat.get('p99'))} | "
                f"{_pct(r.get('unbound_rate'))} | {r.get('n_answered')}/{r.get('n_steps')} | "
                f"{errors} |"
            )
        if not report.get("arguments_scored", True):
            parts.append("")
            parts.append(
                "SR with arguments is not scored: this dataset's test plans do not record "
                "arguments (TaskBench copies without them, for example)."
            )
        parts.extend(interval_tables(report))
        parts.append("")
        parts.append(_pivot(results))
        failures = _failures(results)
        if failures:
            parts.append("")
            parts.append(failures)
        parts.append("")
        parts.append(
            f"{report.get('calls')} calls made, {report.get('cached')} steps reused from the "
            f"cache; parameter filling: {report.get('argument_calls', 0)} calls made, "
            f"{report.get('argument_cached', 0)} reused"
        )
    for rid, reason in (report.get("skipped") or {}).items():
        parts.append(f"skipped {rid}: {reason}")
    for cell in report.get("skipped_cells") or ():
        parts.append(f"skipped {cell['retriever']}/{cell['mode']} (not run): {cell['reason']}")
    return "\n".join(parts)


def interval_text(figure: Mapping[str, Any] | None, scale: float = 100.0, digits: int = 1) -> str:
    """``value [lo, hi]`` of an interval entry (``-`` where undefined)."""
    if not figure or figure.get("value") is None:
        return "-"
    text = f"{scale * float(figure['value']):.{digits}f}"
    ci = figure.get("ci")
    if ci is not None:
        text += f" [{scale * float(ci[0]):.{digits}f}, {scale * float(ci[1]):.{digits}f}]"
    return text


def interval_tables(report: Mapping[str, Any]) -> list[str]:
    """The figures with their bootstrap intervals, the paired comparisons and the targets."""
    results: Sequence[Mapping[str, Any]] = report.get("results") or []
    if not any(r.get("intervals") for r in results):
        return []
    boot = report.get("bootstrap") or {}
    level = 100.0 * float(boot.get("level", 0.95))
    lines = [
        "",
        f"With {level:.0f}% bootstrap intervals over test plans ({boot.get('n_boot')} "
        "replicates); latency is the mean per request:",
        "",
        "| retriever | mode | demos | FSA % | SR % (selection) | SR % (function + arguments) | "
        "no tool call % | prompt tokens/request | server prompt tokens/request | latency ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        iv = r.get("intervals") or {}
        lines.append(
            f"| {r['retriever']} | {r['mode']} | {_num(r.get('n_demos'))} | "
            f"{interval_text(iv.get('fsa'))} | "
            f"{interval_text(iv.get('sr'))} | {interval_text(iv.get('sr_full'))} | "
            f"{interval_text(iv.get('no_call_rate'))} | "
            f"{interval_text(iv.get('prompt_tokens'), 1.0, 0)} | "
            f"{interval_text(iv.get('usage_prompt_tokens'), 1.0, 0)} | "
            f"{interval_text(iv.get('latency_ms'), 1.0, 0)} |"
        )
    comparisons: Sequence[Mapping[str, Any]] = report.get("comparisons") or []
    if comparisons:
        lines += [
            "",
            "Paired comparisons (the same test plans resampled for both cells): differences "
            "in points, ratios as A / B:",
            "",
            "| A | B | FSA diff | SR diff | SR (fn + args) diff | SR ratio | "
            "SR (fn + args) ratio | no tool call diff | prompt tokens ratio | "
            "server prompt tokens ratio | latency ratio |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for c in comparisons:
            if "skipped" in c:
                counted = c.get("prompt_tokens_ratio")
                ratio = (
                    f" {interval_text(counted, 1.0, 3)} (B counted, not run) |" if counted else " |"
                )
                lines.append(
                    f"| {c['a']} | {c['b']} | not run: {c['skipped']} |"
                    + " |" * 5
                    + ratio
                    + " |" * 2
                )
                continue
            lines.append(
                f"| {c['a']} | {c['b']} | {interval_text(c.get('fsa_diff'))} | "
                f"{interval_text(c.get('sr_diff'))} | "
                f"{interval_text(c.get('sr_full_diff'))} | "
                f"{interval_text(c.get('sr_ratio'), 1.0, 2)} | "
                f"{interval_text(c.get('sr_full_ratio'), 1.0, 2)} | "
                f"{interval_text(c.get('no_call_rate_diff'))} | "
                f"{interval_text(c.get('prompt_tokens_ratio'), 1.0, 3)} | "
                f"{interval_text(c.get('usage_prompt_tokens_ratio'), 1.0, 3)} | "
                f"{interval_text(c.get('latency_ms_ratio'), 1.0, 2)} |"
            )
    goals: Sequence[Mapping[str, Any]] = report.get("targets") or []
    if goals:
        lines += ["", "Targets (met: by the point estimate; clear: by the whole interval):", ""]
        for g in goals:
            if "skipped" in g:
                lines.append(f"- {g['target']}: cannot be checked, {g['skipped']}")
                continue
            ratio = g.get("figure", "").endswith("_ratio")
            shown = interval_text(g, 1.0, 3) if ratio else interval_text(g)
            note = f" ({g['counted']})" if g.get("counted") else ""
            lines.append(
                f"- {g['target']}: {g.get('figure')} {shown}; met {_yes(g.get('met'))}, "
                f"clear {_yes(g.get('clear'))}{note}"
            )
    return lines


def _yes(value: Any) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _argument_prompts(listing: Mapping[str, Any]) -> list[str]:
    """The dry run's parameter-filling prompts: a count, one line per prompt, the first one."""
    if not listing:
        return []
    prompts: Sequence[Mapping[str, Any]] = listing.get("list") or []
    scored = (
        "scored against the recorded arguments"
        if listing.get("scored")
        else "not scored: the test plans record no arguments"
    )
    lines = [
        "",
        f"parameter filling: {listing.get('prompts')} prompts, one per step and next function "
        f"(a run asks one only where the model selected that function; {scored}); "
        f"{_num(listing.get('prompt_tokens'), 1)} prompt tokens each on average, "
        f"{listing.get('cached', 0)} cached",
    ]
    for p in prompts[:MAX_PROMPT_LINES]:
        ident = f" ({p['plan_id']})" if p.get("plan_id") else ""
        lines.append(
            f"- plan {p['plan']}{ident}, step {p['step']}: {p['function']}, "
            f"{p['prompt_tokens']} tokens"
        )
    if len(prompts) > MAX_PROMPT_LINES:
        lines.append(f"- ... {len(prompts) - MAX_PROMPT_LINES} more (all of them in --json)")
    examples: Sequence[Mapping[str, Any]] = listing.get("examples") or []
    if examples:
        first = examples[0]
        lines.append("")
        lines.append(f"the first prompt ({first['function']}):")
        for m in first["messages"]:
            if m.get("tool_calls"):
                f = m["tool_calls"][0]["function"]
                lines.append(f"  [{m['role']}] call {f['name']}({f['arguments']})")
            else:
                lines.append(f"  [{m['role']}] {m.get('content')}")
        lines.append(f"  [tools] {json.dumps(first['tools'], ensure_ascii=False)[:600]}")
    return lines


MAX_PROMPT_LINES = 20
"""Parameter-filling prompts a dry run lists line by line (the JSON holds all)."""


def _pivot(results: Sequence[Mapping[str, Any]]) -> str:
    modes = [m for m in E2E_MODES if any(r["mode"] == m for r in results)]
    rids = list(dict.fromkeys(str(r["retriever"]) for r in results))
    cell = {(r["retriever"], r["mode"]): r for r in results}
    lines = ["FSA % / SR % by retriever and mode:", ""]
    lines.append("| retriever | " + " | ".join(modes) + " |")
    lines.append("|---|" + "---:|" * len(modes))
    for rid in rids:
        values = []
        for m in modes:
            r = cell.get((rid, m))
            values.append("" if r is None else f"{_pct(r.get('fsa'))} / {_pct(r.get('sr'))}")
        lines.append(f"| {rid} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def _failures(results: Sequence[Mapping[str, Any]]) -> str:
    lines = []
    for r in results:
        kinds = r.get("kinds") or {}
        bad = {k: v for k, v in kinds.items() if k in ("text", "unknown", "unbound", "malformed")}
        errors = r.get("errors") or {}
        unknown = r.get("unknown_tools") or {}
        if not (bad or errors or unknown):
            continue
        text = f"- {r['retriever']}/{r['mode']}:"
        if bad:
            text += " " + ", ".join(f"{v} {k}" for k, v in bad.items())
        if errors:
            text += "; errors " + ", ".join(f"{v} {k}" for k, v in errors.items())
        if unknown:
            text += "; tools outside the catalogue: " + ", ".join(
                f"{name} ({n})" for name, n in unknown.items()
            )
        lines.append(text)
    if not lines:
        return ""
    return "Answers that were not a bound tool call, and failed requests:\n\n" + "\n".join(lines)


def plot_e2e(report: Mapping[str, Any], path: str | Path) -> Path:
    """PNG: FSA against mean prompt tokens per step, one colour per mode (the paper's Figure 5).

    A dry-run report has no FSA: its plot shows prompt tokens per (retriever, mode) as bars.
    """
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dtdr_agents.foundation.atomic import atomic_write_bytes

    results: Sequence[Mapping[str, Any]] = report.get("results") or []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    palette = plt.get_cmap("tab10")
    colours = {m: palette(i) for i, m in enumerate(E2E_MODES)}
    if report.get("dry_run"):
        labels = [f"{r['retriever']}\n{r['mode']}" for r in results]
        ax.bar(
            range(len(results)),
            [float(r.get("prompt_tokens") or 0.0) for r in results],
            color=[colours.get(str(r["mode"]), "grey") for r in results],
        )
        ax.set_xticks(range(len(results)), labels, fontsize=6, rotation=90)
        ax.set_ylabel("prompt tokens per step")
        ax.set_title(f"{report['dataset']}: prompt tokens per step (dry run)")
    else:
        for mode in E2E_MODES:
            points = [
                r
                for r in results
                if r["mode"] == mode and r.get("fsa") is not None and r.get("prompt_tokens")
            ]
            if not points:
                continue
            xs = [float(r["prompt_tokens"]) for r in points]
            ys = [100.0 * float(r["fsa"]) for r in points]
            ax.scatter(xs, ys, color=colours[mode], label=mode)
            for r, x, y in zip(points, xs, ys, strict=True):
                ax.annotate(
                    str(r["retriever"]),
                    (x, y),
                    fontsize=6,
                    xytext=(3, 3),
                    textcoords="offset points",
                )
        ax.set_xlabel("prompt tokens per step")
        ax.set_ylabel("FSA (%)")
        ax.set_title(f"{report['dataset']}, {report.get('model')}: FSA vs prompt length")
        ax.legend(fontsize=7)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue())


__all__ = ["format_e2e_markdown", "interval_tables", "plot_e2e"]
