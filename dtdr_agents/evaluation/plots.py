"""PNG plots of bench reports (matplotlib, written atomically)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dtdr_agents.evaluation.report import ABLATION_TITLES


def plot_report(report: dict[str, Any], path: str | Path) -> Path:
    """PNG: tool top-1 by plan length per retriever, and the ablations' tool-MRR when present."""
    import matplotlib.pyplot as plt

    fig = report_figure(report)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(out)
    return out


def report_figure(report: dict[str, Any]) -> Any:
    """The matplotlib figure of `plot_report` (one panel per ablation present); close it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ablations = {k: v for k, v in (report.get("ablations") or {}).items() if v}
    panels = 1 + len(ablations)
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4), squeeze=False)
    palette = plt.get_cmap("tab20")
    for axis in axes[0]:
        axis.set_prop_cycle(color=[palette(i) for i in range(20)])  # one colour per retriever
    ax = axes[0][0]
    for rid, entry in report["results"].items():
        by_len = entry.get("by_plan_length") or {}
        if by_len:
            xs = sorted(by_len, key=int)
            ys = [by_len[x].get("tool_top1", by_len[x].get("top1")) for x in xs]
            ax.plot([int(x) for x in xs], ys, marker="o", label=rid)
    ax.set_xlabel("plan length (calls)")
    ax.set_ylabel("tool top-1 accuracy")
    ax.set_title(f"{report['dataset']}: accuracy by plan length")
    ax.legend(fontsize=7)
    if ablations:
        shown = [(key, label) for key, label in ABLATION_TITLES if key in ablations]
        for ax, (key, label) in zip(axes[0][1:], shown, strict=True):
            series: dict[str, list[tuple[float, float]]] = {}
            for x, values in ablations[key].items():
                for rid, figures in values.items():
                    series.setdefault(rid, []).append((float(x), figures["tool_mrr"]))
            for rid, points in series.items():
                points.sort()
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=rid)
            if key == "n_clusters":
                ax.set_xscale("log")
            elif key == "n_demos":  # linear up to 10, so the zero-demonstration point shows
                ax.set_xscale("symlog", linthresh=10)
            ax.set_xlabel(label)
            ax.set_ylabel("tool-MRR")
            ax.set_title(f"ablation: {label}")
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
