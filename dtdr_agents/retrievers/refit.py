"""Fit a retriever on a run store and publish it as a new version (`dtdr-agents refit`).

A refit reads the store's most recent runs (`DEFAULT_MAX_RUNS`, newest first, a batch of rows
at a time: `RunStore.recent_demonstrations`), so its memory and time are bounded by that
window, not by the store. The encoder's on-disk embedding cache is used, so a text a refit
has already seen (a request of the runs fitted before, its clauses, the tool descriptions) is
read back, not encoded again. What was new is reported (`RefitReport`): the runs read, the
runs recorded since the previous refit, the texts encoded and the look-ups the cache answered.

The previous refit is remembered in ``DIR/refit.json`` beside the versions (the newest run of
the store when it read it, and the store it read), so "new" means recorded after that run.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dtdr_agents.foundation.atomic import atomic_write_text
from dtdr_agents.foundation.words import plural
from dtdr_agents.retrievers.registry import make_retriever
from dtdr_agents.retrievers.saving import load_retriever
from dtdr_agents.store.publishing import DEFAULT_KEEP, Version, publish

if TYPE_CHECKING:
    from dtdr_agents.foundation.encoders import Encoder
    from dtdr_agents.foundation.types import Toolset
    from dtdr_agents.retrievers.base import ToolRetriever
    from dtdr_agents.store.runs import RunKey

DEFAULT_MAX_RUNS = 2_500
"""Runs a refit learns from by default: the store's most recent. A `hybrid` fit on 2,500
demonstrations takes under a minute on a 2-core machine (`docs/results/refit.json`), and a
fleet refits often; None (``--max-runs 0``) reads every run, and then memory and time grow
with the store."""

STATE_FILE = "refit.json"
"""The previous refit's record in the publish folder (see the module docstring)."""


