"""Speed and memory benchmark: fit time with embeddings, per-step rank latency, peak memory.

Run with `dtdr-agents speed`. Figures are measured on the embedded demo data; the query
embeddings are cached before ranking is timed (a real agent encodes the request once).
`dtdr-agents speed --startup` times the cold start of `dtdr-agents rank` in fresh processes.
"""

from __future__ import annotations

import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dtdr_agents.foundation.encoders import (
    CachedEncoder,
    Encoder,
    SentenceTransformerEncoder,
    get_encoder,
)
from dtdr_agents.foundation.types import Demonstration, Tool, Toolset
from dtdr_agents.retrievers import DTDRC, DTDRL, ToolRetriever


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _percentiles(ms: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(ms, dtype=np.float64)
    return {
        "p50_ms": float(np.percentile(arr, 50)),
        "p99_ms": float(np.percentile(arr, 99)),
        "mean_ms": float(arr.mean()),
        "n": len(ms),
    }


def _time_steps(
    model: ToolRetriever,
    demos: Sequence[Demonstration],
    keep: Callable[[int], bool] = lambda step: True,
) -> list[float]:
    """Milliseconds of each `rank` call over the teacher-forced steps whose index passes `keep`."""
    out: list[float] = []
    for demo in demos:
        for step_i, step in enumerate(demo.steps()):
            if not keep(step_i):
                continue
            t0 = time.perf_counter()
            model.rank(demo.query, step.history)
            out.append((time.perf_counter() - t0) * 1000.0)
    return out


def run_speed(
    *,
    n_demos: int = 10000,
    n_queries: int = 300,
    encoder: str = "default",
    seed: int = 0,
    include_text_fit: bool = True,
    text_fit_demos: int = 1000,
) -> dict[str, Any]:
    """Measure fit time, per-step latency and peak memory of DTDR-C and both DTDR-L variants."""
    from dtdr_agents.datasets.synthetic import make_demo_dataset

    data = make_demo_dataset(n=n_demos + n_queries, seed=seed)
    train, test = list(data.demos[:n_demos]), list(data.demos[n_demos:])
    t0 = time.perf_counter()
    if encoder == "tfidf":
        enc: Any = get_encoder("tfidf")
    else:  # a fresh cache so that fit really computes every embedding
        enc = CachedEncoder(SentenceTransformerEncoder(encoder))
        enc.encode(["warm-up"])
    load_s = time.perf_counter() - t0

    figures: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpus": _cpu_count()},
        "n_demos": n_demos,
        "n_test_queries": len(test),
        "n_tools": len(data.tools),
        "encoder": enc.id,
        "encoder_load_s": load_s,
    }
    t0 = time.perf_counter()
    dtdr_c = DTDRC(encoder=enc, seed=seed).fit(train, data.tools)
    fit_c = time.perf_counter() - t0
    t0 = time.perf_counter()
    dtdr_ls = DTDRL(history="structured", encoder=enc, seed=seed).fit(train, data.tools)
    fit_ls = time.perf_counter() - t0
    figures["fit_s"] = {
        "dtdr-c (incl. query embeddings)": fit_c,
        "dtdr-l structured (query embeddings shared)": fit_ls,
        "dtdr-c + dtdr-l structured": fit_c + fit_ls,
    }
    n_text = n_demos if include_text_fit else min(text_fit_demos, n_demos)
    t0 = time.perf_counter()
    dtdr_lt = DTDRL(history="text", encoder=enc, seed=seed).fit(train[:n_text], data.tools)
    figures["fit_s"][f"dtdr-l text on {n_text} demos (incl. step embeddings)"] = (
        time.perf_counter() - t0
    )

    enc.encode([d.query for d in test])  # the request is encoded once per query
    figures["rank"] = {
        "dtdr-c per step": _percentiles(_time_steps(dtdr_c, test)),
        "dtdr-l text per step (encodes query + history)": _percentiles(_time_steps(dtdr_lt, test)),
        "dtdr-l structured, first step": _percentiles(_time_steps(dtdr_ls, test, lambda s: s == 0)),
        "dtdr-l structured, later steps": _percentiles(_time_steps(dtdr_ls, test, lambda s: s > 0)),
    }
    figures["peak_rss_mb"] = _peak_rss_mb()
    return figures


def _cpu_count() -> int:
    import os

    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )


