"""The embedding cache: an in-process LRU (cachetools) in front of an optional SQLite file."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from cachetools import LRUCache

from dtdr_agents.foundation.encoders.base import Encoder, EncoderWrapper


def default_cache_dir() -> Path:
    """Where on-disk embedding caches live: `$DTDR_AGENTS_CACHE_DIR` or the XDG cache folder."""
    env = os.environ.get("DTDR_AGENTS_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dtdr-agents"


class _VectorLRU(LRUCache[str | bytes, np.ndarray]):
    """An LRU of vectors bounded both by count and by bytes.

    Each entry counts its vector, a key allowance (`key_bytes`) and 64 bytes of overhead.
    """

    def __init__(self, max_items: int, max_bytes: int, *, key_bytes: int) -> None:
        super().__init__(maxsize=max_bytes, getsizeof=lambda vec: key_bytes + int(vec.nbytes) + 64)
        self.max_items = max_items

    def put(self, key: str | bytes, vec: np.ndarray) -> None:
        """Store `vec` (most recently used), dropping the least recently used beyond a bound."""
        if self.max_items <= 0 or self.getsizeof(vec) > self.maxsize:
            self.pop(key, None)  # too large to keep at all
            return
        self[key] = vec
        while len(self) > self.max_items:
            self.popitem()


class CachedEncoder(EncoderWrapper):
    """Wraps an encoder with an in-process cache and, optionally, an on-disk cache.

    The disk cache is a SQLite file keyed by encoder id and the SHA-1 of each text, so it is
    shared safely between runs and processes and never unpickles anything.

    Args:
        inner: The encoder to cache.
        cache_dir: Folder of the on-disk cache, or None for memory only.
        max_items: In-process cache size (least recently used texts are dropped).
        max_bytes: In-process cache memory bound (vectors and keys; texts longer than
            `LONG_TEXT` characters are kept as a 32-byte digest, not the text, so each key is
            counted as `LONG_TEXT` bytes at most).
    """

    LONG_TEXT = 256
    """Texts longer than this are remembered by their SHA-256 digest."""

    def __init__(
        self,
        inner: Encoder,
        *,
        cache_dir: str | Path | None = None,
        max_items: int = 200_000,
        max_bytes: int = 128 * 2**20,
    ) -> None:
        super().__init__(inner)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._memory = _VectorLRU(max_items, max_bytes, key_bytes=self.LONG_TEXT)
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self.hits = 0
        self.misses = 0

    def _connect(self) -> sqlite3.Connection | None:
        if self.cache_dir is None:
            return None
        if self._db is None:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                self.cache_dir / "embeddings.sqlite", check_same_thread=False, timeout=30
            )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS emb (encoder TEXT, key TEXT, vec BLOB, "
                "PRIMARY KEY (encoder, key))"
            )
            self._db = db
        return self._db

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha1(text.encode("utf-8")).hexdigest()

    @classmethod
    def _memory_key(cls, text: str) -> str | bytes:
        return text if len(text) <= cls.LONG_TEXT else hashlib.sha256(text.encode()).digest()

    @property
    def memory_bytes(self) -> int:
        """Approximate bytes held by the in-process cache (keys and vectors)."""
        return int(self._memory.currsize)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed `texts`, computing only those not cached."""
        with self._lock:
            found: dict[str, np.ndarray] = {}
            missing: list[str] = []
            for text in dict.fromkeys(texts):
                key = self._memory_key(text)
                vec = self._memory.get(key)
                if vec is None:
                    missing.append(text)
                else:
                    found[text] = vec
            self.hits += len(found)
            if missing:
                found.update(self._from_disk(missing))
                todo = [t for t in missing if t not in found]
                self.misses += len(todo)
                if todo:
                    fresh = self.inner.encode(todo)
                    new = dict(zip(todo, fresh, strict=True))
                    found.update(new)
                    self._to_disk(new)
                for text in missing:
                    self._memory.put(self._memory_key(text), found[text])
            if not texts:
                return np.zeros((0, self.dim), dtype=np.float32)
            return np.stack([found[t] for t in texts]).astype(np.float32, copy=False)

    def _from_disk(self, texts: list[str]) -> dict[str, np.ndarray]:
        db = self._connect()
        if db is None:
            return {}
        keys = {self._key(t): t for t in texts}
        out: dict[str, np.ndarray] = {}
        key_list = list(keys)
        for start in range(0, len(key_list), 500):
            chunk = key_list[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = db.execute(
                f"SELECT key, vec FROM emb WHERE encoder = ? AND key IN ({marks})",
                [self.id, *chunk],
            ).fetchall()
            for key, blob in rows:
                out[keys[key]] = np.frombuffer(blob, dtype=np.float32).copy()
        return out

    def _to_disk(self, vectors: Mapping[str, np.ndarray]) -> None:
        db = self._connect()
        if db is None or not vectors:
            return
        with db:
            db.executemany(
                "INSERT OR REPLACE INTO emb (encoder, key, vec) VALUES (?, ?, ?)",
                [
                    (self.id, self._key(t), np.asarray(v, np.float32).tobytes())
                    for t, v in vectors.items()
                ],
            )

    def __repr__(self) -> str:
        return f"CachedEncoder({self.inner!r}, cache_dir={self.cache_dir!r})"
