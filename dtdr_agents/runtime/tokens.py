"""Token counts of prompts and tool schemas, and which counter produced them.

Counters, in order: `tiktoken` when its encoding is available offline, else the WordPiece
tokenizer of the bundled all-MiniLM-L6-v2 model (an approximation of a chat model's tokenizer),
else ``ceil(chars / 4)``. Every count says which counter produced it (`TokenCounter.note`).

Offline means: downloads are off (the default; ``DTDR_AGENTS_ALLOW_DOWNLOADS=1`` or
``allow_download=True`` turns them on) and tiktoken's cache folder, which its public setting
``TIKTOKEN_CACHE_DIR`` names, holds the encoding. Without that setting, tiktoken is not tried
offline (it would download on first use, and a download may hang), and the note says so.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cachetools import LRUCache

from dtdr_agents.foundation.errors import EncoderUnavailableError
from dtdr_agents.foundation.types import Tool, Toolset


class TokenCounter(Protocol):
    """Counts the tokens of a text."""

    @property
    def name(self) -> str:
        """Which counter this is, e.g. ``"tiktoken:o200k_base"``."""
        ...

    @property
    def exact(self) -> bool:
        """True for a chat model's own tokenizer (tiktoken), False for an approximation."""
        ...

    @property
    def note(self) -> str:
        """Why this counter was chosen (e.g. why tiktoken was not used)."""
        ...

    def count(self, text: str) -> int:
        """Number of tokens of `text`."""
        ...


@dataclass
class TiktokenCounter:
    """OpenAI's tokenizer through `tiktoken` (exact for OpenAI models).

    Args:
        encoding: A tiktoken encoding object.
        encoding_name: Its name.
    """

    encoding: Any
    encoding_name: str
    note: str = "tiktoken encoding available"
    exact: bool = True

    @property
    def name(self) -> str:
        """``tiktoken:<encoding>``."""
        return f"tiktoken:{self.encoding_name}"

    def count(self, text: str) -> int:
        """Number of tokens of `text`."""
        return len(self.encoding.encode(text, disallowed_special=()))


@dataclass
class WordPieceCounter:
    """The WordPiece tokenizer of the bundled all-MiniLM-L6-v2 model (an approximation).

    BERT's uncased WordPiece vocabulary (30k entries) splits English text and JSON into about
    as many tokens as a chat model's BPE tokenizer, within roughly 10-25%.

    Args:
        tokenizer: A `tokenizers.Tokenizer`.
    """

    tokenizer: Any
    note: str = ""
    name: str = "wordpiece:all-MiniLM-L6-v2"
    exact: bool = False

    def count(self, text: str) -> int:
        """Number of tokens of `text` (without the [CLS]/[SEP] markers)."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


@dataclass
class CharApproxCounter:
    """``ceil(len(text) / 4)``: OpenAI's rule of thumb for English text (an approximation)."""

    note: str = ""
    name: str = "approx:chars/4"
    exact: bool = False

    def count(self, text: str) -> int:
        """Approximate number of tokens of `text`."""
        return math.ceil(len(text) / 4)


TIKTOKEN_ENCODINGS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}
"""The tiktoken encodings a counter may use, with the address tiktoken downloads each from."""

_COUNTERS: dict[tuple[str, bool], TokenCounter] = {}
_COUNTERS_LOCK = threading.Lock()


def tiktoken_offline_problem(encoding: str) -> str | None:
    """Why tiktoken cannot load `encoding` without the network, or None when it can.

    tiktoken reads its encodings from the folder its public setting ``TIKTOKEN_CACHE_DIR``
    names, one file per encoding named by the SHA-1 of the address it is downloaded from
    (`TIKTOKEN_ENCODINGS`); copying a cache filled on a connected machine there makes tiktoken
    work offline. Without the setting, tiktoken would download on first use, so it is not
    tried while downloads are off.
    """
    url = TIKTOKEN_ENCODINGS.get(encoding)
    if url is None:
        return f"tiktoken encoding {encoding!r} is not one of {sorted(TIKTOKEN_ENCODINGS)}"
    folder = os.environ.get("TIKTOKEN_CACHE_DIR")
    if not folder:
        return (
            f"tiktoken encoding {encoding!r} is not cached and downloads are off "
            "(TIKTOKEN_CACHE_DIR is unset: set it to a tiktoken cache folder, or set "
            "DTDR_AGENTS_ALLOW_DOWNLOADS=1 or pass allow_download=True)"
        )
    if not (Path(folder) / hashlib.sha1(url.encode()).hexdigest()).is_file():
        return (
            f"tiktoken encoding {encoding!r} is not cached and downloads are off (not in "
            f"TIKTOKEN_CACHE_DIR={folder}; set DTDR_AGENTS_ALLOW_DOWNLOADS=1 or pass "
            "allow_download=True)"
        )
    return None


def _load_tiktoken(encoding: str, allow_download: bool) -> tuple[TokenCounter | None, str]:
    try:
        import tiktoken
    except ImportError:
        return None, "tiktoken is not installed (pip install 'dtdr-agents[tokens]')"
    problem = None if allow_download else tiktoken_offline_problem(encoding)
    if problem is not None:
        return None, problem
    try:
        enc = tiktoken.get_encoding(encoding)
    except Exception as exc:  # network errors, corrupt cache, unknown encoding
        return None, f"tiktoken could not load {encoding!r}: {type(exc).__name__}: {exc}"[:300]
    return TiktokenCounter(enc, encoding), "tiktoken encoding available"


