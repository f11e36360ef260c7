"""`dtdr-agents bench` and `stats` end to end (small data)."""

from __future__ import annotations

import json

import pytest

from dtdr_agents.cli import main


def test_bench_on_demo_data_writes_report_and_plot(tmp_path, capsys, encoder):
    out, plot = tmp_path / "bench.json", tmp_path / "bench.png"
    code = main(
        [
            "bench",
            "--dataset",
            "demo",
            "--limit",
            "300",
            "--retrievers",
            "dr,dtdr-c,lim",
            "--json",
            str(out),
            "--plot",
            str(plot),
            "--cache-dir",
            str(tmp_path / "cache"),
            "-q",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "recall@5" in printed and "skipped lim" in printed
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"dr", "dtdr-c"}
    assert "lim" in report["skipped"]
    entry = report["results"]["dtdr-c"]
    for key in (
        "tool_mrr",
        "tool_top1",
        "tool_f1",
        "tool_recall@5",
        "tool_ndcg@10",
        "stop_f1",
        "end_first_at_tool_steps",
        "paper_mrr",
        "ms_per_step",
        "fit_s",
    ):
        assert isinstance(entry[key], float), key
    lo, hi = entry["tool_mrr_ci"]
    assert lo <= entry["tool_mrr"] <= hi
    assert entry["seeds"] == [0]
    assert report["protocol"] == "dtdr-eval/2"
    assert report["provenance"]["seeds"] == [0] and report["provenance"]["cpu_count"]
    assert report["provenance"]["command"].startswith("dtdr-agents bench --dataset demo")
    assert entry["by_plan_length"] and entry["by_step"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "cache" / "embeddings.sqlite").is_file()


@pytest.mark.datasets
def test_bench_on_taskbench_subset(shared_datasets, tmp_path, capsys, encoder):
    out = tmp_path / "tb.json"
    code = main(
        [
            "bench",
            "--dataset",
            "taskbench",
            "--path",
            str(shared_datasets / "taskbench_hf_subset"),
            "--retrievers",
            "dr,dtdr-c",
            "--json",
            str(out),
            "--no-cache",
            "-q",
        ]
    )
    assert code == 0
    report = json.loads(out.read_text())
    assert report["n_train"] + report["n_test"] == 891
    assert report["results"]["dtdr-c"]["tool_mrr"] > report["results"]["dr"]["tool_mrr"]


@pytest.mark.datasets
def test_stats_prints_table5_columns(shared_datasets, capsys):
    assert main(["stats", "--dataset", "nestful", "--path", str(shared_datasets / "nestful")]) == 0
    printed = capsys.readouterr().out
    assert "# Tool dependencies per plan" in printed
    assert "skipped" in printed


def test_set_valued_scoring_ranks_tools_only(encoder):
    from dtdr_agents import Demonstration, StaticLR, Tool
    from dtdr_agents.evaluation.protocol import evaluate

    tools = [Tool("a", "alpha tool"), Tool("b", "beta tool"), Tool("c", "gamma tool")]
    demos = [Demonstration(f"use alpha and beta {i}", ("a", "b"), edges=()) for i in range(20)]
    model = StaticLR(encoder=encoder).fit(demos, tools)
    result = evaluate(model, demos[:5], set_valued=True)
    assert result.n_steps == 5  # one step per query, no end-of-plan step
    assert result.metrics["top1"] == 1.0  # end-of-plan (a training target of LR) is not ranked


def test_prefix_scoring_equals_full_list_scoring(encoder, demo_data, demo_split):
    from dtdr_agents import DTDRC
    from dtdr_agents.evaluation.metrics import step_metrics
    from dtdr_agents.evaluation.protocol import _Prefixer

    model = DTDRC(encoder=encoder).fit(demo_split[0], demo_data.tools)
    prefixer = _Prefixer(10)
    for demo in demo_split[1][:30]:
        for step in demo.steps():
            ranking = model.rank(demo.query, step.history)
            full = step_metrics(ranking.ranked_names(), step.acceptable)
            assert step_metrics(prefixer(ranking, step.acceptable, False), step.acceptable) == full


def test_a_failing_retriever_keeps_its_results_so_far(encoder, demo_data, demo_split):
    from dtdr_agents import StaticDR
    from dtdr_agents.evaluation.protocol import evaluate

    class Flaky(StaticDR):
        def _score(self, query, history):
            if query == demo_split[1][5].query:
                raise RuntimeError("backend down")
            return super()._score(query, history)

    model = Flaky(encoder=encoder).fit(demo_split[0], demo_data.tools)
    result = evaluate(model, demo_split[1][:10])
    assert result.error and "backend down" in result.error
    assert result.n_queries == 5 and result.n_steps > 0
    assert 0.0 <= result.metrics["mrr"] <= 1.0


def test_learning_curve_rows_and_plot(encoder, demo_data):
    import dataclasses

    import matplotlib.pyplot as plt

    from dtdr_agents.evaluation.bench import run_ablations
    from dtdr_agents.evaluation.plots import report_figure

    demos = list(demo_data.demos)
    train = dataclasses.replace(demo_data, demos=demos[:40])
    test = dataclasses.replace(demo_data, demos=demos[300:330])
    out = run_ablations(train, test, encoder=encoder, seed=0, which=("n_demos",))
    assert list(out) == ["n_demos"]
    rows = out["n_demos"]
    assert list(rows) == [0, 1, 2, 5, 10, 20, 40]  # up to the training split, then all
    assert set(rows[0]) == {"hybrid"}  # only hybrid fits on zero demonstrations
    for size in (1, 2, 5, 10, 20, 40):
        assert set(rows[size]) == {"hybrid", "bm25", "qts", "dtdr-c", "dtdr-l-s"}
    mrr = {
        size: {rid: r.tool_metrics["tool_mrr"] for rid, r in row.items()}
        for size, row in rows.items()
    }
    assert all(0.0 < v <= 1.0 for row in mrr.values() for v in row.values())
    # demonstrations help the learned retrievers on this data
    assert mrr[40]["dtdr-l-s"] > mrr[10]["dtdr-l-s"]
    assert mrr[40]["hybrid"] > mrr[0]["hybrid"]
    # and never make hybrid worse (issue 40): no point below the 0 point, no more early stops
    end_first = {
        size: row["hybrid"].summary()["end_first_at_tool_steps"] for size, row in rows.items()
    }
    assert all(mrr[size]["hybrid"] >= mrr[0]["hybrid"] - 0.01 for size in rows)
    assert all(end_first[size] <= end_first[0] + 0.02 for size in rows)
    with pytest.raises(ValueError, match="ablations must be among"):
        run_ablations(train, test, encoder=encoder, seed=0, which=("bogus",))

    from dtdr_agents.evaluation.report import aggregate_ablations

    curve = aggregate_ablations([out], same_requests=True)
    assert curve["n_demos"]["40"]["hybrid"]["tool_mrr"] == pytest.approx(mrr[40]["hybrid"])
    report = {"dataset": "demo", "results": {}, "ablations": curve}
    fig = report_figure(report)
    try:
        curve = fig.axes[1]
        assert curve.get_xscale() == "symlog"
        xs = {float(x) for line in curve.get_lines() for x in line.get_xdata()}
        assert 0.0 in xs and curve.get_xlim()[0] <= 0.0  # the zero-demonstration point shows
    finally:
        plt.close(fig)


def test_unknown_ablation_is_a_cli_error(capsys):
    code = main(["bench", "--dataset", "demo", "--ablations", "n_demos,depth", "-q"])
    assert code == 2
    assert "--ablations: unknown depth" in capsys.readouterr().err
