"""The command line: demo, fit, rank and their errors."""

from __future__ import annotations

import json

from dtdr_agents.cli import main
from dtdr_agents.datasets.synthetic import make_demo_dataset


def test_demo_prints_a_table_and_writes_json(tmp_path, capsys, encoder):
    out = tmp_path / "demo.json"
    code = main(
        [
            *("demo", "--n", "300", "--json", str(out), "-q"),
            *("--retrievers", "dr,lr,dtdr-c", "--seeds", "2"),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "retriever" in printed and "dtdr-c" in printed
    report = json.loads(out.read_text())
    assert report["dataset"] == "demo"
    assert report["n_train"] + report["n_test"] == 300
    assert report["encoder"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert set(report["results"]) == {"dr", "lr", "dtdr-c"}
    assert not report["same_requests"]  # the demo draws its split with each seed
    for rid, entry in report["results"].items():
        assert {"tool_mrr", "tool_top1", "stop_f1", "paper_mrr", "ms_per_step"} <= set(entry)
        assert entry["seeds"] == [0, 1] and len(entry["per_seed"]["tool_mrr"]) == 2
        assert 0.0 <= entry["tool_mrr"] <= 1.0
        assert entry["stop_rule"] == ("shared" if rid == "lr" else "own")
    assert [c["b"] for c in report["comparisons"]] == []  # no hybrid in this run


def test_demo_shows_hybrid_with_no_demonstrations_on_the_same_requests(tmp_path, capsys):
    out = tmp_path / "demo.json"
    args = ["demo", "--n", "200", "--json", str(out), "-q", "--retrievers", "hybrid"]
    assert main([*args, "--encoder", "tfidf", "--seeds", "1"]) == 0
    assert "hybrid-0demos: hybrid fitted on the tools alone" in capsys.readouterr().out
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"hybrid", "hybrid-0demos"}
    assert results["hybrid-0demos"]["n_queries"] == results["hybrid"]["n_queries"] == 60
    assert results["hybrid-0demos"]["tool_mrr"] < results["hybrid"]["tool_mrr"]


def _write_jsonl_dataset(tmp_path, n=120):
    data = make_demo_dataset(n=n, seed=1)
    demos = tmp_path / "demos.jsonl"
    demos.write_text("".join(json.dumps(d.to_dict()) + "\n" for d in data.demos))
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([t.to_openai() for t in data.tools]))
    return demos, tools


def test_fit_then_rank_from_the_command_line(tmp_path, capsys, encoder):
    demos, tools = _write_jsonl_dataset(tmp_path)
    model = tmp_path / "model"
    code = main(
        [
            "fit",
            "--dataset",
            "jsonl",
            "--path",
            str(demos),
            "--tools",
            str(tools),
            "--retriever",
            "dtdr-c",
            "-o",
            str(model),
        ]
    )
    assert code == 0
    assert (model / "manifest.json").is_file()
    capsys.readouterr()
    code = main(
        [
            "rank",
            "--model",
            str(model),
            "--query",
            "Summarize q3.pdf and email it to Dana",
            "--history",
            "open_file,summarize_pdf",
            "-k",
            "3",
            "--json",
        ]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["history"] == ["open_file", "summarize_pdf"]
    assert len(result["ranking"]) == 3
    assert result["ranking"][0]["rank"] == 1
    assert result["explanation"]["key"] == ["start", "open_file", "summarize_pdf"]


def test_bad_jsonl_line_is_reported_with_file_and_line(tmp_path, capsys):
    demos, tools = _write_jsonl_dataset(tmp_path, n=5)
    lines = demos.read_text().splitlines()
    lines[2] = '{"query": "broken", "calls": ['
    demos.write_text("\n".join(lines) + "\n")
    code = main(
        [
            "fit",
            "--dataset",
            "jsonl",
            "--path",
            str(demos),
            "--tools",
            str(tools),
            "-o",
            str(tmp_path / "m"),
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert f"{demos}:3" in err
    assert not (tmp_path / "m").exists()


def test_unknown_history_tool_is_a_clear_cli_error(tmp_path, capsys, encoder):
    demos, tools = _write_jsonl_dataset(tmp_path, n=60)
    model = tmp_path / "model"
    assert (
        main(
            [
                "fit",
                "--dataset",
                "jsonl",
                "--path",
                str(demos),
                "--tools",
                str(tools),
                "--retriever",
                "dr",
                "-o",
                str(model),
            ]
        )
        == 0
    )
    code = main(["rank", "--model", str(model), "--query", "email Bo", "--history", "teleport"])
    assert code == 2
    assert "teleport" in capsys.readouterr().err


def test_skip_bad_counts_the_skipped_lines(tmp_path, capsys, encoder):
    demos, tools = _write_jsonl_dataset(tmp_path, n=40)
    lines = demos.read_text().splitlines()
    lines[2] = '{"query": "broken", "calls": ['
    lines[7] = "not json at all"
    demos.write_text("\n".join(lines) + "\n")
    args = ["fit", "--dataset", "jsonl", "--path", str(demos), "--tools", str(tools)]
    code = main([*args, "--retriever", "dr", "--skip-bad", "-o", str(tmp_path / "m")])
    assert code == 0
    assert "skipped 2" in capsys.readouterr().err