def format_speed(figures: dict[str, Any]) -> str:
    """Human-readable lines of `run_speed` figures."""
    lines = [
        f"speed benchmark: {figures['n_demos']} demonstrations, {figures['n_tools']} tools, "
        f"{figures['n_test_queries']} test queries, encoder {figures['encoder']}, "
        f"{figures['machine']['cpus']} CPUs",
        f"encoder load: {figures['encoder_load_s']:.1f} s",
        "fit (seconds):",
    ]
    lines += [f"  {name}: {value:.1f}" for name, value in figures["fit_s"].items()]
    lines.append("rank latency per step (query embedding cached):")
    for name, p in figures["rank"].items():
        lines.append(
            f"  {name}: p50 {p['p50_ms']:.3f} ms, p99 {p['p99_ms']:.3f} ms, "
            f"mean {p['mean_ms']:.3f} ms "
            f"(n={p['n']})"
        )
    lines.append(f"peak memory (max RSS): {figures['peak_rss_mb']:.0f} MB")
    return "\n".join(lines)


# ----------------------------------------------------------------------- catalogue scaling
VARIATION_QUALIFIERS = (
    "for enterprise accounts",
    "for the EU region",
    "for the US region",
    "in batch mode",
    "with response caching",
    "through the legacy v1 API",
    "through the v2 API",
    "for mobile clients",
    "with strict input validation",
    "for sandbox testing",
    "with pagination",
    "for internal dashboards",
    "with audit logging",
    "for read-only access",
    "with retries on timeout",
    "for partner integrations",
)
"""Phrases a seeded variation appends to a real tool description (two per variant)."""


SCALE_BLAS_THREADS = 1
"""BLAS threads while `run_scale` times the steps. A step's products are small (a request's
candidates against its clauses, a call against DTDR-L's blocks): on a 2-core machine with
other work, two threads stalled them (1,000 tools, p50 0.78 ms and p90 7.8 ms with 2, 0.57
and 0.88 ms with 1), as in `fit` (`FIT_THREADS`)."""


def real_tool_descriptions(
    datasets_dir: str | Path,
) -> tuple[Toolset, list[Demonstration], list[Demonstration]]:
    """Real tools (Seal-Tools, then ToolRet's tasks) and Seal-Tools' dev / test plans.

    Tools with the same name are kept once (the first). Tools the Seal-Tools plans call come
    first, so every catalogue size that holds them can use those plans.
    """
    from dtdr_agents.datasets import load_dataset

    root = Path(datasets_dir).expanduser()
    seal = root / "sealtools"
    if not seal.is_dir():
        raise FileNotFoundError(
            f"{seal}: the scale benchmark builds its catalogues from Seal-Tools (and ToolRet); "
            "pass --datasets DIR, the folder holding sealtools/ and toolret/"
        )
    dev = load_dataset("sealtools", seal, split="dev")
    test = load_dataset("sealtools", seal, split="test_in_domain")
    tools: dict[str, Tool] = {}
    called = [c for d in (*dev.demos, *test.demos) for c in d.calls]
    for name in dict.fromkeys(called):
        tools[name] = dev.tools[dev.tools.index(name)]
    for tool in dev.tools:
        tools.setdefault(tool.name, tool)
    toolret = root / "toolret"
    if toolret.is_dir():
        for task in sorted(p for p in toolret.iterdir() if p.is_dir()):
            for tool in load_dataset("toolret", task).tools:
                tools.setdefault(tool.name, tool)
    return Toolset(tools.values()), list(dev.demos), list(test.demos)


def expand_catalogue(base: Toolset, size: int, seed: int = 0) -> Toolset:
    """`size` tools: the real ones first, then seeded variations of them.

    Variant `v` of real tool `t` is named `<t>__v<v>` and described as t's description plus two
    qualifiers drawn (seeded) from `VARIATION_QUALIFIERS` and its variant number, so every
    description is distinct and realistic in length and vocabulary. It keeps t's parameters
    and outputs, so the derived tool graph grows with the catalogue as a real one would.
    """
    if size <= len(base):
        return Toolset(list(base)[:size])
    rng = np.random.default_rng(seed)
    out = list(base)
    n_base = len(base)
    i = 0
    while len(out) < size:
        src = base[i % n_base]
        variant = i // n_base + 1
        a, b = rng.choice(len(VARIATION_QUALIFIERS), size=2, replace=False)
        desc = (
            f"{src.description} ({VARIATION_QUALIFIERS[int(a)]}, "
            f"{VARIATION_QUALIFIERS[int(b)]}; variant {variant})"
        )
        out.append(
            Tool(
                name=f"{src.name}__v{variant}",
                description=desc,
                parameters=src.parameters,
                outputs=src.outputs,
            )
        )
        i += 1
    return Toolset(out)


