"""The refit's costs on a large store: `dtdr-agents store refit-bench` (`refit.json`).

Three timed phases, each in a fresh process (so its peak RSS is its own, and every phase
loads the encoder once):

1. ``fit``: a store holding `fit_runs` runs, refitted into an empty publish folder with an
   empty embedding cache: what fitting on that many runs costs from nothing.
2. ``initial``: a store of `store_runs` runs (written beforehand, not timed here), refitted
   with an empty embedding cache: it reads the `max_runs` most recent runs.
3. ``after_new``: `new_runs` runs from another seed recorded into that store, then the refit
   again: it reads the same window, finds the older runs' texts in the cache and encodes the
   new ones only.

The figures asked of the refit (issue 38): peak RSS of every phase at most 2 GB, and
``after_new`` at most 3 times ``fit`` in wall time (`refit_ratio`).
"""

from __future__ import annotations

import resource
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from dtdr_agents.foundation.types import Demonstration, Toolset

WRITE_BATCH = 5_000
"""Runs written to the store per transaction while it is filled."""

MAX_RSS_MB = 2048.0
"""The bound on every phase's peak RSS (issue 38)."""

MAX_RATIO = 3.0
"""The bound on a refit after the new runs against a fit on `fit_runs` runs (issue 38)."""

START = datetime(2026, 1, 1, tzinfo=UTC)
"""When the generated runs start, one second apart (the new ones after all the others)."""


def _runs(demos: list[Demonstration], prefix: str, offset: int) -> Iterator[Any]:
    """The demonstrations as runs with ids ``prefix-N`` and times one second apart."""
    from dtdr_agents.store.runs import RunRecord

    for i, demo in enumerate(demos):
        yield RunRecord.from_demonstration(
            demo,
            id=f"{prefix}-{offset + i:07d}",
            created_at=START + timedelta(seconds=offset + i),
            source="refit-bench",
            outcome="success",
        )


def fill_store(url: str, n: int, *, seed: int, prefix: str, offset: int = 0) -> Toolset:
    """Write `n` demo-set runs (`make_demo_dataset(n, seed)`) into the store at `url`.

    Returns:
        The demo set's catalogue.
    """
    from dtdr_agents.datasets.synthetic import make_demo_dataset
    from dtdr_agents.store.runs import RunStore

    data = make_demo_dataset(n, seed=seed)
    demos = list(data.demos)
    with RunStore(url) as store:
        for start in range(0, n, WRITE_BATCH):
            batch = demos[start : start + WRITE_BATCH]
            store.add_many(_runs(batch, prefix, offset + start))
    return data.tools


def _phase(
    url: str, root: str, tools: list[dict[str, Any]], cache_dir: str, options: dict[str, Any]
) -> dict[str, Any]:
    """One refit in this (fresh) process: its report, wall time and peak RSS."""
    from dtdr_agents.foundation.types import Tool
    from dtdr_agents.retrievers.refit import refit_and_publish

    catalogue = Toolset([Tool.from_dict(t) for t in tools])
    t0 = time.perf_counter()
    report = refit_and_publish(url, root, catalogue, cache_dir=cache_dir, **options)
    wall = time.perf_counter() - t0
    out = report.to_dict()
    out["version"] = report.version.name
    out["wall_s"] = round(wall, 3)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def _in_fresh_process(*args: Any) -> dict[str, Any]:
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(_phase, *args).result()


