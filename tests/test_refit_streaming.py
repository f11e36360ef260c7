"""The refit reads the store newest first in batches, up to a bound, and says what was new."""

from __future__ import annotations

import json
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.encoders import CallableEncoder
from dtdr_agents.foundation.errors import InvalidDemonstrationError
from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.retrievers.refit import STATE_FILE, refit_and_publish
from dtdr_agents.store import RunRecord, RunStore
from dtdr_agents.store.publishing import POINTER, current

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _runs(demos: list[Demonstration], start: int = 0, **fields: object) -> list[RunRecord]:
    """`demos` as runs one second apart from `T0 + start` seconds, ids in that order."""
    return [
        RunRecord.from_demonstration(
            d, id=f"run-{start + i:06d}", created_at=T0 + timedelta(seconds=start + i), **fields
        )
        for i, d in enumerate(demos)
    ]


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, Toolset, list[Demonstration]]:
    data = make_demo_dataset(n=80, seed=5)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(url) as runs:
        runs.add_many(_runs(list(data.demos[:60])))
    return url, data.tools, list(data.demos)


def test_recent_demonstrations_read_newest_first_and_stop_at_the_limit(
    store: tuple[str, Toolset, list[Demonstration]],
) -> None:
    url, tools, demos = store
    with RunStore(url) as runs:
        runs.add(
            RunRecord.from_demonstration(
                demos[60],
                id="run-fail",
                outcome="failure",
                created_at=T0 + timedelta(seconds=59, milliseconds=1),
            )
        )
        recent, read = runs.recent_demonstrations(10, tools, batch_size=3)
        assert read == 10  # the failed run is filtered by the query, not read
        assert [d.id for d in recent] == [f"run-{i:06d}" for i in range(50, 60)]  # oldest first
        everything, read_all = runs.recent_demonstrations(None, tools, exclude_failures=False)
        assert read_all == 61 and len(everything) == 61
        assert [d.id for d in everything] == [
            d.id for d in runs.demonstrations(exclude_failures=False)
        ]
        upto = (T0 + timedelta(seconds=20), "run-000020")
        before, _ = runs.recent_demonstrations(5, tools, upto=upto)
        assert [d.id for d in before] == [f"run-{i:06d}" for i in range(16, 21)]
        assert runs.newest() == (T0 + timedelta(seconds=59, milliseconds=1), "run-fail")
        assert runs.count_after((T0 + timedelta(seconds=57), "run-000057")) == 3
        with pytest.raises(ValueError, match="limit"):
            runs.recent_demonstrations(0, tools)
        with pytest.raises(ValueError, match="batch_size"):
            list(runs.iter_runs(batch_size=0))


def test_recent_demonstrations_name_a_run_outside_the_catalogue(
    store: tuple[str, Toolset, list[Demonstration]],
) -> None:
    url, tools, _ = store
    with RunStore(url) as runs:
        runs.add(
            RunRecord(
                request="odd",
                calls=("not_a_tool",),
                id="run-odd",
                created_at=T0 + timedelta(days=1),
            )
        )
        with pytest.raises(InvalidDemonstrationError, match="not_a_tool"):
            runs.recent_demonstrations(5, tools)


def test_iter_runs_fetches_rows_in_batches(
    store: tuple[str, Toolset, list[Demonstration]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _, _ = store
    sizes: list[int] = []
    with RunStore(url) as runs:
        from sqlalchemy.engine import CursorResult

        real = CursorResult.partitions

        def spy(self: CursorResult, size: int | None = None):  # type: ignore[no-untyped-def,type-arg]
            for part in real(self, size):
                sizes.append(len(part))
                yield part

        monkeypatch.setattr(CursorResult, "partitions", spy)
        it = runs.iter_runs(batch_size=7)
        first = next(it)
        assert first.id == "run-000000" and sizes == [7]  # one batch fetched, not the store
        assert len(list(it)) == 59 and max(sizes) == 7 and sum(sizes) == 60


def _hash_encoder(tmp_path: Path, calls: list[list[str]]) -> CallableEncoder:
    def embed(texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        out = np.zeros((len(texts), 32))
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, zlib.crc32(word.encode()) % 32] += 1.0
        return out

    return CallableEncoder(embed, id="hash:refit-test", dim=32, cache_dir=tmp_path / "cache")


def test_refit_reports_what_was_new_and_encodes_only_new_texts(
    store: tuple[str, Toolset, list[Demonstration]], tmp_path: Path
) -> None:
    url, tools, demos = store
    calls: list[list[str]] = []
    encoder = _hash_encoder(tmp_path, calls)
    pub = tmp_path / "pub"
    first = refit_and_publish(url, pub, tools, retriever="dtdr-c", encoder=encoder, max_runs=40)
    assert (first.runs_in_store, first.runs_read, first.runs_fitted) == (60, 40, 40)
    assert first.runs_new is None  # nothing on record before
    assert first.texts_encoded == len({t for c in calls for t in c}) > 0
    state = json.loads((pub / STATE_FILE).read_text())
    assert state["version"] == "v000001" and state["newest_run"][1] == "run-000059"

    with RunStore(url) as runs:
        runs.add_many(_runs(demos[60:67], start=60))
    calls.clear()
    second = refit_and_publish(url, pub, tools, retriever="dtdr-c", encoder=encoder, max_runs=40)
    assert second.version.name == "v000002" and current(pub).name == "v000002"  # type: ignore[union-attr]
    assert (second.runs_in_store, second.runs_read, second.runs_new) == (67, 40, 7)
    new_texts = {d.query for d in demos[60:67]} - {d.query for d in demos[20:60]}
    encoded = {t for c in calls for t in c}
    assert encoded == new_texts and second.texts_encoded == len(new_texts)
    assert second.cache_hits is not None and second.cache_hits >= 33
    assert (
        "7 new" in second.summary()
        and f"texts encoded {len(new_texts)}, cache hits" in second.summary()
    )
    assert (pub / POINTER).is_symlink()


def test_refit_without_a_cache_says_so_and_reads_every_run_when_unbounded(
    store: tuple[str, Toolset, list[Demonstration]], tmp_path: Path
) -> None:
    url, tools, _ = store
    report = refit_and_publish(
        url, tmp_path / "pub", tools, retriever="dtdr-c", encoder="tfidf", max_runs=None
    )
    assert (report.runs_read, report.runs_fitted) == (60, 60)
    assert report.texts_encoded is None and "no cache" in report.summary()
    with pytest.raises(ValueError, match="limit"):
        refit_and_publish(
            url, tmp_path / "pub", tools, retriever="dtdr-c", encoder="tfidf", max_runs=0
        )


def test_refit_command_prints_what_was_new(
    store: tuple[str, Toolset, list[Demonstration]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dtdr_agents.cli import main

    url, tools, demos = store
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps([t.to_dict() for t in tools]))
    common = [
        "refit",
        "--store",
        url,
        "--publish",
        str(tmp_path / "pub"),
        "--retriever",
        "dtdr-c",
        "--encoder",
        "tfidf",
        "--tools",
        str(tools_file),
    ]
    assert main([*common, "--max-runs", "25"]) == 0
    out = capsys.readouterr().out
    assert "fitted on 25 runs (25 read of 60 in the store, no previous refit on record)" in out
    with RunStore(url) as runs:
        runs.add_many(_runs(demos[60:64], start=60))
    assert main([*common, "--max-runs", "0"]) == 0
    assert "fitted on 64 runs (64 read of 64 in the store, 4 new)" in capsys.readouterr().out
    assert main([*common, "--max-runs", "-1"]) == 2