def _scale_one(
    size: int,
    datasets_dir: str,
    encoder: str,
    cache_dir: str | None,
    n_queries: int,
    seed: int,
    blas_threads: int | None,
) -> dict[str, Any]:
    """One catalogue size, measured in its own process (so peak RSS is this size's)."""
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

    from dtdr_agents.foundation.encoders import get_encoder
    from dtdr_agents.retrievers.hybrid import HybridRetriever
    from dtdr_agents.retrievers.tool_graph import ToolGraph

    base, dev, test = real_tool_descriptions(datasets_dir)
    tools = expand_catalogue(base, size, seed=seed)
    keep = [d for d in dev if all(tools.has(c) for c in d.calls)]
    queries = [d for d in test if all(tools.has(c) for c in d.calls)][:n_queries]
    enc = get_encoder(encoder, cache_dir=cache_dir)
    encoded = _encode_apart(enc, [t.text() for t in tools])
    t0 = time.perf_counter()
    graph_edges = len(ToolGraph.from_catalogue(tools))  # what the hybrid derives at its first call
    graph_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    model = HybridRetriever(encoder=enc, seed=seed).fit(keep, tools)
    fit_s = time.perf_counter() - t0
    index_s = model.index_s_  # the candidate stage's build, timed inside fit
    enc.encode([d.query for d in queries])  # a real agent encodes the request once
    times: list[float] = []
    limits = threadpool_limits(blas_threads, user_api="blas") if blas_threads else nullcontext()
    with limits:
        for demo in queries:
            steps = demo.steps()
            model.rank(demo.query, steps[0].history)  # the first step encodes, gathers candidates
            for step in steps[1:]:
                t1 = time.perf_counter()
                model.rank(demo.query, step.history)
                times.append((time.perf_counter() - t1) * 1000.0)
    arr = np.asarray(times) if times else np.zeros(1)
    return {
        "n_tools": len(tools),
        "n_real_tools": min(len(base), size),
        "n_demos": len(keep),
        "n_timed_steps": len(times),
        "index": model.index_.kind,
        **encoded,
        "fit_s": fit_s,
        "index_s": index_s,
        "graph_s": graph_s,
        "graph_edges": graph_edges,
        "rank_ms_p50": float(np.percentile(arr, 50)),
        "rank_ms_p99": float(np.percentile(arr, 99)),
        "peak_rss_mb": _peak_rss_mb(),
    }


def _encode_apart(enc: Encoder, texts: Sequence[str], batch: int = 4096) -> dict[str, Any]:
    """Encode the catalogue's descriptions before the fit, timed apart from it.

    With a cached encoder, only the texts its caches miss are computed (`encoded_texts`), so a
    cold cache shows up here rather than in `fit_s`. In batches: no catalogue-sized copy.
    An encoder fitted on the corpus (TF-IDF, not fitted yet) is fitted and used inside the
    retriever's fit: nothing is encoded apart (both figures None).
    """
    if not getattr(enc, "is_fitted", True):
        return {"encode_s": None, "encoded_texts": None}
    misses = enc.misses if isinstance(enc, CachedEncoder) else None
    t0 = time.perf_counter()
    for start in range(0, len(texts), batch):
        enc.encode(texts[start : start + batch])
    return {
        "encode_s": time.perf_counter() - t0,
        "encoded_texts": None if misses is None else enc.misses - misses,  # type: ignore[attr-defined]
    }