def refit_bench(
    *,
    store_runs: int = 100_000,
    new_runs: int = 1_000,
    fit_runs: int = 1_000,
    max_runs: int | None = None,
    retriever: str = "hybrid",
    encoder: str = "default",
    batch_size: int | None = None,
    workdir: str | Path | None = None,
) -> dict[str, Any]:
    """Time a fit on `fit_runs` runs and refits on a store of `store_runs` (+ `new_runs`).

    Args:
        store_runs: Runs in the large store before the new ones.
        new_runs: Runs recorded between the two refits of the large store.
        fit_runs: Runs of the small store the first phase fits on.
        max_runs: The refit's window (None: `DEFAULT_MAX_RUNS`).
        retriever: The retriever id.
        encoder: The encoder spec (a named one uses the phases' embedding cache).
        batch_size: Rows read at a time (None: `READ_BATCH`).
        workdir: Where the stores, caches and publish folders go (None: a temporary folder,
            removed afterwards).

    Returns:
        The settings, the time to fill the large store, each phase's refit report with its
        wall time and peak RSS, `refit_ratio` and whether the bounds hold (`checks`).
    """
    from dtdr_agents.retrievers.refit import DEFAULT_MAX_RUNS

    window = DEFAULT_MAX_RUNS if max_runs is None else max_runs
    options: dict[str, Any] = {
        "retriever": retriever,
        "encoder": encoder,
        "max_runs": window,
        "batch_size": batch_size,
    }
    with tempfile.TemporaryDirectory(prefix="dtdr-refit-bench-", dir=workdir) as tmp:
        base = Path(tmp)
        small, large = f"sqlite:///{base / 'small.db'}", f"sqlite:///{base / 'large.db'}"
        tools = fill_store(small, fit_runs, seed=0, prefix="small")
        catalogue = [t.to_dict() for t in tools]
        fit = _in_fresh_process(
            small, str(base / "pub-small"), catalogue, str(base / "c1"), options
        )
        t0 = time.perf_counter()
        fill_store(large, store_runs, seed=0, prefix="run")
        fill_s = time.perf_counter() - t0
        args = (large, str(base / "pub-large"), catalogue, str(base / "c2"), options)
        initial = _in_fresh_process(*args)
        fill_store(large, new_runs, seed=1, prefix="new", offset=store_runs)
        after = _in_fresh_process(*args)
    from dtdr_agents.foundation.encoders import get_encoder

    ratio = round(after["wall_s"] / fit["wall_s"], 3) if fit["wall_s"] else None
    peak = max(p["peak_rss_mb"] for p in (fit, initial, after))
    return {
        "kind": "refit-bench",
        "retriever": retriever,
        "encoder": encoder,
        "encoder_id": get_encoder(encoder).id,  # the model a spec such as "default" names
        "store_runs": store_runs,
        "new_runs": new_runs,
        "fit_runs": fit_runs,
        "max_runs": window,
        "n_tools": len(tools),
        "fill_store_s": round(fill_s, 3),
        "phases": {"fit": fit, "initial": initial, "after_new": after},
        "refit_ratio": ratio,
        "peak_rss_mb": peak,
        "checks": {
            f"peak RSS <= {MAX_RSS_MB:.0f} MB": peak <= MAX_RSS_MB,
            f"refit after the new runs <= {MAX_RATIO:g} x fit": ratio is not None
            and ratio <= MAX_RATIO,
            "the refit saw exactly the new runs": after["runs_new"] == new_runs,
        },
    }


def format_refit(result: dict[str, Any]) -> str:
    """The benchmark as a Markdown table and a line of its settings and checks."""
    lines = [
        "| phase | runs in store | read | fitted | new | texts encoded | cache hits | "
        "read_s | fit_s | wall_s | peak_rss_mb |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    names = {
        "fit": f"fit on {result['fit_runs']} runs",
        "initial": "refit of the large store",
        "after_new": f"refit after {result['new_runs']} new runs",
    }
    for key, name in names.items():
        p = result["phases"][key]
        lines.append(
            f"| {name} | {p['runs_in_store']} | {p['runs_read']} | {p['runs_fitted']} | "
            f"{'-' if p['runs_new'] is None else p['runs_new']} | "
            f"{'-' if p['texts_encoded'] is None else p['texts_encoded']} | "
            f"{'-' if p['cache_hits'] is None else p['cache_hits']} | "
            f"{p['read_s']:.2f} | {p['fit_s']:.2f} | {p['wall_s']:.2f} | "
            f"{p['peak_rss_mb']:.0f} |"
        )
    checks = "; ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in result["checks"].items())
    lines += [
        "",
        f"`{result['retriever']}`, encoder {result.get('encoder_id', result['encoder'])}, "
        f"window {result['max_runs']} "
        f"runs, {result['n_tools']} tools; refit after the new runs / fit = "
        f"{result['refit_ratio']}; {checks}.",
    ]
    return "\n".join(lines)


__all__ = ["MAX_RATIO", "MAX_RSS_MB", "fill_store", "format_refit", "refit_bench"]
