"""The loader's files: types checked before opening, size caps, no NaN (issue "Reliability").

Models here are edited and then "resealed": every hash is recomputed, as an attacker or a
careless script would, so only the value checks stand between the edit and the agent.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dtdr_agents import DTDRC, ModelLoadError, load_retriever
from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.persistence import manifest_digest, tool_order_digest
from dtdr_agents.retrievers.baselines import QTSRetriever

DATA = make_demo_dataset(n=80, seed=6)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved tiny TF-IDF DTDR-C."""
    model = DTDRC(encoder="tfidf", n_clusters=2).fit(list(DATA.demos), DATA.tools)
    return model.save(tmp_path_factory.mktemp("model") / "m")


@pytest.fixture
def copy(folder: Path, tmp_path: Path) -> Path:
    """A private copy of the saved model."""
    return Path(shutil.copytree(folder, tmp_path / "m"))


def reseal(
    path: Path,
    edit_manifest: Callable[[dict[str, Any]], None] | None = None,
    edit_arrays: Callable[[dict[str, np.ndarray]], None] | None = None,
) -> None:
    """Edit a saved (top-level) model in place and recompute every hash it carries."""
    from safetensors.numpy import load, save

    manifest = json.loads((path / "manifest.json").read_text())
    arrays = {k: v.copy() for k, v in load((path / "arrays.safetensors").read_bytes()).items()}
    if edit_manifest is not None:
        edit_manifest(manifest)
    if edit_arrays is not None:
        edit_arrays(arrays)
    data = save(arrays, metadata={"tools_sha256": tool_order_digest(manifest)})
    manifest["integrity"]["arrays_sha256"] = hashlib.sha256(data).hexdigest()
    manifest["integrity"]["manifest_sha256"] = manifest_digest(manifest)
    (path / "arrays.safetensors").write_bytes(data)
    (path / "manifest.json").write_text(json.dumps(manifest))  # allows NaN, as json does


def test_reseal_alone_keeps_the_model_loadable(copy: Path) -> None:
    reseal(copy)
    assert load_retriever(copy).rank("Email Anna the report").names


@pytest.mark.parametrize("name", ["manifest.json", "arrays.safetensors"])
def test_a_named_pipe_in_place_of_a_file_is_refused_without_waiting(copy: Path, name: str) -> None:
    (copy / name).unlink()
    os.mkfifo(copy / name)
    with pytest.raises(ModelLoadError, match=rf"{name}: is a named pipe \(FIFO\), not a regular"):
        load_retriever(copy)


@pytest.mark.parametrize("name", ["manifest.json", "arrays.safetensors"])
def test_a_folder_in_place_of_a_file_is_refused(copy: Path, name: str) -> None:
    (copy / name).unlink()
    (copy / name).mkdir()
    with pytest.raises(ModelLoadError, match=rf"{name}: is a folder, not a regular file"):
        load_retriever(copy)


def test_a_symbolic_link_in_place_of_a_file_is_refused(copy: Path, folder: Path) -> None:
    (copy / "arrays.safetensors").unlink()
    os.symlink(folder / "arrays.safetensors", copy / "arrays.safetensors")
    with pytest.raises(ModelLoadError, match="is a symbolic link"):
        load_retriever(copy)


def test_the_model_path_itself_as_a_pipe_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(ModelLoadError, match="not a folder"):
        load_retriever(tmp_path / "pipe")


