"""Seeded corruptions of saved models: identical rankings or a clear error, never wrong (issue 11).

Every case copies a pristine saved folder, corrupts it one way, loads it and ranks fixed
requests. A case is "clear" when loading raises `ModelLoadError` naming a file of the folder,
"identical" when the rankings equal the pristine ones exactly, a "crash" for any other
exception and "silently wrong" otherwise. Some cases are "resealed": the manifest's checksum
is recomputed after the edit, as a hand edit with a script would, so the explicit value,
shape, range and order checks must catch them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dtdr_agents import DTDRC, DTDRL, load_retriever
from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.errors import ModelLoadError
from dtdr_agents.foundation.persistence import manifest_digest

N_CASES = 200
PROBES = [
    ("Summarize budget.pdf and email it to Anna", ()),
    ("Summarize budget.pdf and email it to Anna", ("open_file",)),
    ("Text Bob that I am late", ("get_phone_number",)),
    ("asdf qwerty", ()),
]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two tiny TF-IDF models (DTDR-C, DTDR-L structured) saved once."""
    ds = make_demo_dataset(n=120, seed=11)
    demos = list(ds.demos)
    root = tmp_path_factory.mktemp("pristine")
    models = {
        "dtdr-c": DTDRC(encoder="tfidf", n_clusters=3, seed=1),
        "dtdr-l": DTDRL(encoder="tfidf", history="structured", epochs=2, seed=1),
    }
    return {name: m.fit(demos, ds.tools).save(root / name) for name, m in models.items()}


def _rankings(path: Path) -> list[tuple[tuple[str, ...], bytes, bool]]:
    model = load_retriever(path)
    out = []
    for query, history in PROBES:
        r = model.rank(query, history, ignore_unknown=True)
        out.append((r.names, np.asarray(r.probabilities).tobytes(), r.fallback))
    return out


# ------------------------------------------------------------------------ corruptions
def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def _manifest(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "manifest.json").read_text(encoding="utf-8"))


