"""Concurrent saves, loads and killed saves of one model folder (issue 11).

- Race: a subprocess saves two different models in turn to one path while this process loads
  it for a bounded time: every load is exactly one of the two models (zero mixed models) and
  none fails.
- kill -9: a subprocess saving in a loop is killed at random moments; the folder then always
  loads as one of the saved models, and the next save names what the killed one left (issue
  41: a save removes only what it made itself).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from dtdr_agents import DTDRC, load_retriever
from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.errors import ModelLoadError

PROBE = ("Summarize budget.pdf and email it to Anna", ("open_file",))

_SAVER = textwrap.dedent(
    """
    import sys, time
    from dtdr_agents import load_retriever
    models = [load_retriever(sys.argv[1]), load_retriever(sys.argv[2])]
    target, seconds = sys.argv[3], float(sys.argv[4])
    print("ready", flush=True)
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        models[i % 2].save(target)
        i += 1
    print(i, flush=True)
    """
)


@pytest.fixture(scope="module")
def two_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two different tiny TF-IDF DTDR-C models, saved."""
    ds = make_demo_dataset(n=120, seed=4)
    demos = list(ds.demos)
    root = tmp_path_factory.mktemp("models")
    a = DTDRC(encoder="tfidf", n_clusters=2, seed=1).fit(demos[:60], ds.tools).save(root / "a")
    b = DTDRC(encoder="tfidf", n_clusters=4, seed=2).fit(demos[60:], ds.tools).save(root / "b")
    return a, b


def _signature(path: Path) -> bytes:
    model = load_retriever(path)
    probs = model.rank(*PROBE).probabilities
    return np.asarray(probs).tobytes() + str(model.get_params()["n_clusters"]).encode()


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}


def _start_saver(a: Path, b: Path, target: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _SAVER, str(a), str(b), str(target), str(seconds)],
        env=_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_loads_during_saves_are_never_mixed(two_models, tmp_path):
    a, b = two_models
    expected = {_signature(a): "a", _signature(b): "b"}
    assert len(expected) == 2  # the two models rank differently
    target = tmp_path / "shared"
    load_retriever(a).save(target)
    proc = _start_saver(a, b, target, seconds=3.0)
    seen: dict[str, int] = {"a": 0, "b": 0, "mixed": 0, "error": 0}
    errors: list[str] = []
    while proc.poll() is None:
        try:
            sig = _signature(target)
        except ModelLoadError as exc:
            seen["error"] += 1
            errors.append(str(exc))
            continue
        seen[expected.get(sig, "mixed")] += 1
    out, _ = proc.communicate()
    saves = int(out.strip())
    print(f"\nrace: {saves} saves, loads: {seen}")
    assert proc.returncode == 0
    assert saves > 5
    assert seen["mixed"] == 0
    assert seen["error"] == 0, errors[:3]
    assert seen["a"] + seen["b"] > 5
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".shared.")]


def test_kill_9_during_save_leaves_a_loadable_model(two_models, tmp_path):
    a, b = two_models
    expected = {_signature(a), _signature(b)}
    target = tmp_path / "model"
    load_retriever(a).save(target)
    rng = np.random.default_rng(0)
    for _ in range(4):
        proc = _start_saver(a, b, target, seconds=30.0)
        time.sleep(float(rng.uniform(0.05, 0.6)))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
        assert _signature(target) in expected  # the previous (or the new) state, complete
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_retriever(b).save(target)  # names what the killed ones left; removes none of it
    assert _signature(target) == _signature(b)
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith(".model.")]
    named = " ".join(str(w.message) for w in caught)
    assert all(name in named for name in left), (left, named)


def test_saved_folders_follow_the_umask(two_models, tmp_path):
    old = os.umask(0o022)
    try:
        path = load_retriever(two_models[0]).save(tmp_path / "m")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o755
    assert (path / "manifest.json").stat().st_mode & 0o777 == 0o644
