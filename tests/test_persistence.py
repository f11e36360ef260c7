"""Saving and loading: atomic folders, clear errors for corrupt or mismatched models."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from dtdr_agents import DTDRC, DTDRL, ModelLoadError, Tool, Toolset
from dtdr_agents.retrievers import load_retriever


@pytest.fixture(scope="module")
def saved(tmp_path_factory, encoder, demo_data, demo_split):
    model = DTDRC(encoder=encoder).fit(demo_split[0], demo_data.tools)
    path = model.save(tmp_path_factory.mktemp("m") / "dtdr-c")
    return model, path


def _copy(path, tmp_path):
    import shutil

    dst = tmp_path / "copy"
    shutil.copytree(path, dst)
    return dst


def test_manifest_records_version_encoder_and_catalogue(saved):
    model, path = saved
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["package_version"]
    assert manifest["encoder"]["id"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert manifest["catalogue_hash"] == model.fit_tools_.catalogue_hash
    assert manifest["class"] == "DTDRC"


def test_corrupt_manifest_names_the_file(saved, tmp_path):
    path = _copy(saved[1], tmp_path)
    (path / "manifest.json").write_text("{ not json")
    with pytest.raises(ModelLoadError, match=r"manifest\.json: not valid JSON"):
        load_retriever(path)


def test_missing_or_corrupt_arrays(saved, tmp_path):
    path = _copy(saved[1], tmp_path)
    (path / "arrays.safetensors").write_bytes(b"garbage")
    with pytest.raises(ModelLoadError, match=r"arrays\.safetensors: corrupt"):
        load_retriever(path)
    (path / "arrays.safetensors").unlink()
    with pytest.raises(ModelLoadError, match=r"arrays\.safetensors: missing"):
        load_retriever(path)


def test_edited_catalogue_is_detected(saved, tmp_path):
    path = _copy(saved[1], tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["tools"][0]["description"] = "something else"
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelLoadError, match="catalogue_hash"):
        load_retriever(path)


def test_wrong_format_version(saved, tmp_path):
    path = _copy(saved[1], tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["format_version"] = 99
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelLoadError, match="format_version"):
        load_retriever(path)


def test_not_a_model_folder(tmp_path):
    with pytest.raises(ModelLoadError, match="no such model folder"):
        load_retriever(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="missing"):
        load_retriever(tmp_path / "empty")


def test_other_catalogue_is_refused_unless_allowed(saved, demo_data):
    _, path = saved
    other = Toolset([*demo_data.tools, Tool("book_flight", "Book a flight")])
    with pytest.raises(ModelLoadError, match="another tool catalogue"):
        load_retriever(path, tools=other)
    model = load_retriever(path, tools=other, allow_catalogue_change=True)
    assert "book_flight" in model.rank("book a flight to Rome").names
    same = load_retriever(path, tools=list(reversed(list(demo_data.tools))))
    assert same.tools_.names[0] == demo_data.tools.names[-1]


def test_other_encoder_is_refused_unless_allowed(saved):
    _, path = saved
    with pytest.raises(ModelLoadError, match="fitted with encoder"):
        load_retriever(path, encoder="tfidf")


def test_tfidf_encoder_travels_with_the_model(tmp_path, demo_data, demo_split):
    model = DTDRL(encoder="tfidf", history="structured").fit(demo_split[0], demo_data.tools)
    loaded = load_retriever(model.save(tmp_path / "m"))
    for q in ("Email Anna the report", "Text Bob I am late"):
        np.testing.assert_allclose(
            model.rank(q).probabilities, loaded.rank(q).probabilities, atol=1e-6
        )
    assert loaded.encoder_.id == model.encoder_.id


def test_save_is_atomic_when_writing_fails(saved, tmp_path, monkeypatch):
    model, _ = saved
    target = model.save(tmp_path / "model")
    before = (target / "manifest.json").read_bytes()
    real_replace = os.replace

    def failing_replace(src, dst):
        if str(dst) == str(target):
            raise OSError("disk full")
        return real_replace(src, dst)

    from dtdr_agents.foundation import atomic

    monkeypatch.setattr(atomic, "_swap_dirs", lambda new, target: False)  # the 2-rename path
    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        model.save(target)
    monkeypatch.undo()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    # the previous model is intact or restorable: the complete old folder still exists somewhere
    survivors = [p for p in tmp_path.iterdir() if (p / "manifest.json").exists()]
    assert any((p / "manifest.json").read_bytes() == before for p in survivors)


def test_saved_folder_holds_no_pickle(saved):
    _, path = saved
    for file in path.iterdir():
        assert file.suffix in (".json", ".safetensors")
        assert b"\x80\x04\x95" not in file.read_bytes()[:64]  # pickle protocol 4 header


def test_a_folder_read_once_loads_as_the_folder_does(saved, encoder):
    """`load_retriever` takes a `read_model` result: a caller that checked it reads it once."""
    from dtdr_agents.foundation.persistence import read_model

    _, path = saved
    from_folder = load_retriever(path, encoder=encoder)
    from_read = load_retriever(read_model(path), encoder=encoder)
    for q in ("Email Anna the report", "Text Bob I am late"):
        np.testing.assert_allclose(
            from_read.rank(q).probabilities, from_folder.rank(q).probabilities, atol=1e-12
        )
