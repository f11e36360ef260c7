"""Published figures generated from the JSON results: `dtdr-agents report docs/results --write`.

Every results table in README.md, docs/*.md and the CHANGELOG sits between two markers that
name what generates it::

    <!-- results: table taskbench_hf.json -->
    ... generated, never edited by hand ...
    <!-- /results -->

Kinds: ``table FILE`` (one bench or demo report: every retriever, the paired comparisons),
``curve FILE`` (its learning curve), ``headline FILE ...`` (`hybrid` against the best other
retriever of each run), ``scale FILE`` (the large-catalogue benchmark), ``speed FILE``
(`dtdr-agents speed`), ``refit FILE`` (`dtdr-agents store refit-bench`), ``startup FILE``
(`dtdr-agents speed --startup`: cold starts), ``peers FILE ...``
(`dtdr-agents speed --peers`), ``e2e FILE``
(an end-to-end run with a real model: its figures with their intervals, the paired
comparisons and the targets) and ``agent-bench FILE`` (live agents with a real model: every
contestant with intervals, the paired verdicts). FILE is relative to the results folder.
Every JSON is validated first (protocol, required fields, at least `MIN_SEEDS` seeds); a bad
one names the file and the field, and nothing is written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from dtdr_agents.evaluation.protocol import PROTOCOL
from dtdr_agents.evaluation.report import comparison_lines, format_ablations, format_markdown
from dtdr_agents.foundation.atomic import atomic_write_text

MIN_SEEDS = 3
"""Published figures are means over at least this many seeds."""

BLOCK = re.compile(
    r"(?P<open><!-- results: (?P<spec>[^>]*?) -->\n)(?P<body>.*?)(?P<close><!-- /results -->)",
    re.DOTALL,
)


class ResultsError(ValueError):
    """A results file or a marker that cannot generate its block (names the file and field)."""


class _Provenance(BaseModel):
    model_config = ConfigDict(extra="allow")
    command: str
    version: str
    commit: str | None
    cpu_count: int | None
    seeds: list[int]


class _Entry(BaseModel):
    model_config = ConfigDict(extra="allow")
    tool_mrr: float
    tool_mrr_ci: tuple[float, float]
    tool_top1: float
    stop_f1: float | None = None
    end_first_at_tool_steps: float | None = None
    paper_mrr: float
    seeds: list[int]


class _Report(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: Literal["bench"]
    protocol: str
    dataset: str
    n_train: int
    n_test: int
    n_steps: int
    encoder: str
    provenance: _Provenance
    results: dict[str, _Entry]
    comparisons: list[dict[str, Any]]


class _ScaleSize(BaseModel):
    model_config = ConfigDict(extra="allow")
    n_tools: int
    n_real_tools: int
    n_demos: int
    index: str
    fit_s: float
    index_s: float
    graph_s: float | None = None  # absent from files written before it was measured
    graph_edges: int | None = None
    rank_ms_p50: float
    rank_ms_p99: float
    peak_rss_mb: float


class _Scale(BaseModel):
    model_config = ConfigDict(extra="allow")
    machine: dict[str, Any]
    encoder: str
    sizes: dict[str, _ScaleSize]


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON file whose top level is an object, with a clear error naming the file.

    Raises:
        ResultsError: The file cannot be read, is not JSON, or is not an object.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ResultsError(f"{path}: not a results object (top level is not an object)")
    return data


def _field_error(path: Path, exc: ValidationError) -> ResultsError:
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
    return ResultsError(f"{path}: field {loc}: {first['msg']}")


def load_bench(path: Path, *, min_seeds: int = MIN_SEEDS) -> dict[str, Any]:
    """A validated bench/demo report of this protocol, run over at least `min_seeds` seeds."""
    data = _validated(path, _Report)
    if data["protocol"] != PROTOCOL:
        raise ResultsError(
            f"{path}: field protocol: {data['protocol']!r} is not this package's {PROTOCOL!r}; "
            "re-run the command in its provenance"
        )
    for rid, entry in data["results"].items():
        if len(entry["seeds"]) < min_seeds:
            raise ResultsError(
                f"{path}: field results.{rid}.seeds: {len(entry['seeds'])} seed(s); published "
                f"figures are means over at least {min_seeds} (run with --seeds {min_seeds})"
            )
    return data


def _validated(path: Path, schema: type[BaseModel]) -> dict[str, Any]:
    data = read_json_object(path)
    try:
        schema.model_validate(data)
    except ValidationError as exc:
        raise _field_error(path, exc) from exc
    return data


class _E2EResult(BaseModel):
    model_config = ConfigDict(extra="allow")
    retriever: str
    mode: str
    intervals: dict[str, Any]


class _E2EReport(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: Literal["e2e"]
    dry_run: Literal[False]
    dataset: str
    n_test: int
    n_steps: int
    n_tools: int
    model: str
    provenance: _Provenance
    results: list[_E2EResult]


def load_e2e(path: Path) -> dict[str, Any]:
    """A validated `dtdr-agents e2e ... --json` report of a run (not a dry run)."""
    return _validated(path, _E2EReport)


def render_e2e(report: Mapping[str, Any], name: str) -> str:
    """An end-to-end run: the model, its figures with intervals, comparisons and targets."""
    from dtdr_agents.evaluation.e2e.report import interval_tables

    prov = report["provenance"]
    lines = [
        f"{report['dataset']}: {report['n_test']} test plans ({report['n_steps']} steps), "
        f"{report['n_tools']} tools, {report.get('n_train', '?')} demonstrations; model "
        f"`{report['model']}`; prompt tokens counted with "
        f"{(report.get('token_counter') or {}).get('name', '?')}.",
        *interval_tables(report),
        "",
        f"`{name}`: `{prov['command']}` (version {prov['version']}, commit "
        f"{str(prov['commit'])[:7]}, {prov['cpu_count']} cores).",
    ]
    return "\n".join(lines)


class _AgentBenchReport(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: Literal["agent-bench"]
    replay: bool
    dataset: str
    model: str
    n_plans: int
    n_tools: int
    provenance: _Provenance
    contestant_order: list[str]
    contestants: dict[str, dict[str, Any]]
    comparisons: list[dict[str, Any]]


def load_agent_bench(path: Path) -> dict[str, Any]:
    """A validated `dtdr-agents agent-bench ... --json` report (a run or its replay)."""
    data = _validated(path, _AgentBenchReport)
    missing = [n for n in data["contestant_order"] if n not in data["contestants"]]
    if missing:
        raise ResultsError(f"{path}: contestant_order names {missing}, absent from contestants")
    return data


def render_agent_bench(report: Mapping[str, Any], name: str) -> str:
    """Live agents: every contestant's figures with intervals, then the paired verdicts."""
    from dtdr_agents.evaluation.agent_bench import format_agent_bench_markdown

    prov = report["provenance"]
    return "\n".join(
        [
            format_agent_bench_markdown(report).rstrip("\n"),
            "",
            f"`{name}`: `{prov['command']}` (version {prov['version']}, commit "
            f"{str(prov['commit'])[:7]}, {prov['cpu_count']} cores).",
        ]
    )