def run_scale(
    sizes: Sequence[int],
    *,
    datasets_dir: str | Path,
    encoder: str = "default",
    cache_dir: str | Path | None = None,
    n_queries: int = 300,
    seed: int = 0,
    blas_threads: int | None = SCALE_BLAS_THREADS,
) -> dict[str, Any]:
    """Fit `hybrid` on catalogues of each size and time its steps after the first.

    Catalogues: the real tools of Seal-Tools and ToolRet (`real_tool_descriptions`), expanded
    by `expand_catalogue`. Demonstrations: Seal-Tools `dev` plans whose tools are in the
    catalogue; timed requests: `test_in_domain` plans. Each size runs in a fresh process.
    The descriptions are encoded first, timed apart (`encode_s`, `encoded_texts`: what the
    embedding cache did not hold), so `fit_s` is the fit on cached embeddings.

    Args:
        sizes: Catalogue sizes, each measured in its own process.
        datasets_dir: The folder holding sealtools/ (and toolret/).
        encoder: Encoder spec of the hybrid.
        cache_dir: On-disk embedding cache folder, or None for none.
        n_queries: Test plans whose steps are timed.
        seed: Seed of the catalogue's variations and of the fit.
        blas_threads: BLAS threads while the steps are timed (`SCALE_BLAS_THREADS`); None
            or 0 leaves the library's default.

    Returns:
        `{"sizes": {"<n>": {"encode_s", "encoded_texts", "fit_s", "index_s", "graph_s",
        "graph_edges", "rank_ms_p50", "rank_ms_p99", "peak_rss_mb", ...}}, "machine": ...,
        "encoder": ..., "blas_threads": ...}`.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    bad = [s for s in sizes if int(s) < 1]
    if bad or not sizes:
        raise ValueError(f"catalogue sizes must be integers >= 1, got {list(sizes)}")
    out: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpus": _cpu_count()},
        "encoder": encoder,
        "blas_threads": blas_threads or None,
        "sizes": {},
    }
    ctx = multiprocessing.get_context("spawn")
    for size in sizes:
        with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
            fut = pool.submit(
                _scale_one,
                int(size),
                str(datasets_dir),
                encoder,
                None if cache_dir is None else str(cache_dir),
                n_queries,
                seed,
                blas_threads,
            )
            out["sizes"][str(int(size))] = fut.result()
    return out


def format_scale(figures: dict[str, Any]) -> str:
    """Human-readable table of `run_scale` figures."""
    threads = figures.get("blas_threads")
    lines = [
        f"scale benchmark: hybrid, encoder {figures['encoder']}, "
        f"{figures['machine']['cpus']} CPUs, BLAS threads while timed: "
        f"{threads or 'library default'}",
        "tools    real  demos  index  encoded  encode_s  fit_s  index_s  graph_s  edges     "
        "rank_ms_p50  rank_ms_p99  peak_rss_mb",
    ]
    for n, f in figures["sizes"].items():
        encoded = "-" if f.get("encoded_texts") is None else str(f["encoded_texts"])
        encode_s = "-" if f.get("encode_s") is None else f"{f['encode_s']:.1f}"
        lines.append(
            f"{n:<8} {f['n_real_tools']:<5} {f['n_demos']:<6} {f['index']:<6} {encoded:<8} "
            f"{encode_s:<9} {f['fit_s']:<6.1f} {f['index_s']:<8.3f} {f['graph_s']:<8.3f} "
            f"{f['graph_edges']:<9} {f['rank_ms_p50']:<12.3f} {f['rank_ms_p99']:<12.3f} "
            f"{f['peak_rss_mb']:.0f}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- cold start
STARTUP_TARGET_S = 5.0
"""The cold start `dtdr-agents rank` should stay under (p50 of fresh processes) with torch."""

ONNX_STARTUP_TARGET_S = 1.5
"""The same with the ONNX encoder (issue 38), and the MCP proxy's first `set_task` answered."""

IMPORT_TARGET_S = 0.5
"""`import dtdr_agents` in a fresh interpreter (issue 38; interpreter start included)."""

ProxyTimer = Callable[[Path, str, int], dict[str, Any]]
"""`time_proxy(model_dir, query, repeats)`: the MCP proxy's cold start (`mcp_dtdr.startup`)."""

DEFAULT_STARTUP_QUERY = "Summarize q3.pdf and email it to Ana"
"""The request `speed --startup` ranks on a model it was given."""


def _encoder_backend(spec: object) -> str | None:
    """What a sentence encoder runs on here: "onnx" or "torch" (None: the model has none)."""
    if not isinstance(spec, str) or spec == "tfidf":
        return None
    from dtdr_agents.foundation.encoders.onnx import onnx_choice

    return "onnx" if onnx_choice(spec) is not None else "torch"


