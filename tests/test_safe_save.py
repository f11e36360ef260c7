"""Saving never deletes what is not ours (issue "Reliability", item 1).

A save builds the folder beside the target and swaps it in; an existing folder is replaced
only when it is empty or holds a saved model and nothing else. `-o .` and `save(".")` never
replace the working folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dtdr_agents import DTDRC, load_retriever
from dtdr_agents.cli import main
from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.atomic import ForeignFolderError
from dtdr_agents.foundation.persistence import check_save_target
from dtdr_agents.planning import ClausePlanner
from dtdr_agents.retrievers.baselines import QTSRetriever
from dtdr_agents.retrievers.toolqp import ToolQPRetriever

DATA = make_demo_dataset(n=80, seed=5)


@pytest.fixture(scope="module")
def model() -> DTDRC:
    """A tiny fitted TF-IDF DTDR-C."""
    return DTDRC(encoder="tfidf", n_clusters=2).fit(list(DATA.demos), DATA.tools)


def _siblings(folder: Path) -> list[str]:
    """Names beside `folder` that a save may have left (temporary or old copies)."""
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith("."))


def test_foreign_file_is_refused_and_kept(model: DTDRC, tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(ForeignFolderError, match=r"out exists .*'notes\.txt'.*nothing was written"):
        model.save(target)
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]
    assert (target / "notes.txt").read_text() == "mine"
    assert _siblings(target) == []


def test_foreign_file_beside_an_earlier_model_is_refused(model: DTDRC, tmp_path: Path) -> None:
    target = model.save(tmp_path / "m")
    before = (target / "manifest.json").read_bytes()
    (target / "README").write_text("keep me")
    with pytest.raises(ForeignFolderError, match="'README'"):
        model.save(target)
    assert (target / "README").read_text() == "keep me"
    assert (target / "manifest.json").read_bytes() == before


def test_foreign_json_named_manifest_is_refused(model: DTDRC, tmp_path: Path) -> None:
    target = tmp_path / "cfg"
    target.mkdir()
    (target / "manifest.json").write_text(json.dumps({"name": "my app"}))
    with pytest.raises(ForeignFolderError, match="field 'format'"):
        model.save(target)
    assert json.loads((target / "manifest.json").read_text()) == {"name": "my app"}


def test_a_file_in_place_of_the_folder_is_refused(model: DTDRC, tmp_path: Path) -> None:
    target = tmp_path / "model"
    target.write_text("a file")
    with pytest.raises(ForeignFolderError, match="not a folder"):
        model.save(target)
    assert target.read_text() == "a file"


def test_saving_over_an_earlier_model_works(tmp_path: Path) -> None:
    first = DTDRC(encoder="tfidf", n_clusters=1).fit(list(DATA.demos), DATA.tools)
    second = DTDRC(encoder="tfidf", n_clusters=3).fit(list(DATA.demos), DATA.tools)
    target = first.save(tmp_path / "m")
    assert second.save(target) == target
    assert load_retriever(target).get_params()["n_clusters"] == 3
    assert _siblings(target) == []


def test_saving_over_a_composite_with_its_sub_folder_works(tmp_path: Path) -> None:
    def composite(k: int) -> ToolQPRetriever:
        base = QTSRetriever(encoder="tfidf")
        return ToolQPRetriever(base=base, planner=ClausePlanner(), feedback_k=k)

    target = composite(3).fit(list(DATA.demos), DATA.tools).save(tmp_path / "qp")
    assert (target / "base" / "manifest.json").is_file()
    composite(4).fit(list(DATA.demos), DATA.tools).save(target)
    loaded = load_retriever(target, params={"planner": ClausePlanner()})
    assert loaded.get_params()["feedback_k"] == 4
    # a foreign file inside the nested part's folder is not ours either
    (target / "base" / "extra.bin").write_bytes(b"x")
    with pytest.raises(ForeignFolderError, match=r"base/: it holds 'extra\.bin'"):
        composite(5).fit(list(DATA.demos), DATA.tools).save(target)
    assert (target / "base" / "extra.bin").read_bytes() == b"x"


def test_a_sub_folder_the_manifest_does_not_list_is_refused(model: DTDRC, tmp_path: Path) -> None:
    target = model.save(tmp_path / "m")
    (target / "base").mkdir()
    with pytest.raises(ForeignFolderError, match="'base'"):
        model.save(target)
    assert (target / "base").is_dir()


def test_an_empty_folder_is_filled(model: DTDRC, tmp_path: Path) -> None:
    target = tmp_path / "empty"
    target.mkdir()
    model.save(target)
    assert load_retriever(target).get_params()["n_clusters"] == 2


def test_the_working_folder_is_never_replaced(
    model: DTDRC, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(ForeignFolderError, match="current working folder"):
        model.save(".")  # even empty: replacing it would pull it from under the shell
    with pytest.raises(ForeignFolderError, match="current working folder"):
        model.save("..")
    assert list(work.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]


def test_check_save_target_refuses_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("1,2\n")
    with pytest.raises(ForeignFolderError, match=r"data\.csv"):
        check_save_target(tmp_path)
    assert check_save_target(tmp_path / "new") == tmp_path.resolve() / "new"


def test_cli_fit_dot_in_a_working_folder_with_files_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    demos = tmp_path / "demos.jsonl"
    demos.write_text("".join(json.dumps(d.to_dict()) + "\n" for d in DATA.demos))
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([t.to_openai() for t in DATA.tools]))
    (tmp_path / "notes.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    args = ["fit", "--dataset", "jsonl", "--path", "demos.jsonl", "--tools", "tools.json"]
    code = main([*args, "--retriever", "dtdr-c", "--encoder", "tfidf", "-o", "."])
    assert code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "current working folder" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demos.jsonl", "notes.txt", "tools.json"]
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_cli_fit_onto_a_foreign_folder_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demos = tmp_path / "demos.jsonl"
    demos.write_text("".join(json.dumps(d.to_dict()) + "\n" for d in DATA.demos))
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([t.to_openai() for t in DATA.tools]))
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    args = ["fit", "--dataset", "jsonl", "--path", str(demos), "--tools", str(tools)]
    code = main([*args, "--retriever", "dtdr-c", "--encoder", "tfidf", "-o", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert "keep.txt" in err
    assert "fitting" not in err  # refused before the fit, not after it
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_a_failed_save_keeps_the_previous_model(
    model: DTDRC, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dtdr_agents.foundation import atomic

    target = model.save(tmp_path / "m")
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    real_write = atomic._fsync_write
    calls = []

    def failing_write(path: Path, content: bytes) -> None:
        calls.append(path)
        if len(calls) == 2:  # the first file is written, the second fails
            raise OSError(28, "No space left on device")
        real_write(path, content)

    monkeypatch.setattr(atomic, "_fsync_write", failing_write)
    other = DTDRC(encoder="tfidf", n_clusters=3).fit(list(DATA.demos), DATA.tools)
    with pytest.raises(OSError, match="No space left"):
        other.save(target)
    monkeypatch.undo()
    assert len(calls) == 2
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temporary sibling
    assert load_retriever(target).get_params()["n_clusters"] == 2


def test_a_failed_first_save_leaves_nothing(
    model: DTDRC, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dtdr_agents.foundation import atomic

    def failing_write(path: Path, content: bytes) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(atomic, "_fsync_write", failing_write)
    with pytest.raises(OSError, match="Input/output"):
        model.save(tmp_path / "m")
    assert list(tmp_path.iterdir()) == []


def test_files_that_appear_during_a_save_are_kept(
    model: DTDRC, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dtdr_agents.foundation import atomic

    target = model.save(tmp_path / "m")
    real_swap = atomic._swap_dirs

    def swap_after_a_write(new: Path, old: Path) -> bool:
        (old / "late.txt").write_text("written by someone else meanwhile")
        return real_swap(new, old)

    monkeypatch.setattr(atomic, "_swap_dirs", swap_after_a_write)
    with pytest.warns(UserWarning, match="kept as"):
        model.save(target)
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("m.replaced-")]
    assert len(kept) == 1 and (kept[0] / "late.txt").is_file()
