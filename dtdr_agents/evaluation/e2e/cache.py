"""An append-only JSONL cache of step results, so an interrupted run resumes where it stopped.

Each line is one finished step: ``{"key": ..., "model", "retriever", "mode", "plan", "step",
...}``. A line is written whole with one ``write`` and flushed to disk (``fsync``) before the
next request's result is counted, so a crash loses at most the line being written; a partial or
unreadable line is skipped (and counted) when the cache is read back, and the next append starts
on a fresh line. Steps that got no answer (errors) are not cached: a resumed run asks again.

A selection step's line also records the prompt it answered, beyond the key's hash of it: the
bound tools and the mode's text (`dtdr_agents.evaluation.e2e.protocol.RECORDED_FIELDS`), so a
replay rebuilds that prompt rather than the one the retrievers give at replay time. Lines
written before that record only the hash; `StepCache.add_fields` fills them in.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from dtdr_agents.foundation.atomic import atomic_write_bytes

CACHE_VERSION = 1
"""Bumped when the meaning of a cached line changes (old lines are then ignored)."""


def step_key(model: str, retriever: str, mode: str, fingerprint: str) -> str:
    """The cache key of one step: model, retriever, mode and the request's content hash."""
    text = json.dumps([CACHE_VERSION, model, retriever, mode, fingerprint])
    return hashlib.sha256(text.encode()).hexdigest()


class StepCache:
    """Append-only JSONL file of step results, keyed by `step_key`.

    Args:
        path: The file (created with its folder on the first write).

    Attributes:
        skipped_lines: Lines that could not be read (e.g. cut by an interruption).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._rows: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.skipped_lines = 0
        self._needs_newline = False
        self._load()

    def _load(self) -> None:
        if not self.path.is_file():
            return
        data = self.path.read_bytes()
        self._needs_newline = bool(data) and not data.endswith(b"\n")
        for line in data.splitlines():
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                self.skipped_lines += 1
                continue
            if isinstance(row, dict) and isinstance(row.get("key"), str):
                self._rows[row["key"]] = row
            else:
                self.skipped_lines += 1

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached row of `key`, if any."""
        return self._rows.get(key)

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every cached row, in the order their keys first appear in the file."""
        return iter(list(self._rows.values()))

    def add_fields(self, fields: Mapping[str, Mapping[str, Any]]) -> int:
        """Add `fields` (by row key) to the rows that lack them, rewriting the file atomically.

        Only new fields are added: a field a row already has keeps its value. Every other
        line stays byte for byte as it was, in its place (unreadable ones too). Nothing is
        written when no row gains a field.

        Returns:
            The lines that gained fields.
        """
        with self._lock:
            if not self.path.is_file():
                return 0
            lines = self.path.read_bytes().splitlines(keepends=True)
            changed = 0
            for i, line in enumerate(lines):
                try:
                    row = json.loads(line)
                except (ValueError, UnicodeDecodeError):
                    continue
                key = row.get("key") if isinstance(row, dict) else None
                extra = fields.get(key) if isinstance(key, str) else None
                new = {k: v for k, v in (extra or {}).items() if k not in row}
                if new:
                    row.update(new)
                    lines[i] = (json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n").encode()
                    changed += 1
            if changed:
                atomic_write_bytes(self.path, b"".join(lines))
                self._rows.clear()
                self.skipped_lines = 0
                self._load()
            return changed

    def add(self, row: Mapping[str, Any]) -> None:
        """Append `row` (it must hold its ``key``) and flush it to disk."""
        key = row.get("key")
        if not isinstance(key, str):
            raise ValueError("a cached row needs a string 'key'")
        line = json.dumps(dict(row), ensure_ascii=False, sort_keys=True) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                if self._needs_newline:
                    fh.write("\n")
                    self._needs_newline = False
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
            self._rows[key] = dict(row)


__all__ = ["CACHE_VERSION", "StepCache", "step_key"]