_ENCODER_ALONE = (
    "import sys\n"
    "from dtdr_agents.cli import process_gc\n"
    "from dtdr_agents.foundation.encoders import get_encoder\n"
    "with process_gc():\n"
    "    get_encoder(sys.argv[1]).encode(['warm-up'])\n"
)
"""A process that only imports, loads and runs the encoder: the floor of a `rank`."""


def _wall_times(argv: Sequence[str], repeats: int) -> list[float]:
    """Wall seconds of `repeats` fresh processes running `argv` (each must succeed)."""
    out: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        out.append(time.perf_counter() - t0)
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv[:4])} ... exited {done.returncode}: {done.stderr[-800:]}"
            )
    return out


def _fit_startup_model(folder: Path, encoder: str, seed: int) -> tuple[str, float]:
    """Fit `hybrid` on 200 generated demonstrations into `folder`; (a held-out query, fit s)."""
    from dtdr_agents.datasets.synthetic import make_demo_dataset
    from dtdr_agents.retrievers import make_retriever

    data = make_demo_dataset(n=201, seed=seed)
    t0 = time.perf_counter()
    model = make_retriever("hybrid", encoder=encoder, seed=seed).fit(data.demos[:200], data.tools)
    fit_s = time.perf_counter() - t0
    model.save(folder)
    return data.demos[200].query, fit_s


