"""PNG plots of bench reports (matplotlib, written atomically)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_report(report: dict[str, Any], path: str | Path) -> Path:
    """PNG: top-1 by plan length per retriever, and the ablations when present."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ablations = report.get("ablations")
    panels = 4 if ablations else 1
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4), squeeze=False)
    palette = plt.get_cmap("tab20")
    for axis in axes[0]:
        axis.set_prop_cycle(color=[palette(i) for i in range(20)])  # one colour per retriever
    ax = axes[0][0]
    for rid, entry in report["results"].items():
        by_len = entry.get("by_plan_length") or {}
        if by_len:
            xs = sorted(by_len, key=int)
            ax.plot([int(x) for x in xs], [by_len[x]["top1"] for x in xs], marker="o", label=rid)
    ax.set_xlabel("plan length (calls)")
    ax.set_ylabel("top-1 accuracy")
    ax.set_title(f"{report['dataset']}: accuracy by plan length")
    ax.legend(fontsize=7)
    if ablations:
        for ax, key, label in zip(
            axes[0][1:],
            ("history_length", "n_clusters", "n_demos"),
            ("history length", "k-means clusters", "demonstrations"),
            strict=True,
        ):
            series: dict[str, list[tuple[float, float]]] = {}
            for x, values in ablations[key].items():
                for rid, mrr in values.items():
                    series.setdefault(rid, []).append((float(x), mrr))
            for rid, points in series.items():
                points.sort()
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=rid)
            if key != "history_length":
                ax.set_xscale("log")
            ax.set_xlabel(label)
            ax.set_ylabel("MRR")
            ax.set_title(f"ablation: {label}")
            ax.legend(fontsize=7)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(out)
    return out
