"""Issue 38, item 5: an agent's `Reloader` loads a new version off the step path.

A step that notices a new version starts its load in a background thread and is served by the
running version, as are the steps during the load; the first step after it takes the new version
up. A version that fails to load in the background is reported (`ReloadWarning`) and refused;
the running version keeps serving.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.selection import SelectionPolicy
from dtdr_agents.retrievers import load_retriever, make_retriever
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.runtime import StepSelector
from dtdr_agents.store import Reloader, ReloadWarning, publish

QUERY, HISTORY = "find Sam's email and write to him", ("get_email_address",)
LOAD_SECONDS = 1.5
"""How long a load of a new version takes here (the step p50 it must not reach is milliseconds)."""


class SlowLoad:
    """`load_retriever`, slow: after the first load it sleeps, held until `release` is set."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, folder: Path) -> ToolRetriever:
        self.calls += 1
        if self.calls > 1:
            self.started.set()
            time.sleep(LOAD_SECONDS)
            assert self.release.wait(60), "the test never released the load"
        return load_retriever(folder)


@pytest.fixture(scope="module")
def fitted() -> list[ToolRetriever]:
    data = make_demo_dataset(n=60, seed=0)
    models = [
        make_retriever("bm25").fit(data.demos, data.tools),
        make_retriever("dtdr-c", encoder="tfidf", seed=0).fit(data.demos[:30], data.tools),
    ]
    assert _top(models[0]) != _top(models[1])
    return models


def _top(model: ToolRetriever) -> list[str]:
    return model.rank(QUERY, HISTORY).ranked_names()[:5]


def _step(selector: StepSelector) -> tuple[ToolRetriever, float]:
    """One step: the model that served it and how long it took."""
    start = time.perf_counter()
    step = selector.select(QUERY, HISTORY)
    took = time.perf_counter() - start
    assert step.selection.names
    return selector.retriever, took


def test_a_step_during_the_load_is_served_by_the_running_version(
    tmp_path: Path, fitted: list[ToolRetriever]
) -> None:
    root = tmp_path / "pub"
    v1 = publish(root, fitted[0].save, check=load_retriever)
    slow = SlowLoad()
    reloader = Reloader(root, slow, poll_interval=0.0)
    selector = StepSelector(fitted[0].tools_, reloader, policy=SelectionPolicy(k=3))
    old = _step(selector)[0]
    assert _top(old) == _top(fitted[0]) and reloader.wait(timeout=60)  # that step's look ended
    v2 = publish(root, fitted[1].save, check=load_retriever)

    noticed, took = _step(selector)  # notices v2 and starts its load in the background
    assert slow.started.wait(30)
    during, took_during = _step(selector)  # the load is running (held until released)
    assert noticed == during == old and reloader.version == v1
    assert max(took, took_during) < LOAD_SECONDS  # no step waited for the load
    assert not reloader.wait(timeout=0.0)  # still loading

    slow.release.set()
    assert reloader.wait(timeout=60)
    after, _ = _step(selector)  # the next step takes v2 up
    assert reloader.version == v2 and after is not old and _top(after) == _top(fitted[1])


def test_a_background_load_that_fails_is_reported_and_the_running_version_serves(
    tmp_path: Path, fitted: list[ToolRetriever]
) -> None:
    root = tmp_path / "pub"
    publish(root, fitted[0].save, check=load_retriever)
    reloader = Reloader(root, load_retriever, poll_interval=0.0)
    selector = StepSelector(fitted[0].tools_, reloader, policy=SelectionPolicy(k=3))
    running = reloader.current()
    assert reloader.wait(timeout=60)

    def corrupt(folder: Path) -> None:
        fitted[1].save(folder)
        (folder / "manifest.json").write_text('{"format": "dtdr-agents/retriever"')

    publish(root, corrupt)  # no check: `latest` names a version that does not load
    served, _ = _step(selector)  # starts the background load
    assert reloader.wait(timeout=60)
    with pytest.warns(ReloadWarning, match=r"v000002 does not load .*keeping v000001"):
        again, _ = _step(selector)
    assert served is again is running
    assert reloader.version.name == "v000001" and reloader.current() is running
    assert "v000002" in reloader.refused
    _step(selector)  # a refused version is not loaded again
    assert reloader.wait(timeout=60) and reloader.current() is running


def test_a_loader_that_crashes_the_look_is_reported(
    tmp_path: Path, fitted: list[ToolRetriever]
) -> None:
    root = tmp_path / "pub"
    publish(root, fitted[0].save, check=load_retriever)
    reloader = Reloader(root, load_retriever, poll_interval=0.0)
    (root / "latest").unlink()
    (root / "latest").symlink_to("versions/v000009")  # names no kept version
    model = reloader.current()
    assert reloader.wait(timeout=60)
    with pytest.warns(ReloadWarning, match="not a kept version.*keeping v000001"):
        assert reloader.current() is model


def test_reload_still_loads_at_once(tmp_path: Path, fitted: list[ToolRetriever]) -> None:
    """`reload()` (the MCP proxy's background task calls it) loads in the caller's thread."""
    root = tmp_path / "pub"
    publish(root, fitted[0].save, check=load_retriever)
    reloader = Reloader(root, load_retriever, poll_interval=None)
    v2 = publish(root, fitted[1].save, check=load_retriever)
    assert reloader.current() is not None and reloader.wait(timeout=0.0)  # never polls
    assert reloader.reload() and reloader.version == v2
    assert _top(reloader.current()) == _top(fitted[1])
