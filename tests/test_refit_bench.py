"""`dtdr-agents store refit-bench` at a small scale: phases, bounds, the generated table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtdr_agents.evaluation.docsync import ResultsError, render
from dtdr_agents.evaluation.refit_bench import fill_store, format_refit, refit_bench
from dtdr_agents.store import RunStore


def test_fill_store_writes_runs_in_recording_order(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    tools = fill_store(url, 30, seed=0, prefix="a")
    fill_store(url, 5, seed=1, prefix="b", offset=30)
    with RunStore(url) as store:
        ids = [r.id for r in store.iter_runs()]
        assert len(ids) == 35 and ids[-5:] == [f"b-{i:07d}" for i in range(30, 35)]
        newest = store.newest()
        assert newest is not None and newest[1] == "b-0000034" and store.count_after(newest) == 0
        demos, _ = store.recent_demonstrations(None, tools)
        assert len(demos) == 35


@pytest.mark.benchmark
def test_refit_bench_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dtdr_agents.cli import main

    out = tmp_path / "refit.json"
    args = ["store", "refit-bench", "--store-runs", "600", "--new-runs", "40", "--fit-runs"]
    args += ["40", "--max-runs", "80", "--retriever", "dtdr-c", "--encoder", "tfidf"]
    code = main([*args, "--json", str(out)])
    result = json.loads(out.read_text())
    phases = result["phases"]
    assert phases["fit"]["runs_fitted"] == 40 and phases["fit"]["runs_new"] is None
    assert phases["initial"]["runs_in_store"] == 600 and phases["initial"]["runs_read"] == 80
    assert phases["after_new"]["runs_new"] == 40 and phases["after_new"]["runs_read"] == 80
    assert all(p["peak_rss_mb"] > 0 and p["wall_s"] > 0 for p in phases.values())
    assert code == (0 if all(result["checks"].values()) else 1)
    assert result["provenance"]["command"].startswith("dtdr-agents store refit-bench")
    table = format_refit(result)
    assert "| refit after 40 new runs | 640 | 80 | 80 | 40 |" in table
    assert table == capsys.readouterr().out.strip()
    body = render("refit refit.json", tmp_path, where="doc.md:1")
    assert body.startswith(table) and "`refit.json`: `dtdr-agents store refit-bench" in body


def test_a_refit_block_names_a_bad_file(tmp_path: Path) -> None:
    (tmp_path / "refit.json").write_text(json.dumps({"kind": "refit-bench"}))
    with pytest.raises(ResultsError, match=r"refit\.json"):
        render("refit refit.json", tmp_path, where="doc.md:1")


def test_refit_bench_in_process_smoke(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="limit"):
        refit_bench(store_runs=10, new_runs=1, fit_runs=5, max_runs=0, workdir=tmp_path)