def run_startup(
    model_dir: str | Path | None = None,
    *,
    query: str | None = None,
    repeats: int = 5,
    encoder: str = "default",
    seed: int = 0,
    time_proxy: ProxyTimer | None = None,
) -> dict[str, Any]:
    """Time the cold start of `python -m dtdr_agents rank` in fresh processes (wall time).

    Four figures, `repeats` processes each, after one untimed `rank` (so the operating
    system's file cache is warm, as after any first run): `import dtdr_agents`, the
    interpreter and the CLI (`--version`), the model's encoder alone (import, load, encode one
    text: what `rank` cannot go below; not timed for a TF-IDF model, whose encoder is in the
    model), and `rank` end to end. With `time_proxy`, also the MCP proxy's (under ``"mcp"``).
    The encoder backend is the one the default encoder takes here (``DTDR_ENCODER_BACKEND``,
    or ONNX where torch is not installed); the target of `rank` is
    `ONNX_STARTUP_TARGET_S` with ONNX, `STARTUP_TARGET_S` with torch.

    Args:
        model_dir: A saved model; None fits `hybrid` on 200 generated demonstrations with
            `encoder` into a temporary folder first.
        query: The request ranked (default: a held-out generated request, or a fixed one).
        repeats: Processes per figure.
        encoder: Encoder of the fitted model when `model_dir` is None.
        seed: Seed of the generated demonstrations.
        time_proxy: Times the MCP proxy on the model (`ProxyTimer`), or None.

    Returns:
        `{"kind": "startup", "rank_s": [...], "rank_p50_s", "import_s": [...],
        "import_p50_s", "cli_s": [...], "cli_p50_s", "encoder_s": [...] or None,
        "encoder_p50_s", "encoder_backend", "target_s", "model", "retriever", "encoder",
        "fit_s", "mcp": {...} or None, ...}`.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    with tempfile.TemporaryDirectory(prefix="dtdr-startup-") as tmp:
        fit_s = None
        if model_dir is None:
            model_dir = Path(tmp) / "model"
            held_out, fit_s = _fit_startup_model(Path(model_dir), encoder, seed)
            query = query or held_out
        from dtdr_agents.foundation.persistence import read_model

        manifest = read_model(model_dir).manifest
        info = manifest.get("encoder") or {}
        python = [sys.executable, "-m", "dtdr_agents"]
        rank = [*python, "rank", "--model", str(model_dir), "--query"]
        rank.append(query or DEFAULT_STARTUP_QUERY)
        _wall_times(rank, 1)  # untimed: warms the file cache
        import_s = _wall_times([sys.executable, "-c", "import dtdr_agents"], repeats)
        cli_s = _wall_times([*python, "--version"], repeats)
        spec = info.get("spec")
        encoder_s = None
        if isinstance(spec, str) and spec != "tfidf":
            encoder_s = _wall_times([sys.executable, "-c", _ENCODER_ALONE, spec], repeats)
        rank_s = _wall_times(rank, repeats)
        mcp = None
        if time_proxy is not None:
            mcp = time_proxy(Path(model_dir), query or DEFAULT_STARTUP_QUERY, repeats)
    backend = _encoder_backend(spec)

    def p50(xs: Sequence[float] | None) -> float | None:
        return None if xs is None else float(np.percentile(xs, 50))

    return {
        "kind": "startup",
        "machine": {"python": platform.python_version(), "cpus": _cpu_count()},
        "model": str(model_dir) if fit_s is None else None,
        "retriever": manifest.get("retriever_id"),
        "encoder": info.get("id"),
        "encoder_backend": backend,
        "fit_s": fit_s,
        "repeats": repeats,
        "target_s": ONNX_STARTUP_TARGET_S if backend == "onnx" else STARTUP_TARGET_S,
        "import_target_s": IMPORT_TARGET_S,
        "import_s": import_s,
        "import_p50_s": p50(import_s),
        "mcp": mcp,
        "cli_s": cli_s,
        "cli_p50_s": p50(cli_s),
        "encoder_s": encoder_s,
        "encoder_p50_s": p50(encoder_s),
        "rank_s": rank_s,
        "rank_p50_s": p50(rank_s),
    }


def format_startup(figures: dict[str, Any]) -> str:
    """Human-readable lines of `run_startup` figures."""
    where = figures["model"] or f"a {figures['retriever']} model fitted on 200 demo requests"
    lines = [
        f"startup benchmark: `python -m dtdr_agents rank` on {where}, encoder "
        f"{figures['encoder']}, {figures['machine']['cpus']} CPUs; wall time of fresh "
        f"processes after one untimed run, runs per figure: {figures['repeats']}",
    ]
    rows = [
        ("import dtdr_agents", figures.get("import_s")),
        ("interpreter + CLI (--version)", figures["cli_s"]),
        ("encoder alone (import, load, encode one text)", figures["encoder_s"]),
        ("rank, end to end", figures["rank_s"]),
    ]
    for name, xs in rows:
        if xs is not None:
            runs = " ".join(f"{x:.2f}" for x in xs)
            lines.append(f"  {name}: p50 {float(np.percentile(xs, 50)):.2f} s  (runs: {runs})")
    mcp = figures.get("mcp")
    if mcp:
        for name, key in (("initialize", "initialize_s"), ("first set_task", "set_task_s")):
            runs = " ".join(f"{x:.2f}" for x in mcp[key])
            lines.append(
                f"  MCP proxy, start to {name} answered: p50 "
                f"{float(np.percentile(mcp[key], 50)):.2f} s  (runs: {runs})"
            )

    def verdict(value: float | None, target: float) -> str:
        return "met" if value is not None and value <= target else "NOT met"

    backend = f" ({figures['encoder_backend']} encoder)" if figures.get("encoder_backend") else ""
    target = figures["target_s"]
    lines.append(
        f"target: rank p50 at most {target:g} s{backend}: {verdict(figures['rank_p50_s'], target)}"
    )
    if figures.get("import_s"):
        lines.append(
            f"target: import p50 at most {figures['import_target_s']:g} s: "
            f"{verdict(figures['import_p50_s'], figures['import_target_s'])}"
        )
    if mcp:
        lines.append(
            f"target: MCP first set_task p50 at most {ONNX_STARTUP_TARGET_S:g} s: "
            f"{verdict(mcp['set_task_p50_s'], ONNX_STARTUP_TARGET_S)}"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------- peers in the same run
PEERS_GROUP = "dtdr_agents.speed_peers"
"""Entry-point group of the peers `speed --peers` times (`langchain_dtdr.peers` registers)."""

PEERS_INSTALL_HINT = "pip install 'dtdr-agents[langgraph,peer]'"
"""What `speed --peers` needs: graph-tool-call (the peer extra) and LangGraph's store."""

PEER_PASSES = {
    "encoding included": (
        "every text a peer embeds at a step is encoded at that step: no embedding cache "
        "(hybrid keeps what it computes for a request, its clauses' embeddings among them, "
        "for the request's later steps, as it does when deployed)"
    ),
    "search only": (
        "every text a peer embeds was encoded in an untimed pass before: an embedding is a "
        "cache lookup (hybrid's per-request memo is warm too)"
    ),
}
"""The two timed passes of `run_peers`, and what each says about encoding."""


@dataclass(frozen=True)
class PeerStep:
    """One peer's retrieval for one agent step, as its package does it.

    Attributes:
        name: The peer's label in the results.
        does: What one call does, said in the results (with what it encodes).
        step: Called with (request, calls so far); what it returns is ignored.
    """

    name: str
    does: str
    step: Callable[[str, tuple[str, ...]], object]