@dataclass(frozen=True)
class RefitReport:
    """What a refit read, what was new, and what it cost.

    Attributes:
        version: The version published.
        runs_in_store: Runs the store held when the refit read it.
        runs_read: Rows read from the store (failed and empty runs included).
        runs_fitted: Demonstrations the model was fitted on.
        runs_new: Runs recorded since the previous refit into this folder from this store
            (None: no previous refit of it is on record).
        texts_encoded: Texts the encoder computed: those in no cache (None: the encoder keeps
            no cache, e.g. TF-IDF, which is fitted on the texts each time).
        cache_hits: Encoder look-ups the embedding cache answered, in memory or on disk (a
            text looked up again counts again; None as for `texts_encoded`).
        read_s: Seconds spent reading the store.
        fit_s: Seconds spent fitting, encoding included.
        publish_s: Seconds spent saving, checking and publishing.
    """

    version: Version
    runs_in_store: int
    runs_read: int
    runs_fitted: int
    runs_new: int | None
    texts_encoded: int | None
    cache_hits: int | None
    read_s: float
    fit_s: float
    publish_s: float

    def summary(self) -> str:
        """One line for the command line: what was read, what was new, the time spent."""
        new = "no previous refit on record" if self.runs_new is None else f"{self.runs_new} new"
        texts = (
            "texts encoded: no cache (the encoder is fitted on them)"
            if self.texts_encoded is None
            else f"texts encoded {self.texts_encoded}, cache hits {self.cache_hits}"
        )
        return (
            f"{self.version.name}: fitted on {plural(self.runs_fitted, 'run')} "
            f"({self.runs_read} read of {self.runs_in_store} in the store, {new}); {texts}; "
            f"read {self.read_s:.2f} s, fit {self.fit_s:.2f} s, publish {self.publish_s:.2f} s"
        )

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON data (the version as its record)."""
        out = asdict(self)
        out["version"] = asdict(self.version)
        return out


def refit_and_publish(
    store: str,
    root: str | Path,
    tools: Toolset,
    *,
    retriever: str = "hybrid",
    keep: int = DEFAULT_KEEP,
    include_failures: bool = False,
    max_runs: int | None = DEFAULT_MAX_RUNS,
    cache_dir: str | Path | None = None,
    batch_size: int | None = None,
    **params: Any,
) -> RefitReport:
    """Fit `retriever` on the store's recent runs and publish it behind ``root/latest``.

    The new version is checked by loading it before `latest` moves (`store.publish`), so a
    model that does not load is refused and the running version keeps serving.

    Args:
        store: The run store URL.
        root: The publish folder.
        tools: The catalogue the runs are checked against and the model ranks.
        retriever: The retriever id.
        keep: Versions kept.
        include_failures: Learn from runs whose outcome was a failure too.
        max_runs: Learn from the store's most recent runs, at most this many (None: all).
        cache_dir: The on-disk embedding cache of a named encoder (default
            `default_cache_dir()`); an encoder object given in `params` keeps its own.
        batch_size: Rows read from the store at a time (default `READ_BATCH`).
        **params: Retriever parameters (e.g. ``encoder``).

    Returns:
        The report: the version, what was read and new, and the time spent.

    Raises:
        InvalidDemonstrationError: A run calls a tool outside `tools`.
        ValueError: `max_runs` or `batch_size` is below 1.
    """
    from dtdr_agents.store.runs import READ_BATCH, RunStore  # SQLAlchemy: only when a refit runs

    model = make_retriever(retriever, **params)
    encoder = _with_cache(model, cache_dir)
    before = _cache_counts(encoder)
    t0 = time.perf_counter()
    with RunStore(store) as runs:
        newest = runs.newest()
        in_store = runs.count()
        previous = _previous(Path(root), runs.where)
        new = None if previous is None else runs.count_after(previous)
        demos, read = (
            runs.recent_demonstrations(
                max_runs,
                tools,
                exclude_failures=not include_failures,
                upto=newest,
                batch_size=READ_BATCH if batch_size is None else batch_size,
            )
            if newest is not None
            else ([], 0)
        )
        where = runs.where
    t1 = time.perf_counter()
    model.fit(demos, tools)
    t2 = time.perf_counter()
    after = _cache_counts(encoder)
    given = params.get("encoder")
    check = (
        load_retriever  # a named encoder is loaded by its name
        if given is None or isinstance(given, str)
        else functools.partial(load_retriever, encoder=given)  # an object: loading needs it
    )
    version = publish(
        root,
        model.save,
        check=check,
        keep=keep,
        note=f"{retriever} on {len(demos)} runs from {where}",
    )
    _remember(Path(root), version, where, newest)
    return RefitReport(
        version=version,
        runs_in_store=in_store,
        runs_read=read,
        runs_fitted=len(demos),
        runs_new=new,
        texts_encoded=None if after is None or before is None else after[1] - before[1],
        cache_hits=None if after is None or before is None else after[0] - before[0],
        read_s=round(t1 - t0, 3),
        fit_s=round(t2 - t1, 3),
        publish_s=round(time.perf_counter() - t2, 3),
    )


def _with_cache(model: ToolRetriever, cache_dir: str | Path | None) -> Encoder | None:
    """Give `model` its named encoder with the on-disk cache; returns that cached encoder.

    TF-IDF (fitted on the texts each time), retrievers without an encoder and encoder
    objects given by the caller are left as they are (an object's own cache is counted).
    """
    from dtdr_agents.foundation.encoders import CachedEncoder, default_cache_dir, get_encoder

    spec = getattr(model, "encoder", None)
    if model.uses_encoder and (spec is None or isinstance(spec, str)) and spec != "tfidf":
        folder = default_cache_dir() if cache_dir is None else cache_dir
        spec = get_encoder(spec, cache_dir=folder)
        model.set_params(encoder=spec)
    return spec if isinstance(spec, CachedEncoder) else None


def _cache_counts(encoder: Encoder | None) -> tuple[int, int] | None:
    """(hits, misses) of a cached encoder so far (None: no cache)."""
    from dtdr_agents.foundation.encoders import CachedEncoder

    if not isinstance(encoder, CachedEncoder):
        return None
    return encoder.hits, encoder.misses


def _previous(root: Path, where: str) -> RunKey | None:
    """The newest run the previous refit of `root` from `where` saw (None: none on record)."""
    path = root / STATE_FILE
    if not path.is_file():
        return None
    try:
        state = json.loads(path.read_text())
        if state.get("store") != where or state.get("newest_run") is None:
            return None
        moment, run_id = state["newest_run"]
        return datetime.fromisoformat(moment), str(run_id)
    except (ValueError, TypeError, KeyError):  # an unreadable record: nothing on record
        return None


def _remember(root: Path, version: Version, where: str, newest: RunKey | None) -> None:
    """Record this refit in ``root/refit.json`` (atomically)."""
    state = {
        "version": version.name,
        "store": where,
        "newest_run": None if newest is None else [newest[0].isoformat(), newest[1]],
    }
    atomic_write_text(root / STATE_FILE, json.dumps(state, indent=2) + "\n")


__all__ = ["DEFAULT_MAX_RUNS", "STATE_FILE", "RefitReport", "refit_and_publish"]
