"""Publish fitted models as versions behind an atomic `latest` pointer; reload between steps.

A publish folder ``DIR`` holds::

    DIR/.dtdr-publish         marks the folder as ours (nothing else is ever deleted)
    DIR/versions/v000007/     a saved model folder (`dtdr_agents.foundation.persistence`)
    DIR/versions/v000007.json its record: number, content hash, catalogue hash, time, note
    DIR/latest -> versions/v000007   a symbolic link, replaced in one atomic rename

`publish` saves a new version, checks it by loading it (a corrupt or incompatible model is
refused and removed, and `latest` keeps pointing at the running version), then moves the
pointer and keeps the newest `keep` versions. `rollback` moves the pointer back. `Reloader`
serves the version `latest` names and takes up a new one only between steps: `current()`
looks at most every `poll_interval` seconds and loads a new version in a background thread, so
no step pays the load (`reload()` checks and loads at once); a version that fails to load is
refused with a warning and the running one keeps serving.

The store layer does not know how to save or load a retriever: the caller passes `save` and
`load` (the CLI passes `ToolRetriever.save` and `load_retriever`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Generic, TypeVar

from dtdr_agents.store.errors import StoreError

T = TypeVar("T")

MARKER = ".dtdr-publish"
VERSIONS = "versions"
POINTER = "latest"
VERSION_NAME = re.compile(r"^v(\d{6})$")
DEFAULT_KEEP = 5


class PublishError(StoreError):
    """A publish, rollback or reload was refused (foreign folder, bad version, failed check)."""


class ReloadWarning(UserWarning):
    """A newly published version could not be loaded; the running version keeps serving."""


@dataclass(frozen=True)
class Version:
    """One published version.

    Attributes:
        name: ``v`` and six digits, e.g. ``v000007``.
        number: Its number (versions count up from 1).
        content_hash: SHA-256 over the model folder's files (names and bytes).
        catalogue_hash: The tool catalogue's hash from the model's manifest.
        created_at: When it was published (ISO 8601, UTC).
        note: Free text given to `publish` (e.g. the store URL and the number of runs).
    """

    name: str
    number: int
    content_hash: str
    catalogue_hash: str | None
    created_at: str
    note: str = ""


def content_hash(folder: Path) -> str:
    """SHA-256 over every file below `folder`: relative names and bytes, in name order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def _root(root: str | Path, *, create: bool) -> Path:
    """The publish folder, created (and marked) if `create`; a foreign folder is refused."""
    path = Path(root)
    if path.exists() and not path.is_dir():
        raise PublishError(f"{path}: not a folder")
    if (path / MARKER).is_file():
        return path
    if path.exists() and any(path.iterdir()):
        raise PublishError(
            f"{path}: not a publish folder (no {MARKER}) and not empty; refusing to write there"
        )
    if not create:
        raise PublishError(f"{path}: nothing was published here")
    (path / VERSIONS).mkdir(parents=True, exist_ok=True)
    (path / MARKER).write_text("dtdr-agents publish folder\n")
    return path


def versions(root: str | Path) -> list[Version]:
    """The published versions still kept, oldest first."""
    base = _root(root, create=False) / VERSIONS
    out: list[Version] = []
    for record in sorted(base.glob("v*.json")):
        if VERSION_NAME.match(record.stem) and (base / record.stem).is_dir():
            try:
                out.append(Version(**json.loads(record.read_text())))
            except (ValueError, TypeError) as exc:
                raise PublishError(f"{record}: not a version record ({exc})") from None
    return sorted(out, key=lambda v: v.number)


def current(root: str | Path) -> Version | None:
    """The version `latest` points at, or None before the first publish."""
    base = _root(root, create=False)
    try:
        target = os.readlink(base / POINTER)
    except FileNotFoundError:
        return None
    name = Path(target).name
    for version in versions(base):
        if version.name == name:
            return version
    raise PublishError(f"{base / POINTER} points at {target!r}, which is not a kept version")


@contextmanager
def _publish_lock(base: Path) -> Iterator[None]:
    """Serialise publishes and rollbacks of one folder across processes (an advisory lock)."""
    with (base / MARKER).open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _point(base: Path, name: str) -> None:
    """Move `latest` to `versions/<name>` in one atomic rename of a new symbolic link."""
    tmp = base / f".{POINTER}-{uuid.uuid4().hex[:8]}"
    os.symlink(f"{VERSIONS}/{name}", tmp)
    os.replace(tmp, base / POINTER)