PeerFactory = Callable[[Toolset, Callable[[], Encoder], int], Sequence[PeerStep]]
"""`make_peers(tools, new_encoder, k)`: the peers, each embedding with its own `new_encoder()`."""


class PassEncoder(CachedEncoder):
    """A peer's own encoder over the shared model: encodes every call, or answers from its cache.

    With `cached` False (the "encoding included" pass) every call runs the model and nothing
    is kept; with `cached` True it is a `CachedEncoder` (memory only). One per peer, so no
    peer is timed on embeddings another peer computed.
    """

    cached: bool = False

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """The wrapped model's embedding of `texts` (from the cache when `cached`)."""
        return super().encode(texts) if self.cached else self.inner.encode(texts)


def load_peer_factory() -> PeerFactory:
    """The installed `make_peers` (entry point ``peers`` of `PEERS_GROUP`).

    Raises:
        ImportError: No provider installed, or its packages missing: names `PEERS_INSTALL_HINT`.
    """
    from importlib.metadata import entry_points

    what = "speed --peers times graph-tool-call and a langgraph-bigtool store"
    found = list(entry_points(group=PEERS_GROUP, name="peers"))
    if not found:
        raise ImportError(f"{what}: {PEERS_INSTALL_HINT} (no '{PEERS_GROUP}' entry point)")
    try:
        factory: PeerFactory = found[0].load()
    except ImportError as exc:
        raise ImportError(f"{what}: {PEERS_INSTALL_HINT} ({exc})") from exc
    return factory


def _interleaved(
    peers: Sequence[PeerStep], steps: Sequence[tuple[str, tuple[str, ...]]]
) -> dict[str, list[float]]:
    """Milliseconds of each peer's call at each step; at step i the order starts at peer i."""
    times: dict[str, list[float]] = {p.name: [] for p in peers}
    for i, (query, history) in enumerate(steps):
        for j in range(len(peers)):
            peer = peers[(i + j) % len(peers)]
            t0 = time.perf_counter()
            peer.step(query, history)
            times[peer.name].append((time.perf_counter() - t0) * 1000.0)
    return times


def _peer_figures(ms: Sequence[float], first: Sequence[bool]) -> dict[str, Any]:
    """p50, p95, mean and n of one peer's step times, and p50 of first and later steps."""
    arr = np.asarray(ms, dtype=np.float64)
    is_first = np.asarray(first, dtype=bool)
    return {
        "p50_ms": float(np.percentile(arr, 50)),
        "p95_ms": float(np.percentile(arr, 95)),
        "mean_ms": float(arr.mean()),
        "n": len(ms),
        "first_step_p50_ms": float(np.percentile(arr[is_first], 50)),
        "later_steps_p50_ms": (
            float(np.percentile(arr[~is_first], 50)) if (~is_first).any() else None
        ),
    }