def _load_wordpiece(note: str = "") -> tuple[TokenCounter | None, str]:
    from dtdr_agents.foundation.encoders import bundled_minilm_path

    root = bundled_minilm_path()
    if root is None or not (Path(root) / "tokenizer.json").is_file():
        return None, "the bundled all-MiniLM-L6-v2 tokenizer is not installed"
    try:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(Path(root) / "tokenizer.json"))
        tok.no_truncation()
        tok.no_padding()
    except Exception as exc:
        return None, f"could not load the MiniLM tokenizer: {type(exc).__name__}: {exc}"[:300]
    return WordPieceCounter(tok, note=note), ""


def get_token_counter(prefer: str = "auto", *, allow_download: bool | None = None) -> TokenCounter:
    """Resolve a token counter (cached per process).

    Args:
        prefer: ``"auto"`` (tiktoken ``o200k_base`` if available offline, else the MiniLM
            WordPiece tokenizer, else ``chars/4``), ``"tiktoken"`` or a tiktoken encoding name
            (``"o200k_base"``, ``"cl100k_base"``), ``"wordpiece"``, or ``"approx"``.
        allow_download: Let tiktoken download its encoding. None reads the environment
            variable ``DTDR_AGENTS_ALLOW_DOWNLOADS`` (``"1"`` allows); off by default.

    Returns:
        The counter; its `name` and `note` say which one it is and why.

    Raises:
        EncoderUnavailableError: If a specific counter was asked for and cannot load.
        ValueError: If `prefer` is unknown.
    """
    if allow_download is None:
        allow_download = os.environ.get("DTDR_AGENTS_ALLOW_DOWNLOADS", "") == "1"
    key = (prefer, allow_download)
    with _COUNTERS_LOCK:
        cached = _COUNTERS.get(key)
        if cached is not None:
            return cached
        counter = _resolve_counter(prefer, allow_download)
        _COUNTERS[key] = counter
        return counter


def _resolve_counter(prefer: str, allow_download: bool) -> TokenCounter:
    if prefer == "approx":
        return CharApproxCounter(note="asked for")
    if prefer == "wordpiece":
        wp, why = _load_wordpiece()
        if wp is None:
            raise EncoderUnavailableError(why)
        return wp
    if prefer == "tiktoken" or prefer in TIKTOKEN_ENCODINGS:
        encoding = "o200k_base" if prefer == "tiktoken" else prefer
        tk, why = _load_tiktoken(encoding, allow_download)
        if tk is None:
            raise EncoderUnavailableError(why)
        return tk
    if prefer != "auto":
        raise ValueError(
            f"unknown token counter {prefer!r}; choose 'auto', 'tiktoken', "
            f"{', '.join(repr(e) for e in TIKTOKEN_ENCODINGS)}, 'wordpiece' or 'approx'"
        )
    tk, why_tk = _load_tiktoken("o200k_base", allow_download)
    if tk is not None:
        return tk
    wp, why_wp = _load_wordpiece(note=f"fallback: {why_tk}")
    if wp is not None:
        return wp
    return CharApproxCounter(note=f"fallback: {why_tk}; {why_wp}")


def count_tokens(text: str, counter: TokenCounter | None = None) -> int:
    """Tokens of `text` with `counter` (default: `get_token_counter()`)."""
    return (counter or get_token_counter()).count(text)


def tool_schema_tokens(tool: Tool, counter: TokenCounter | None = None) -> int:
    """Tokens of a tool's OpenAI schema as JSON (a proxy for what a provider puts in the prompt)."""
    return count_tokens(json.dumps(tool.to_openai(), ensure_ascii=False), counter)


class _SchemaTokenCache:
    """Per-counter memo of tool schema token counts (schemas do not change within a catalogue)."""

    def __init__(self, max_items: int = 100_000) -> None:
        self._memo: LRUCache[tuple[str, str], int] = LRUCache(maxsize=max_items)
        self._lock = threading.Lock()

    def get(self, tool: Tool, counter: TokenCounter) -> int:
        key = (counter.name, json.dumps(tool.to_dict(), sort_keys=True, ensure_ascii=False))
        with self._lock:
            hit = self._memo.get(key)
        if hit is not None:
            return hit
        n = tool_schema_tokens(tool, counter)
        with self._lock:
            self._memo[key] = n
        return n


_SCHEMA_TOKENS = _SchemaTokenCache()


def catalogue_schema_tokens(catalogue: Toolset, counter: TokenCounter) -> dict[str, int]:
    """Schema token counts of every tool of `catalogue` (memoised per tool and counter)."""
    return {t.name: _SCHEMA_TOKENS.get(t, counter) for t in catalogue}


__all__ = [
    "TIKTOKEN_ENCODINGS",
    "CharApproxCounter",
    "TiktokenCounter",
    "TokenCounter",
    "WordPieceCounter",
    "catalogue_schema_tokens",
    "count_tokens",
    "get_token_counter",
    "tiktoken_offline_problem",
    "tool_schema_tokens",
]