def publish(
    root: str | Path,
    save: Callable[[Path], object],
    *,
    check: Callable[[Path], object] | None = None,
    keep: int = DEFAULT_KEEP,
    note: str = "",
) -> Version:
    """Save a new version with `save(folder)`, check it with `check(folder)`, move `latest`.

    Args:
        root: The publish folder (created if missing; a non-empty folder that is not a
            publish folder is refused).
        save: Writes the model into the folder it is given (e.g. ``retriever.save``).
        check: Loads the saved folder (e.g. ``load_retriever``); if it raises, the new
            version is removed and `latest` is not moved.
        keep: How many versions to keep (the newest; never the one `latest` points at).
        note: Free text kept in the version's record.

    Raises:
        PublishError: A foreign folder, ``keep < 1``, or a version that fails `check`.
    """
    if keep < 1:
        raise PublishError(f"keep must be at least 1, got {keep}")
    base = _root(root, create=True)
    with _publish_lock(base):
        existing = versions(base)
        number = (existing[-1].number if existing else 0) + 1
        name = f"v{number:06d}"
        folder = base / VERSIONS / name
        save(folder)
        if check is not None:
            try:
                check(folder)
            except Exception as exc:
                shutil.rmtree(folder, ignore_errors=True)
                raise PublishError(
                    f"{name} was refused: loading it failed ({type(exc).__name__}: {exc}); "
                    f"{POINTER} still points at the running version"
                ) from exc
        manifest = folder / "manifest.json"
        try:
            catalogue = json.loads(manifest.read_text()).get("catalogue_hash")
        except (OSError, ValueError, AttributeError):
            catalogue = None  # no readable manifest: published unchecked (check=None)
        version = Version(
            name=name,
            number=number,
            content_hash=content_hash(folder),
            catalogue_hash=catalogue,
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            note=note,
        )
        record = base / VERSIONS / f"{name}.json"
        tmp = record.with_suffix(f".json.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_text(json.dumps(asdict(version), indent=2) + "\n")
        os.replace(tmp, record)
        _point(base, name)
        _prune(base, keep)
    return version


def _prune(base: Path, keep: int) -> None:
    """Remove all but the newest `keep` versions, never the one `latest` points at."""
    live = current(base)
    kept = versions(base)
    for version in kept[: max(0, len(kept) - keep)]:
        if live is not None and version.name == live.name:
            continue
        (base / VERSIONS / f"{version.name}.json").unlink()
        shutil.rmtree(base / VERSIONS / version.name)


def rollback(root: str | Path, to: str | None = None) -> Version:
    """Point `latest` at version `to` (default: the version before the current one).

    Raises:
        PublishError: Nothing to roll back to, or `to` is not a kept version.
    """
    base = _root(root, create=False)
    with _publish_lock(base):
        return _rollback(base, to)


def _rollback(base: Path, to: str | None) -> Version:
    kept = versions(base)
    live = current(base)
    if to is None:
        older = [v for v in kept if live is None or v.number < live.number]
        if not older:
            raise PublishError(f"{base}: no version older than {live.name if live else 'none'}")
        target = older[-1]
    else:
        match = [v for v in kept if v.name == to]
        if not match:
            names = ", ".join(v.name for v in kept) or "none"
            raise PublishError(f"{base}: no kept version {to!r} (kept: {names})")
        target = match[0]
    _point(base, target.name)
    return target


class Reloader(Generic[T]):
    """Serves the model `latest` names; takes up a new version only between steps.

    Call `current()` at the start of each step and use what it returns for the whole step.
    At most every `poll_interval` seconds (None: only on `reload()`), `current()` starts a look
    at the pointer in a background thread, which loads a new version there: no step waits for
    a load. The running version serves until the load is done; the first `current()` after it
    takes the new version up (a reference swap). A version that fails to load is refused (and
    not tried again), reported by a `ReloadWarning` from the next `current()`, and the running
    version keeps serving. `reload()` looks and loads at once, in the caller's thread (the MCP
    proxy calls it from a background task of its own).

    Args:
        root: The publish folder.
        load: Loads a model folder (e.g. ``load_retriever``).
        poll_interval: Seconds between looks at the pointer; None never polls.
        clock: The clock `poll_interval` is measured on.

    Raises:
        PublishError: Nothing is published yet, or the first version does not load.
    """

    def __init__(
        self,
        root: str | Path,
        load: Callable[[Path], T],
        *,
        poll_interval: float | None = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = _root(root, create=False)
        self.load = load
        self.poll_interval = poll_interval
        self.clock = clock
        self.refused: dict[str, str] = {}
        self._lock = threading.Lock()  # the running version, the loaded one, the reports
        self._loading = threading.Lock()  # one load at a time
        self._loader: threading.Thread | None = None
        self._loaded: tuple[T, Version] | None = None  # loaded, not taken up yet
        self._reports: list[str] = []  # background failures not warned of yet
        live = current(self.root)
        if live is None:
            raise PublishError(f"{self.root}: nothing was published here yet")
        try:
            self.model = load(self.root / VERSIONS / live.name)
        except Exception as exc:
            raise PublishError(f"{live.name} does not load: {exc}") from exc
        self.version = live
        self._previous: tuple[T, Version] | None = None
        self._checked = clock()

    def current(self) -> T:
        """The model to use for this step; a version loaded in the background is taken up.

        Once `poll_interval` has passed, it also starts a background look at the pointer
        (this step and those during the load are served by the running version).
        """
        self._take_up(stacklevel=3)
        if self.poll_interval is not None and self.clock() - self._checked >= self.poll_interval:
            with self._lock:
                if self._loader is None or not self._loader.is_alive():
                    self._checked = self.clock()
                    self._loader = threading.Thread(
                        target=self._load_in_background, name="dtdr-reload", daemon=True
                    )
                    self._loader.start()
        return self.model

    def reload(self) -> bool:
        """Look at the pointer now and load a new version here; True if one was taken up."""
        self._checked = self.clock()
        loaded, problem = self._load_new()
        if problem is not None:
            warnings.warn(problem, ReloadWarning, stacklevel=2)
        with self._lock:
            if loaded is not None:
                self._loaded = loaded
        return self._take_up(stacklevel=3)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a background load to end; True if none is running any more."""
        loader = self._loader
        if loader is not None:
            loader.join(timeout)
        return loader is None or not loader.is_alive()

    def _load_in_background(self) -> None:
        try:
            loaded, problem = self._load_new()
        except Exception as exc:  # reported, never lost with the thread
            loaded, problem = None, f"reload failed ({type(exc).__name__}: {exc})"
        with self._lock:
            if loaded is not None:
                self._loaded = loaded
            if problem is not None:
                self._reports.append(problem)

    def _load_new(self) -> tuple[tuple[T, Version] | None, str | None]:
        """The version `latest` names, loaded if it is new; or why not (None: nothing new)."""
        with self._loading:
            running = self.version.name
            try:
                live = current(self.root)
            except PublishError as exc:
                return None, f"{exc}; keeping {running}"
            with self._lock:
                if live is not None and live.name == running:
                    self._loaded = None  # the pointer moved back before the take-up
                waiting = self._loaded[1].name if self._loaded is not None else None
            if live is None or live.name in (running, waiting) or live.name in self.refused:
                return None, None
            try:
                model = self.load(self.root / VERSIONS / live.name)
            except Exception as exc:
                self.refused[live.name] = f"{type(exc).__name__}: {exc}"
                return None, (
                    f"{live.name} does not load ({self.refused[live.name]}); keeping {running}"
                )
            return (model, live), None

    def _take_up(self, *, stacklevel: int) -> bool:
        """Swap in the version loaded last, if any, and warn of background failures."""
        with self._lock:
            loaded, self._loaded = self._loaded, None
            reports, self._reports = self._reports, []
            if loaded is not None:
                self._previous = (self.model, self.version)
                self.model, self.version = loaded
        for report in reports:
            warnings.warn(report, ReloadWarning, stacklevel=stacklevel)
        return loaded is not None

    def refuse(self, reason: str) -> None:
        """Refuse the version just taken up and go back to the one before (never retried).

        A caller refuses a version that loads but does not fit it, e.g. one that ranks
        another tool catalogue than the agent's.
        """
        with self._lock:
            if self._previous is None:
                raise PublishError(
                    f"{self.version.name} is the first version: nothing to go back to"
                )
            self.refused[self.version.name] = reason
            self.model, self.version = self._previous
            self._previous = None