def run_peers(
    train: Sequence[Demonstration],
    test: Sequence[Demonstration],
    tools: Toolset,
    *,
    make_peers: PeerFactory,
    dataset: str,
    encoder: str = "default",
    k: int = 5,
    n_queries: int = 300,
    seed: int = 0,
) -> dict[str, Any]:
    """Time `hybrid` and the peers per agent step, interleaved, in this one process.

    `hybrid` is fitted on `train`; the peers are built from the catalogue by `make_peers`.
    Every peer embeds with the same model, each through its own `PassEncoder`. The steps
    are the teacher-forced steps (end-of-plan's included) of the first `n_queries` test
    plans, in order; at every step each peer is called once, in an order rotated by the
    step. Two timed passes (`PEER_PASSES`): "encoding included", then, after an untimed
    pass that fills each peer's cache, "search only". Ratios are a peer's figure over
    hybrid's in the same pass. Quality is not measured.

    Returns:
        `{"kind": "speed-peers", "dataset", "n_tools", "n_train", "n_test_requests",
        "n_steps", "encoder", "k", "order", "peers": {name: what one step does},
        "passes": {pass: {"encoding", "peers": {name: {"p50_ms", "p95_ms", "mean_ms", "n",
        "first_step_p50_ms", "later_steps_p50_ms", "ratio_p50", "ratio_p95"}}}}, ...}`.
    """
    from dtdr_agents.retrievers import make_retriever

    if encoder == "tfidf":
        raise ValueError("speed --peers times sentence encoders: --encoder tfidf is not one")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    shared = get_encoder(encoder)
    model_encoder = shared.inner if isinstance(shared, CachedEncoder) else shared
    encoders: list[PassEncoder] = []

    def new_encoder() -> PassEncoder:
        enc = PassEncoder(model_encoder)
        encoders.append(enc)
        return enc

    hybrid_encoder = new_encoder()
    hybrid_encoder.cached = True  # fit is not timed
    t0 = time.perf_counter()
    hybrid = make_retriever("hybrid", encoder=hybrid_encoder, seed=seed).fit(list(train), tools)
    fit_s = time.perf_counter() - t0
    hybrid_encoder.cached = False
    hybrid_step = PeerStep(
        "hybrid",
        "rank(request, calls so far): scores every tool and end-of-plan; encodes the "
        "request's clauses at its first step and keeps them for its later steps",
        lambda query, history: hybrid.rank(query, history),
    )
    peers = [hybrid_step, *make_peers(tools, new_encoder, k)]
    names = [p.name for p in peers]
    if len(set(names)) != len(names):
        raise ValueError(f"peer names must be distinct, got {names}")
    plans = list(test)[:n_queries]
    steps = [(d.query, s.history) for d in plans for s in d.steps()]
    first = [i == 0 for d in plans for i in range(len(d.steps()))]
    if not steps:
        raise ValueError(f"{dataset}: no test plan to time")
    passes: dict[str, Any] = {}
    for name, encoding in PEER_PASSES.items():
        if name == "search only":
            for enc in encoders:
                enc.cached = True
            _interleaved(peers, steps)  # untimed: fills every peer's cache
        times = _interleaved(peers, steps)
        figures = {p: _peer_figures(ms, first) for p, ms in times.items()}
        base = figures["hybrid"]
        for fig in figures.values():
            fig["ratio_p50"] = fig["p50_ms"] / base["p50_ms"]
            fig["ratio_p95"] = fig["p95_ms"] / base["p95_ms"]
        passes[name] = {"encoding": encoding, "peers": figures}
    return {
        "kind": "speed-peers",
        "machine": {"python": platform.python_version(), "cpus": _cpu_count()},
        "dataset": dataset,
        "n_tools": len(tools),
        "n_train": len(train),
        "n_test_requests": len(plans),
        "n_steps": len(steps),
        "encoder": model_encoder.id,
        "k": k,
        "hybrid_fit_s": fit_s,
        "order": "interleaved: every step calls each peer once, in an order rotated by the step",
        "peers": {p.name: p.does for p in peers},
        "passes": passes,
    }


def _f3(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_peers(reports: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """`run_peers` results as one Markdown table (a row per dataset, pass and peer)."""
    lines = [
        "| dataset | tools | steps | k | pass | peer | p50 ms | p95 ms | × hybrid p50 | "
        "× hybrid p95 | first step p50 ms | later steps p50 ms |",
        "|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    does: dict[str, str] = {}
    sources = []
    for name, r in reports:
        for pass_name, one in r["passes"].items():
            for peer, f in one["peers"].items():
                lines.append(
                    f"| {r['dataset']} | {r['n_tools']} | {r['n_steps']} | {r['k']} | "
                    f"{pass_name} | {peer} | {f['p50_ms']:.3f} | {f['p95_ms']:.3f} | "
                    f"{f['ratio_p50']:.2f} | {f['ratio_p95']:.2f} | "
                    f"{f['first_step_p50_ms']:.3f} | {_f3(f['later_steps_p50_ms'])} |"
                )
        does.update(r["peers"])
        prov = r.get("provenance") or {}
        where = f"`{prov['command']}`" if prov.get("command") else "no provenance"
        commit = str(prov.get("commit") or "?")[:7]
        sources.append(
            f"`{name}`: {where} (commit {commit}, {r['machine'].get('cpus', '?')} cores, "
            f"encoder {r['encoder']}, hybrid fitted on {r['n_train']} demonstrations)."
        )
    lines.append("")
    lines += [f"- {peer}: {text}." for peer, text in does.items()]
    passes = reports[0][1]["passes"] if reports else {}
    lines += [f"- {p}: {one['encoding']}." for p, one in passes.items()]
    for source in sources:
        lines += ["", source]
    return "\n".join(lines)
