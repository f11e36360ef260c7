"""Published figures come from docs/results: the generated blocks, and the docs of this repo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtdr_agents.cli import main
from dtdr_agents.evaluation.docsync import default_documents, loose_figures, sync

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def results(tmp_path_factory, encoder):
    folder = tmp_path_factory.mktemp("results")
    args = ["bench", "--dataset", "demo", "--limit", "120", "--retrievers", "dr,hybrid"]
    code = main([*args, "--seeds", "3", "--json", str(folder / "demo.json"), "-q"])
    assert code == 0
    return folder


def _doc(tmp_path: Path, spec: str = "table demo.json") -> Path:
    doc = tmp_path / "doc.md"
    doc.write_text(f"# Figures\n\n<!-- results: {spec} -->\nold\n<!-- /results -->\n\nEnd.\n")
    return doc


def _report(folder: Path, doc: Path, *flags: str) -> int:
    return main(["report", str(folder), "--docs", str(doc), *flags])


def test_write_then_check_then_a_hand_edit_fails(results, tmp_path, capsys):
    doc = _doc(tmp_path)
    assert _report(results, doc) == 1  # stale: "old" is not what the JSON gives
    assert _report(results, doc, "--write") == 0
    text = doc.read_text()
    report = json.loads((results / "demo.json").read_text())
    hybrid = report["results"]["hybrid"]
    assert f"| {hybrid['tool_mrr']:.3f} |" in text
    assert "hybrid beats dr" in text or "hybrid" in text.split("- ")[1]
    assert text.startswith("# Figures\n") and text.endswith("\nEnd.\n")
    capsys.readouterr()
    assert _report(results, doc, "--check") == 0
    edited = text.replace(f"| {hybrid['tool_mrr']:.3f} |", "| 0.999 |", 1)
    assert edited != text
    doc.write_text(edited)
    assert _report(results, doc, "--check") == 1
    assert "stale" in capsys.readouterr().out


def test_a_figure_typed_outside_a_block_is_reported(results, tmp_path, capsys):
    doc = _doc(tmp_path)
    assert _report(results, doc, "--write") == 0
    doc.write_text(doc.read_text() + "\nhybrid scores 0.912 here.\n")
    assert loose_figures(doc) == [(len(doc.read_text().splitlines()), "hybrid scores 0.912 here.")]
    assert _report(results, doc, "--check") == 1
    assert "a figure outside a generated block" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r["results"]["dr"].pop("tool_mrr"), "field results.dr.tool_mrr"),
        (lambda r: r.update(protocol="dtdr-eval/1"), "field protocol"),
        (lambda r: r["results"]["hybrid"].update(seeds=[0]), "field results.hybrid.seeds"),
        (lambda r: r.pop("provenance"), "field provenance"),
    ],
)
def test_a_bad_results_file_names_file_and_field_and_writes_nothing(
    results, tmp_path, capsys, change, message
):
    folder = tmp_path / "bad"
    folder.mkdir()
    report = json.loads((results / "demo.json").read_text())
    change(report)
    (folder / "demo.json").write_text(json.dumps(report))
    good = tmp_path / "good.md"
    good.write_text("<!-- results: table demo.json -->\nkeep\n<!-- /results -->\n")
    before = good.read_text()
    code = main(["report", str(folder), "--docs", str(good), "--write"])
    err = capsys.readouterr().err
    assert code == 2
    assert str(folder / "demo.json") in err and message in err and "nothing written" in err
    assert good.read_text() == before


def test_an_unknown_marker_is_an_error(results, tmp_path, capsys):
    doc = _doc(tmp_path, "pie demo.json")
    assert _report(results, doc, "--write") == 2
    assert f"{doc}:3: marker 'pie demo.json'" in capsys.readouterr().err


def test_the_repository_docs_match_docs_results():
    documents = default_documents(ROOT)
    assert ROOT / "README.md" in documents
    stale = sync(ROOT / "docs" / "results", documents, write=False)
    assert stale == [], "run `dtdr-agents report docs/results --write`"
    loose = {str(d.relative_to(ROOT)): loose_figures(d) for d in documents}
    assert {d: lines for d, lines in loose.items() if lines} == {}
