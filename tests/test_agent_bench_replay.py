"""The committed live-agent results replay offline: a subset of plans, run for run (slow)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dtdr_agents.cli import main

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
PLANS = 3
"""Plans replayed: enough to cover every contestant's paths, quick enough for make test-slow."""

NOT_REPLAYED = {"wall_ms"}
"""Measured anew by every run, replays included."""

CHANGED_BODY = {"unbound", "prompt_tokens", "model_ms"}
"""What a request answered by its place in the run (its body changed) may change: the tools
bound (so the prompt's size) and the recorded answer's time at that place. Since issue 40's
`FEATURE_REVISION` 6, `dtdr` binds other tools at Seal-Tools' plan 6 (prompt tokens 721 where
the run had 684); the calls, and every figure scored from them, must still be the run's."""


RE_ASKED = {
    ("agent_bench_sealtools_qwen0.5b.json", "dtdr", 10),
    ("agent_bench_sealtools_qwen0.5b.json", "dtdr", 23),
}
"""Runs where HEAD's `hybrid` (issue 40's `FEATURE_REVISION` 6) binds other tools than the run
did at 042a21e, so the agent re-asks once more or once less (plan 10: 2 model calls where the
run had 1; plan 23: 2 where it had 3): only their call counts may differ; what they called,
and every figure scored from it, must be the run's."""

CALL_COUNTS = {"agent_calls", "model_calls"}


def _committed() -> list[Path]:
    return sorted(RESULTS.glob("agent_bench_*.json"))


def _argv(report: dict[str, Any], shared: Path) -> list[str]:
    """The command that wrote `report`, as arguments of `main` (paths under `shared`)."""
    argv = report["provenance"]["command"].split()[1:]
    path = argv.index("--path") + 1
    argv[path] = str(shared / Path(argv[path]).name)
    drop = {"--json", "--plans", "--step-cache", "--base-url", "--timeout", "--replay"}
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg in drop:
            skip = arg != "--replay" and i + 1 < len(argv)
            continue
        out.append(arg)
    return out


@pytest.mark.slow
@pytest.mark.timeout(1800)  # Seal-Tools: `dtdr` fits hybrid on 700 demonstrations, 4,076 tools
@pytest.mark.parametrize("name", [p.name for p in _committed()] or ["none"])
def test_the_committed_runs_replay_offline(
    name: str, shared_datasets: Path, tmp_path: Path
) -> None:
    if name == "none":
        pytest.skip("no committed agent-bench results")
    report = json.loads((RESULTS / name).read_text())
    cache = RESULTS / f"{name}.steps.jsonl"
    before = cache.read_bytes()
    out = tmp_path / "replay.json"
    argv = _argv(report, shared_datasets)
    sampled = "--test-sample" in argv  # a seeded draw: replayed whole (its first N differ)
    if not sampled:
        argv += ["--plans", str(PLANS)]
    argv += ["--replay", "--step-cache", str(cache), "--json", str(out), "-q"]
    assert main(argv) == 0
    assert cache.read_bytes() == before  # a replay writes nothing to the cache
    replayed = json.loads(out.read_text())
    changed = replayed["replayed_changed_requests"]
    ignore = NOT_REPLAYED | (CHANGED_BODY if changed else set())
    want = report["runs"] if sampled else [r for r in report["runs"] if r["plan"] < PLANS]
    assert len(replayed["runs"]) == len(want) > 0
    for got, run in zip(replayed["runs"], want, strict=True):
        # every figure the file records (a file written before a figure was added lacks it)
        skip = ignore | (
            CALL_COUNTS if (name, run["contestant"], run["plan"]) in RE_ASKED else set()
        )
        assert {k: got[k] for k in run if k not in skip} == {
            k: v for k, v in run.items() if k not in skip
        }, (got["contestant"], got["plan"])
        assert set(got) >= set(run)