def test_arrays_larger_than_the_cap_are_refused(
    copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dtdr_agents.foundation import persistence

    size = (copy / "arrays.safetensors").stat().st_size
    monkeypatch.setattr(persistence, "MAX_ARRAYS_BYTES", size - 1)
    with pytest.raises(ModelLoadError, match=rf"arrays\.safetensors: {size} bytes, .*MAX_ARRAYS"):
        load_retriever(copy)
    monkeypatch.setattr(persistence, "MAX_ARRAYS_BYTES", size)
    assert load_retriever(copy).rank("Email Anna the report").names


def test_a_manifest_larger_than_the_cap_is_refused(
    copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dtdr_agents.foundation import persistence

    monkeypatch.setattr(persistence, "MAX_MANIFEST_BYTES", 1000)
    with pytest.raises(ModelLoadError, match=r"manifest\.json: \d+ bytes, .*MAX_MANIFEST_BYTES"):
        load_retriever(copy)


def test_the_caps_are_documented() -> None:
    from dtdr_agents.foundation import persistence

    doc = (Path(__file__).parents[1] / "docs" / "integrity.md").read_text()
    assert persistence.MAX_ARRAYS_BYTES == 4 * 2**30 and "4 GiB" in doc
    assert persistence.MAX_MANIFEST_BYTES == 64 * 2**20 and "64 MiB" in doc


@pytest.mark.parametrize(
    "array", ["model/centroids", "tool_embeddings", "encoder/idf", "model/markov_counts"]
)
def test_resealed_nan_arrays_are_refused_naming_the_file_and_array(copy: Path, array: str) -> None:
    def poison(arrays: dict[str, np.ndarray]) -> None:
        arrays[array] = arrays[array].astype(np.float64)
        arrays[array].flat[0] = np.nan

    def respec(manifest: dict[str, Any]) -> None:
        manifest["arrays"][array]["dtype"] = "<f8"

    reseal(copy, respec, poison)
    with pytest.raises(ModelLoadError, match=rf"arrays\.safetensors: array '{array}' holds NaN"):
        load_retriever(copy)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_resealed_nan_parameters_are_refused_naming_the_file(copy: Path, value: float) -> None:
    def poison(manifest: dict[str, Any]) -> None:
        manifest["params"]["prior_weight"] = value

    reseal(copy, poison)
    with pytest.raises(ModelLoadError, match=r"manifest\.json: holds a NaN or infinite number"):
        load_retriever(copy)


def test_a_number_too_large_for_a_float_is_refused(copy: Path) -> None:
    text = (copy / "manifest.json").read_text()
    manifest = json.loads(text)
    manifest["params"]["prior_weight"] = 12345.5
    manifest["integrity"]["manifest_sha256"] = manifest_digest(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest).replace("12345.5", "1e999"))
    with pytest.raises(ModelLoadError, match=r"manifest\.json: holds a NaN or infinite number"):
        load_retriever(copy)


def test_a_nan_temperature_never_reaches_the_agent(tmp_path: Path) -> None:
    """A resealed finite-but-wrong parameter is refused by the parameter checks at load."""
    path = QTSRetriever(encoder="tfidf").fit(list(DATA.demos), DATA.tools).save(tmp_path / "q")

    def negative(manifest: dict[str, Any]) -> None:
        manifest["params"]["temperature"] = -1.0

    reseal(path, negative)
    with pytest.raises(ModelLoadError, match=r"manifest\.json: field 'params'.*temperature"):
        load_retriever(path)


def test_saving_nan_is_refused_naming_the_array(tmp_path: Path) -> None:
    model = DTDRC(encoder="tfidf", n_clusters=2).fit(list(DATA.demos), DATA.tools)
    model.centroids_[0, 0] = np.nan
    with pytest.raises(ValueError, match="array 'model/centroids' holds NaN"):
        model.save(tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_a_file_that_grows_while_read_is_refused(
    copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the size seen when the file was opened is read (plus one byte to notice more)."""
    import stat

    real_fstat = os.fstat

    def shrunk(fd: int) -> os.stat_result:
        info = real_fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return info
        fields = list(info)
        fields[stat.ST_SIZE] -= 1  # as if one byte arrived after the open
        return os.stat_result(fields)

    monkeypatch.setattr(os, "fstat", shrunk)
    with pytest.raises(ModelLoadError, match=r"manifest\.json: grew while it was read"):
        load_retriever(copy)
