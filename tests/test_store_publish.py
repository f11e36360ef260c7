"""Publishing fitted models behind an atomic `latest` pointer, rollback and hot reload."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.selection import SelectionPolicy
from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.retrievers import load_retriever, make_retriever
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.store import PublishError, Reloader, ReloadWarning, publish, rollback, versions
from dtdr_agents.store.publishing import POINTER, current


@pytest.fixture(scope="module")
def fitted() -> list[ToolRetriever]:
    """Three models that rank differently: a refit moves what the agent is shown."""
    data = make_demo_dataset(n=60, seed=0)
    models = [
        make_retriever("bm25").fit(data.demos, data.tools),
        make_retriever("dtdr-c", encoder="tfidf", seed=0).fit(data.demos[:30], data.tools),
        make_retriever("dtdr-c", encoder="tfidf", seed=1, order=1).fit(data.demos, data.tools),
    ]
    assert _names(models[0]) != _names(models[1])
    return models


def _served(tmp_path: Path, model: ToolRetriever) -> tuple[Path, Reloader[ToolRetriever]]:
    """`model` published as v000001, and a Reloader on it that only reloads when asked."""
    root = tmp_path / "pub"
    publish(root, model.save, check=load_retriever)
    return root, Reloader(root, load_retriever, poll_interval=None)


def _names(model: ToolRetriever) -> list[str]:
    return model.rank("find Sam's email and write to him", ["get_email_address"]).ranked_names()[:5]


def test_publish_moves_latest_and_reloader_takes_it_between_steps(
    tmp_path: Path, fitted: list[ToolRetriever]
) -> None:
    root = tmp_path / "pub"
    v1 = publish(root, fitted[0].save, check=load_retriever, note="runs: 20")
    now = [0.0]
    reloader = Reloader(root, load_retriever, poll_interval=10.0, clock=lambda: now[0])
    assert reloader.version == v1 and _names(reloader.current()) == _names(fitted[0])
    v2 = publish(root, fitted[1].save, check=load_retriever)
    assert (v1.number, v2.number) == (1, 2) and v1.content_hash != v2.content_hash
    assert os.readlink(root / POINTER) == "versions/v000002"
    now[0] = 5.0
    assert reloader.current() is not None and reloader.version == v1  # not polled yet
    now[0] = 10.0
    assert reloader.current() is not None and reloader.version == v1  # v2 loads in background
    assert reloader.wait(timeout=60)
    model = reloader.current()  # the next step takes it up
    assert reloader.version == v2 and _names(model) == _names(fitted[1])
    assert load_retriever(root / POINTER).get_params() == fitted[1].get_params()
    assert rollback(root) == v1 and current(root) == v1
    assert reloader.reload() and reloader.version == v1
    assert [v.name for v in versions(root)] == ["v000001", "v000002"]
    assert rollback(root, "v000002") == v2
    with pytest.raises(PublishError, match="no kept version 'v000009'"):
        rollback(root, "v000009")


def test_a_corrupt_publish_is_refused_and_the_running_version_keeps_serving(
    tmp_path: Path, fitted: list[ToolRetriever]
) -> None:
    root = tmp_path / "pub"
    publish(root, fitted[0].save, check=load_retriever)
    reloader = Reloader(root, load_retriever, poll_interval=None)

    def corrupt(folder: Path) -> None:
        fitted[1].save(folder)
        (folder / "manifest.json").write_text('{"format": "dtdr-agents/retriever"')

    with pytest.raises(PublishError, match="v000002 was refused: loading it failed"):
        publish(root, corrupt, check=load_retriever)
    assert not (root / "versions" / "v000002").exists()
    assert current(root) is not None and current(root).name == "v000001"  # type: ignore[union-attr]
    publish(root, corrupt)  # no check: the pointer moves to a version that does not load
    with pytest.warns(ReloadWarning, match="v000002 does not load.*keeping v000001"):
        assert not reloader.reload()
    assert reloader.version.name == "v000001" and "v000002" in reloader.refused
    assert _names(reloader.current()) == _names(fitted[0])
    assert not reloader.reload()  # a refused version is not tried again


def test_keep_prunes_old_versions_and_foreign_folders_are_refused(
    tmp_path: Path, fitted: list[ToolRetriever]
) -> None:
    root = tmp_path / "pub"
    for model in [*fitted, fitted[0]]:
        publish(root, model.save, keep=2)
    assert [v.name for v in versions(root)] == ["v000003", "v000004"]
    assert sorted(p.name for p in (root / "versions").iterdir()) == [
        "v000003",
        "v000003.json",
        "v000004",
        "v000004.json",
    ]
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(PublishError, match="not a publish folder"):
        publish(foreign, fitted[0].save)
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    with pytest.raises(PublishError, match="nothing was published here"):
        Reloader(tmp_path / "empty", load_retriever)
    with pytest.raises(PublishError, match="keep must be at least 1"):
        publish(root, fitted[0].save, keep=0)


def _store_of(tmp_path: Path, demos: list[Demonstration], tools: Toolset) -> tuple[Path, str]:
    """A tools file and an SQLite run store holding `demos` (as successful runs)."""
    import json

    from dtdr_agents.store import RunRecord, RunStore

    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps([t.to_dict() for t in tools]))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(db) as store:
        store.add_many(RunRecord.from_demonstration(d) for d in demos)
    return tools_file, db


def test_refit_publishes_from_the_store_and_rollback_moves_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dtdr_agents.cli import main
    from dtdr_agents.store import RunRecord, RunStore

    data = make_demo_dataset(n=40, seed=3)
    tools_file, db = _store_of(tmp_path, list(data.demos[:20]), data.tools)
    pub = tmp_path / "pub"
    common = ["--store", db, "--publish", str(pub), "--retriever", "dtdr-c", "--encoder", "tfidf"]
    assert main(["refit", *common]) == 2  # nothing published yet and no --tools
    assert "give the catalogue with --tools" in capsys.readouterr().err
    assert main(["refit", *common, "--tools", str(tools_file)]) == 0
    assert "published v000001" in capsys.readouterr().out
    with RunStore(db) as store:
        store.add_many(RunRecord.from_demonstration(d) for d in data.demos[20:])
    assert main(["refit", *common]) == 0  # the catalogue of the published version
    out = capsys.readouterr().out
    assert "published v000002" in out and "on 40 runs" in out
    assert len(load_retriever(pub / POINTER).tools_) == len(data.tools)
    assert main(["rollback", "--publish", str(pub)]) == 0
    assert "-> v000001" in capsys.readouterr().out
    assert current(pub) is not None and current(pub).name == "v000001"  # type: ignore[union-attr]


def test_fit_reads_the_store_as_it_reads_a_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dtdr_agents.cli import main
    from dtdr_agents.store import RunRecord, RunStore

    data = make_demo_dataset(n=30, seed=4)
    tools_file, db = _store_of(tmp_path, list(data.demos[:20]), data.tools)
    with RunStore(db) as store:
        store.add(RunRecord.from_demonstration(data.demos[20], outcome="failure"))
    common = ["fit", "--dataset", "store", "--path", db, "--retriever", "dtdr-c"]
    assert main([*common, "-o", str(tmp_path / "m0")]) == 2  # no catalogue
    assert "needs --path URL" in capsys.readouterr().err and not (tmp_path / "m0").exists()
    assert (
        main([*common, "--tools", str(tools_file), "--encoder", "tfidf", "-o", str(tmp_path / "m")])
        == 0
    )
    assert "on 20 demonstrations" in capsys.readouterr().err  # the failed run is left out
    from_store = load_retriever(tmp_path / "m")
    direct = make_retriever("dtdr-c", encoder="tfidf").fit(data.demos[:20], data.tools)
    for demo in data.demos[21:]:
        assert from_store.rank(demo.query).names[:5] == direct.rank(demo.query).names[:5]


def test_a_step_selector_takes_up_a_new_version_between_steps_only(
    tmp_path: Path, fitted: list[ToolRetriever]
) -> None:
    from dtdr_agents.runtime import StepSelector
    from dtdr_agents.runtime.checks import fitted_tools

    root, models = _served(tmp_path, fitted[1])
    tools = fitted_tools(fitted[1])
    selector = StepSelector(tools, models, policy=SelectionPolicy(k=3, threshold=None))
    query, history = "find Sam's email and write to him", ["get_email_address"]
    first = selector.select(query, history)
    assert list(first.selection.names) == _names(fitted[1])[:3]
    publish(root, fitted[2].save, check=load_retriever)
    assert models.reload()
    wide = selector.select(query, history, previous=first, wide=True)
    assert selector.retriever is not models.current()  # a wider re-selection keeps its version
    assert wide.selection.names[:3] == first.selection.names
    nxt = selector.select(query, history)  # the next step takes up the new version
    assert selector.retriever is models.current()
    assert list(nxt.selection.names) == _names(fitted[2])[:3]


def test_a_version_with_another_catalogue_is_refused_by_the_agent(
    tmp_path: Path, fitted: list[ToolRetriever]
) -> None:
    from dtdr_agents.datasets.synthetic import DEMO_TOOLS
    from dtdr_agents.foundation.types import Toolset
    from dtdr_agents.runtime import StepSelector

    root, models = _served(tmp_path, fitted[1])
    selector = StepSelector(Toolset(DEMO_TOOLS), models)
    data = make_demo_dataset(n=30, seed=1)
    smaller = Toolset(list(data.tools)[:10])
    other = make_retriever("bm25").fit([], smaller)
    publish(root, other.save, check=load_retriever)
    assert models.reload() and models.version.name == "v000002"
    with pytest.warns(ReloadWarning, match="v000002 is not taken up.*keeps serving"):
        step = selector.select("find Sam's email and write to him", ["get_email_address"])
    assert step.selection.names and models.version.name == "v000001"
    assert "v000002" in models.refused and not models.reload()


def test_the_stacks_pass_a_reloader_through(tmp_path: Path, fitted: list[ToolRetriever]) -> None:
    """The LangChain middleware and the LangGraph selector keep a Reloader as it is."""
    pytest.importorskip("langchain")
    from langchain_core.tools import tool

    from langchain_dtdr import DTDRMiddleware, ToolSelector

    root, models = _served(tmp_path, fitted[1])
    lc_tools = [
        tool(name, description=t.description)(lambda **_: "ok")
        for name, t in ((t.name, t) for t in fitted[1].tools_)
    ]
    middleware = DTDRMiddleware(models, tools=lc_tools)
    assert middleware.retriever is models
    selector = ToolSelector(lc_tools, models)
    assert selector.reloader is models
    publish(root, fitted[2].save, check=load_retriever)
    models.reload()
    step = selector.select("find Sam's email and write to him", ["get_email_address"])
    assert selector.retriever is models.current() and step.selection.names