def load_scale(path: Path) -> dict[str, Any]:
    """A validated `dtdr-agents speed --catalogue-size ... --json` result."""
    return _validated(path, _Scale)


class _Speed(BaseModel):
    model_config = ConfigDict(extra="allow")
    machine: dict[str, Any]
    n_demos: int
    n_test_queries: int
    n_tools: int
    encoder: str
    encoder_load_s: float
    fit_s: dict[str, float]
    rank: dict[str, dict[str, float]]
    peak_rss_mb: float


def load_speed(path: Path) -> dict[str, Any]:
    """A validated `dtdr-agents speed --n-demos N --json` result."""
    return _validated(path, _Speed)


def render_speed(data: Mapping[str, Any], name: str) -> str:
    """The speed benchmark's printed lines, as a code block, with its command when recorded."""
    from dtdr_agents.evaluation.perf import format_speed

    prov = data.get("provenance")
    source = _source(name, prov, prov.get("cpu_count", "?"), []) if prov else f"`{name}`."
    return "\n".join(["```", format_speed(dict(data)), "```", "", source])


class _Refit(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: Literal["refit-bench"]
    retriever: str
    encoder: str
    fit_runs: int
    new_runs: int
    max_runs: int
    n_tools: int
    phases: dict[str, dict[str, Any]]
    refit_ratio: float | None
    checks: dict[str, bool]
    provenance: _Provenance


def render_refit(path: Path, name: str) -> str:
    """`dtdr-agents store refit-bench` as a Markdown table, with its command."""
    from dtdr_agents.evaluation.refit_bench import format_refit

    data = _validated(path, _Refit)
    prov = data["provenance"]
    return (
        f"{format_refit(data)}\n\n`{name}`: `{prov['command']}` (version {prov['version']}, "
        f"commit {str(prov['commit'])[:7]}, {prov['cpu_count']} cores)."
    )


class _Startup(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: Literal["startup"]
    repeats: int
    target_s: float
    import_s: list[float]
    cli_s: list[float]
    rank_s: list[float]
    rank_p50_s: float
    provenance: _Provenance


def render_startup(path: Path, name: str) -> str:
    """`dtdr-agents speed --startup --json` as its printed lines, with its command."""
    from dtdr_agents.evaluation.perf import format_startup

    data = _validated(path, _Startup)
    prov = data["provenance"]
    source = _source(name, prov, prov.get("cpu_count", "?"), [])
    return "\n".join(["```", format_startup(dict(data)), "```", "", source])


class _Peers(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: Literal["speed-peers"]
    dataset: str
    n_tools: int
    n_steps: int
    k: int
    encoder: str
    machine: dict[str, Any]
    peers: dict[str, str]
    passes: dict[str, dict[str, Any]]
    provenance: _Provenance


def render_peers(files: Sequence[str], paths: Sequence[Path]) -> str:
    """`dtdr-agents speed --peers` results (one or more datasets) as one Markdown table."""
    from dtdr_agents.evaluation.perf import format_peers

    return format_peers([(f, _validated(p, _Peers)) for f, p in zip(files, paths, strict=True)])


def _f(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"


def _ci(value: Sequence[float] | None) -> str:
    return "-" if not value else f"[{value[0]:.3f}, {value[1]:.3f}]"


def _seeds_line(report: Mapping[str, Any], name: str) -> str:
    prov = report["provenance"]
    return (
        f"`{name}`: {report['dataset']}, {report['n_train']} demonstrations, {report['n_test']} "
        f"test requests, means over seeds {prov['seeds']}; `{prov['command']}` "
        f"(version {prov['version']}, commit {str(prov['commit'])[:7]}, "
        f"{prov['cpu_count']} cores)."
    )


def render_table(report: Mapping[str, Any], name: str) -> str:
    """Every retriever of one report, its comparisons, and where it came from."""
    lines = [format_markdown(report), ""]
    lines += [f"- {c}" for c in comparison_lines(report)]
    lines += ["", _seeds_line(report, name)]
    return "\n".join(lines)


def render_curve(report: Mapping[str, Any], name: str) -> str:
    """The learning curve of one report (tool-MRR [95% CI] by demonstrations)."""
    rows = (report.get("ablations") or {}).get("n_demos")
    if not rows:
        raise ResultsError(f"{name}: field ablations.n_demos: missing (run with --ablations)")
    return "\n".join([format_ablations(rows, "demonstrations"), "", _seeds_line(report, name)])


def render_headline(reports: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """One row per run: `hybrid` against its best other retriever, with the verdict."""
    lines = [
        "| dataset | hybrid tool-MRR [95% CI] | best other | its tool-MRR [95% CI] | "
        "difference [95% CI] | verdict | hybrid stop F1 | hybrid paper MRR |",
        "|---|---:|---|---:|---:|---|---:|---:|",
    ]
    not_ahead: list[str] = []
    for name, report in reports:
        entry = report["results"].get("hybrid")
        comparisons = report.get("comparisons") or []
        if entry is None or not comparisons:
            raise ResultsError(
                f"{name}: field results.hybrid: the headline needs hybrid and "
                "at least one other retriever"
            )
        best = comparisons[0]
        other = report["results"][best["b"]]
        label = Path(name).stem
        lines.append(
            f"| {label} | {_f(entry['tool_mrr'])} {_ci(entry['tool_mrr_ci'])} | "
            f"`{best['b']}` | {_f(other['tool_mrr'])} {_ci(other['tool_mrr_ci'])} | "
            f"{best['diff']:+.3f} [{best['diff_ci'][0]:+.3f}, {best['diff_ci'][1]:+.3f}] | "
            f"{best['verdict']} | {_f(entry.get('stop_f1'))} | {_f(entry['paper_mrr'])} |"
        )
        not_ahead += [
            f"`{c['b']}` on {label} ({c['verdict']})"
            for c in comparisons
            if c["verdict"] != "beats"
        ]
    lines.append("")
    if not_ahead:
        lines.append(
            "`hybrid` is **not** shown ahead of every other retriever: against "
            + "; ".join(not_ahead)
            + ", the interval of the difference does not exclude 0 or favours the other."
        )
    else:
        lines.append("`hybrid` beats every other retriever of every run listed here.")
    return "\n".join(lines)


def render_scale(data: Mapping[str, Any], name: str) -> str:
    """The large-catalogue benchmark as a Markdown table, with its command when recorded."""
    lines = [
        "| tools | real | demos | index | encode_s | fit_s | index_s | graph_s | graph_edges | "
        "rank_ms_p50 | rank_ms_p99 | peak_rss_mb |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in sorted(data["sizes"], key=int):
        s = data["sizes"][size]
        graph_s = "-" if s.get("graph_s") is None else f"{s['graph_s']:.3f}"
        encode_s = "-" if s.get("encode_s") is None else f"{s['encode_s']:.1f}"
        lines.append(
            f"| {size} | {s['n_real_tools']} | {s['n_demos']} | {s['index']} | {encode_s} "
            f"| {s['fit_s']:.1f} | {s['index_s']:.3f} | {graph_s} | {s.get('graph_edges', '-')} | "
            f"{s['rank_ms_p50']:.3f} | {s['rank_ms_p99']:.3f} | {s['peak_rss_mb']:.0f} |"
        )
    machine = data.get("machine") or {}
    prov = data.get("provenance")
    if not prov:  # written before the command was recorded
        lines += ["", f"`{name}`: encoder {data['encoder']}, {machine.get('cpus', '?')} cores."]
        return "\n".join(lines)
    threads = data.get("blas_threads")
    details = [
        f"encoder {data['encoder']}",
        f"steps timed with {threads} BLAS thread{'s' if threads != 1 else ''}"
        if threads
        else "steps timed with the BLAS default threads",
    ]
    lines += ["", _source(name, prov, machine.get("cpus", "?"), details)]
    return "\n".join(lines)


def _source(name: str, prov: Mapping[str, Any], cores: object, details: list[str]) -> str:
    """A timing file's footer: its command, commit, cores, `details`, load and `--note`.

    The note is said after the command unless the command already shows it.
    """
    said = [f"commit {str(prov.get('commit'))[:7]}", f"{cores} cores", *details]
    if prov.get("load_average_at_start"):
        said.append(f"load average at start {prov['load_average_at_start'][0]}")
    note = prov.get("note")
    tail = f" {note}" if note and note not in str(prov.get("command")) else ""
    return f"`{name}`: `{prov['command']}` ({', '.join(said)}).{tail}"


@dataclass(frozen=True)
class Block:
    """One generated block of a document."""

    doc: Path
    line: int
    spec: str
    start: int
    end: int
    body: str


def find_blocks(doc: Path, text: str) -> list[Block]:
    """The marked blocks of a document, in order."""
    out = []
    for m in BLOCK.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out.append(Block(doc, line, m["spec"].strip(), m.start("body"), m.end("body"), m["body"]))
    return out


def render(spec: str, results_dir: Path, *, where: str, min_seeds: int = MIN_SEEDS) -> str:
    """The body a marker's spec generates (ends with a newline)."""
    kind, *files = spec.split()
    if not files:
        raise ResultsError(f"{where}: marker '{spec}' names no results file")
    paths = [results_dir / f for f in files]
    if kind == "table" and len(paths) == 1:
        body = render_table(load_bench(paths[0], min_seeds=min_seeds), files[0])
    elif kind == "curve" and len(paths) == 1:
        body = render_curve(load_bench(paths[0], min_seeds=min_seeds), files[0])
    elif kind == "headline":
        body = render_headline(
            [(f, load_bench(p, min_seeds=min_seeds)) for f, p in zip(files, paths, strict=True)]
        )
    elif kind == "scale" and len(paths) == 1:
        body = render_scale(load_scale(paths[0]), files[0])
    elif kind == "speed" and len(paths) == 1:
        body = render_speed(load_speed(paths[0]), files[0])
    elif kind == "peers":
        body = render_peers(files, paths)
    elif kind == "refit" and len(paths) == 1:
        body = render_refit(paths[0], files[0])
    elif kind == "startup" and len(paths) == 1:
        body = render_startup(paths[0], files[0])
    elif kind == "e2e" and len(paths) == 1:
        body = render_e2e(load_e2e(paths[0]), files[0])
    elif kind == "agent-bench" and len(paths) == 1:
        body = render_agent_bench(load_agent_bench(paths[0]), files[0])
    else:
        raise ResultsError(
            f"{where}: marker '{spec}': kind must be 'table FILE', 'curve FILE', "
            "'headline FILE ...', 'scale FILE', 'speed FILE', 'refit FILE', 'startup FILE', "
            "'peers FILE ...', 'e2e FILE' or 'agent-bench FILE'"
        )
    return body + "\n"


def default_documents(root: Path) -> list[Path]:
    """README.md, docs/*.md and CHANGELOG.md under `root` (those that exist)."""
    docs = [root / "README.md", *sorted((root / "docs").glob("*.md")), root / "CHANGELOG.md"]
    return [d for d in docs if d.is_file()]


@dataclass(frozen=True)
class Stale:
    """A block whose text differs from what its results generate."""

    doc: Path
    line: int
    spec: str


def sync(
    results_dir: Path,
    documents: Iterable[Path],
    *,
    write: bool,
    min_seeds: int = MIN_SEEDS,
) -> list[Stale]:
    """Regenerate every marked block; returns the stale ones (rewritten when `write`).

    Everything is rendered before anything is written, so a bad results file or marker
    leaves every document as it was.

    Raises:
        ResultsError: A results file or marker that cannot generate its block.
    """
    updates: dict[Path, str] = {}
    stale: list[Stale] = []
    for doc in documents:
        text = doc.read_text(encoding="utf-8")
        blocks = find_blocks(doc, text)
        new_text, last = [], 0
        for b in blocks:
            body = render(b.spec, results_dir, where=f"{doc}:{b.line}", min_seeds=min_seeds)
            if body != b.body:
                stale.append(Stale(doc, b.line, b.spec))
            new_text += [text[last : b.start], body]
            last = b.end
        new_text.append(text[last:])
        joined = "".join(new_text)
        if joined != text:
            updates[doc] = joined
    if write:
        for doc, text in updates.items():
            atomic_write_text(doc, text)
    return stale


FIGURE = re.compile(r"(?<![\w.])\d+\.\d{3}(?![\w.])")
"""A figure with three decimals (what the results tables print)."""


def loose_figures(doc: Path) -> list[tuple[int, str]]:
    """Lines outside generated blocks that hold a three-decimal figure (typed by hand).

    In the CHANGELOG only table rows count (its prose records history, its tables must not).
    """
    text = doc.read_text(encoding="utf-8")
    spans = [(b.start, b.end) for b in find_blocks(doc, text)]
    out = []
    pos = 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        inside = any(a <= pos < b for a, b in spans)
        pos += len(line)
        if inside or not FIGURE.search(line):
            continue
        if doc.name == "CHANGELOG.md" and not line.lstrip().startswith("|"):
            continue
        out.append((number, line.rstrip("\n")))
    return out