def _write_manifest(folder: Path, manifest: dict[str, Any], *, reseal: bool) -> None:
    if reseal:
        manifest["integrity"]["manifest_sha256"] = manifest_digest(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def _rewrite_arrays(folder: Path, edit: Callable[[dict[str, np.ndarray]], None], reseal: bool):
    from safetensors import safe_open
    from safetensors.numpy import load_file, save

    path = folder / "arrays.safetensors"
    with safe_open(str(path), "numpy") as fh:
        meta = fh.metadata()
    arrays = dict(load_file(str(path)))
    edit(arrays)
    data = save(arrays, metadata=meta)
    path.write_bytes(data)
    if reseal:
        manifest = _manifest(folder)
        manifest["integrity"]["arrays_sha256"] = hashlib.sha256(data).hexdigest()
        _write_manifest(folder, manifest, reseal=False)


def truncate(folder: Path, rng: np.random.Generator) -> str:
    path = _files(folder)[rng.integers(len(_files(folder)))]
    data = path.read_bytes()
    path.write_bytes(data[: int(rng.integers(0, len(data)))])
    return f"truncate {path.name}"


def flip(folder: Path, rng: np.random.Generator) -> str:
    path = _files(folder)[rng.integers(len(_files(folder)))]
    data = bytearray(path.read_bytes())
    for _ in range(int(rng.integers(1, 9))):
        data[int(rng.integers(len(data)))] ^= int(rng.integers(1, 256))
    path.write_bytes(bytes(data))
    return f"flip {path.name}"


def delete(folder: Path, rng: np.random.Generator) -> str:
    path = _files(folder)[rng.integers(len(_files(folder)))]
    path.unlink()
    return f"delete {path.name}"


def garbage_json(folder: Path, rng: np.random.Generator) -> str:
    choices = [b"", b"{", b"[]", b"null", b'{"format": 1}', bytes(rng.integers(0, 256, 64))]
    choices.append(b"[" * 100_000)  # deep nesting
    (folder / "manifest.json").write_bytes(choices[int(rng.integers(len(choices)))])
    return "garbage manifest"


def swap_tools(folder: Path, rng: np.random.Generator, reseal: bool = False) -> str:
    manifest = _manifest(folder)
    tools = manifest["tools"]
    i, j = rng.choice(len(tools), 2, replace=False)
    tools[i], tools[j] = tools[j], tools[i]
    _write_manifest(folder, manifest, reseal=reseal)
    return "swap tool order"


def swap_tools_resealed(folder: Path, rng: np.random.Generator) -> str:
    return swap_tools(folder, rng, reseal=True) + " (resealed)"


def nan_array(folder: Path, rng: np.random.Generator, reseal: bool = False) -> str:
    def edit(arrays: dict[str, np.ndarray]) -> None:
        floats = sorted(k for k, v in arrays.items() if v.dtype.kind == "f" and v.size)
        key = floats[int(rng.integers(len(floats)))]
        arr = arrays[key].copy()
        arr.flat[int(rng.integers(arr.size))] = [np.nan, np.inf, -np.inf][int(rng.integers(3))]
        arrays[key] = arr

    _rewrite_arrays(folder, edit, reseal)
    return "non-finite value" + (" (resealed)" if reseal else "")


def nan_array_resealed(folder: Path, rng: np.random.Generator) -> str:
    return nan_array(folder, rng, reseal=True)


def wrong_shape(folder: Path, rng: np.random.Generator) -> str:
    def edit(arrays: dict[str, np.ndarray]) -> None:
        key = sorted(arrays)[int(rng.integers(len(arrays)))]
        arr = arrays[key]
        arrays[key] = arr.reshape(-1)[: max(arr.size - 1, 0)] if arr.size > 1 else np.zeros(3)

    _rewrite_arrays(folder, edit, reseal=True)
    return "wrong shape (resealed)"


def bad_scalar(folder: Path, rng: np.random.Generator) -> str:
    manifest = _manifest(folder)
    edits: list[tuple[list[str], Any]] = [
        (["end_rate"], 5.0),
        (["end_rate"], -0.5),
        (["end_rate"], math.nan),
        (["end_rate"], "x"),
        (["state", "ood_threshold"], -1.0),
        (["state", "ood_threshold"], math.inf),
        (["state", "vocab_threshold"], 7.0),
    ]
    if manifest["class"] == "DTDRC":
        edits += [(["params", "order"], 10**9), (["state", "n_clusters"], 99)]
        edits += [(["params", "backoff"], "yes")]
    else:
        edits += [(["params", "history_length"], 10**9), (["params", "history"], "text")]
    keys, value = edits[int(rng.integers(len(edits)))]
    target = manifest
    for k in keys[:-1]:
        target = target[k]
    target[keys[-1]] = value
    _write_manifest(folder, manifest, reseal=True)
    return f"{'.'.join(keys)}={value!r} (resealed)"


def inject_tool(folder: Path, rng: np.random.Generator) -> str:
    manifest = _manifest(folder)
    manifest["current_tools"] = [*manifest["tools"], {"name": "rm_rf"}]
    _write_manifest(folder, manifest, reseal=bool(rng.integers(2)))
    return "inject current_tools rm_rf"


def corrupt_encoder(folder: Path, rng: np.random.Generator) -> str:
    manifest = _manifest(folder)
    vocab = manifest["encoder"]["state"]["vocabulary"]
    i, j = rng.choice(len(vocab), 2, replace=False)
    vocab[i], vocab[j] = vocab[j], vocab[i]
    _write_manifest(folder, manifest, reseal=True)
    return "encoder vocabulary edited (resealed)"


def foreign_encoder(folder: Path, rng: np.random.Generator) -> str:
    manifest = _manifest(folder)
    manifest["encoder"] = {"id": "path:evil", "spec": str(folder.parent / "evil-model")}
    _write_manifest(folder, manifest, reseal=True)
    return "manifest names an outside model (resealed)"


def symlink_out(folder: Path, rng: np.random.Generator) -> str:
    path = _files(folder)[rng.integers(len(_files(folder)))]
    outside = folder.parent / f"{folder.name}-outside-{path.name}"
    shutil.copy(path, outside)  # identical content: still refused
    path.unlink()
    os.symlink(outside, path)
    return f"symlink {path.name} out of the folder"


CORRUPTIONS = [
    truncate,
    flip,
    delete,
    garbage_json,
    swap_tools,
    swap_tools_resealed,
    nan_array,
    nan_array_resealed,
    wrong_shape,
    bad_scalar,
    inject_tool,
    corrupt_encoder,
    foreign_encoder,
    symlink_out,
]


def run_cases(pristine: dict[str, Path], root: Path, n: int, seed: int) -> Counter[str]:
    """Apply `n` seeded corruptions; count outcomes (and remember the bad ones)."""
    rng = np.random.default_rng(seed)
    expected = {name: _rankings(path) for name, path in pristine.items()}
    counts: Counter[str] = Counter()
    bad: list[str] = []
    names = sorted(pristine)
    for case in range(n):
        name = names[case % len(names)]
        folder = root / f"case{case}"
        shutil.copytree(pristine[name], folder)
        corruption = CORRUPTIONS[int(rng.integers(len(CORRUPTIONS)))]
        what = f"{name} case {case}: {corruption(folder, rng)}"
        try:
            got = _rankings(folder)
        except ModelLoadError as exc:
            outcome = "clear error" if str(folder) in str(exc) else "error without the file"
            if outcome != "clear error":
                bad.append(f"{what}: {exc}")
        except Exception as exc:  # counting crashes is the point
            outcome = "crash"
            bad.append(f"{what}: {type(exc).__name__}: {exc}")
        else:
            outcome = "identical" if got == expected[name] else "silently wrong"
            if outcome == "silently wrong":
                bad.append(what)
        counts[outcome] += 1
    counts["cases"] = n
    print(f"\ncorruption fuzz: {dict(counts)}")
    for line in bad:
        print("  BAD", line)
    return counts


def test_corruption_fuzz_never_silently_wrong(pristine, tmp_path):
    counts = run_cases(pristine, tmp_path, N_CASES, seed=2026)
    assert counts["crash"] == 0
    assert counts["silently wrong"] == 0
    assert counts["error without the file"] == 0
    assert counts["clear error"] + counts["identical"] == N_CASES
    assert counts["clear error"] >= N_CASES // 2  # the corruptions really corrupt


@pytest.mark.parametrize("corruption", CORRUPTIONS, ids=lambda f: f.__name__)
def test_every_corruption_kind_is_caught(pristine, tmp_path, corruption):
    rng = np.random.default_rng(7)
    for name, path in pristine.items():
        folder = tmp_path / name
        shutil.copytree(path, folder)
        corruption(folder, rng)
        try:
            got: Any = _rankings(folder)
        except ModelLoadError as exc:
            got = str(exc)
        assert got == _rankings(path) or (isinstance(got, str) and str(folder) in got)


def _set_array(key: str, value: float, index: int = 0) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        def change(arrays: dict[str, np.ndarray]) -> None:
            arr = arrays[key].copy()
            arr.flat[index] = value
            arrays[key] = arr

        _rewrite_arrays(folder, change, reseal=True)

    return edit


def _set_field(keys: list[str], value: Any) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        manifest = _manifest(folder)
        target = manifest
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value
        _write_manifest(folder, manifest, reseal=True)

    return edit


TARGETED: list[tuple[str, str, Callable[[Path], None]]] = [
    ("dtdr-l", "NaN in weight", _set_array("model/weight", math.nan)),
    ("dtdr-l", "inf in bias", _set_array("model/bias", math.inf)),
    ("dtdr-l", "NaN in OOD mean", _set_array("model/ood_mean", math.nan)),
    ("dtdr-l", "NaN in OOD precision", _set_array("model/ood_precision", math.nan)),
    ("dtdr-c", "NaN in centroids", _set_array("model/centroids", math.nan)),
    ("dtdr-c", "NaN in tool embeddings", _set_array("tool_embeddings", math.nan)),
    ("dtdr-c", "negative cluster size", _set_array("model/cluster_sizes", -5)),
    ("dtdr-c", "Markov next label out of range", _set_array("model/markov_rows", 10**6, 5)),
    ("dtdr-c", "NaN in TF-IDF idf", _set_array("encoder/idf", math.nan)),
    ("dtdr-c", "end_rate 5", _set_field(["end_rate"], 5.0)),
    ("dtdr-l", "end_rate -1", _set_field(["end_rate"], -1.0)),
    ("dtdr-c", "ood_threshold NaN", _set_field(["state", "ood_threshold"], math.nan)),
    ("dtdr-l", "ood_threshold -1", _set_field(["state", "ood_threshold"], -1.0)),
    ("dtdr-c", "vocab_threshold 7", _set_field(["state", "vocab_threshold"], 7.0)),
    ("dtdr-c", "n_clusters 99", _set_field(["state", "n_clusters"], 99)),
    ("dtdr-c", "order 10**9", _set_field(["params", "order"], 10**9)),
    ("dtdr-l", "history_length 10**9", _set_field(["params", "history_length"], 10**9)),
    ("dtdr-l", "history text on structured weights", _set_field(["params", "history"], "text")),
]


def test_targeted_values_and_scalars(pristine, tmp_path):
    counts: Counter[str] = Counter()
    for i, (name, what, edit) in enumerate(TARGETED):
        folder = tmp_path / f"t{i}"
        shutil.copytree(pristine[name], folder)
        edit(folder)
        try:
            _rankings(folder)
        except ModelLoadError as exc:
            counts["clear error" if str(folder) in str(exc) else f"unclear: {what}"] += 1
        except Exception as exc:  # counting crashes is the point
            counts[f"crash: {what}: {type(exc).__name__}: {exc}"] += 1
        else:
            counts[f"silently wrong: {what}"] += 1
    print(f"\ntargeted values: {len(TARGETED)} cases, {dict(counts)}")
    assert counts == Counter({"clear error": len(TARGETED)})


def foreign_child(folder: Path, rng: np.random.Generator, other: Path) -> str:
    shutil.rmtree(folder / "base")
    shutil.copytree(other, folder / "base")  # a valid model, but not the one saved here
    return "base/ replaced by another valid model"


@pytest.mark.slow
def test_nested_folders_get_the_same_checks(pristine, tmp_path):
    from dtdr_agents.retrievers import make_retriever

    ds = make_demo_dataset(n=120, seed=11)
    composite = make_retriever("ptr:dtdr-c", encoder="tfidf", seed=1)
    saved = composite.fit(list(ds.demos), ds.tools).save(tmp_path / "ptr")
    expected = _rankings(saved)
    rng = np.random.default_rng(5)
    counts: Counter[str] = Counter()
    kinds = [truncate, flip, delete, swap_tools_resealed, nan_array_resealed, bad_scalar]
    kinds += [symlink_out, wrong_shape]
    for case in range(40):
        folder = tmp_path / f"n{case}"
        shutil.copytree(saved, folder)
        if case % 10 == 9:
            what = foreign_child(folder, rng, pristine["dtdr-c"])
        else:
            what = kinds[case % len(kinds)](folder / "base", rng)
        try:
            got = _rankings(folder)
        except ModelLoadError as exc:
            counts["clear error" if str(folder) in str(exc) else f"unclear: {what}"] += 1
        except Exception as exc:  # counting crashes is the point
            counts[f"crash: {what}: {type(exc).__name__}: {exc}"] += 1
        else:
            counts["identical" if got == expected else f"silently wrong: {what}"] += 1
    print(f"\nnested corruptions: 40 cases, {dict(counts)}")
    assert set(counts) <= {"clear error", "identical"}


def test_every_array_with_a_wrong_shape_or_dtype_is_refused(pristine, tmp_path):
    from safetensors.numpy import load_file

    cases = 0
    for name, path in pristine.items():
        keys = sorted(load_file(str(path / "arrays.safetensors")))
        for key in keys:
            for how in ("flat", "2d", "dtype"):
                folder = tmp_path / f"{name}-{key.replace('/', '_')}-{how}"
                shutil.copytree(path, folder)

                def edit(arrays: dict[str, np.ndarray], key: str = key, how: str = how) -> None:
                    arr = arrays[key]
                    if how == "flat":
                        arrays[key] = arr.reshape(-1)[:-1] if arr.size > 1 else np.zeros(2)
                    elif how == "2d":
                        arrays[key] = np.zeros((2, 2, 2), dtype=arr.dtype)
                    else:
                        arrays[key] = arr.astype(np.float16 if arr.dtype.kind != "f" else np.int8)

                _rewrite_arrays(folder, edit, reseal=True)
                cases += 1
                try:
                    got: Any = _rankings(folder)
                except ModelLoadError as exc:
                    got = str(exc)
                assert got == _rankings(path) or (isinstance(got, str) and str(folder) in got), (
                    key,
                    how,
                )
    assert cases >= 30
