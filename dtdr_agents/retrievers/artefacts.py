"""Files a request hands over, and which tools can take them: the request as a producer.

A request that names a file ("I have an image 'example.jpg'") gives the plan an artefact of a
media kind (`MEDIA_EXTENSIONS`), as a call that returns an image does. A tool needs a kind
when one of its required parameters is an artefact of it (`media_kind`: ``image``,
``image_2``, ``audio_file``, ``video_url``; not ``image_type`` or ``video_id``), and gives the
kinds its declared outputs are. `ArtefactFlow.flow` then scores a tool at a step:

* +1 when it takes a kind the request gave and no call made has taken yet (the user's file
  is there to be used: on TaskBench-HF 98% of the plans whose request names a file use it);
* -1 when it needs a kind that neither the request nor a call made gives (it cannot run
  yet: 2 of 673 gold steps of a TaskBench-HF test split are such tools);
* 0 otherwise, and for a tool that does both.

A catalogue without artefact parameters (most JSON-schema catalogues: Seal-Tools, NESTFUL)
scores every tool 0, so the hybrid ranks as it would without it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from dtdr_agents.foundation.clauses import words
from dtdr_agents.foundation.types import Tool

MEDIA_EXTENSIONS: Mapping[str, tuple[str, ...]] = {
    "image": ("jpg", "jpeg", "png", "gif", "bmp", "webp", "tif", "tiff", "svg"),
    "audio": ("wav", "mp3", "flac", "ogg", "m4a", "aac", "opus"),
    "video": ("mp4", "avi", "mov", "mkv", "webm", "mpeg"),
}
"""The media kinds a request can hand over as a file, and the file extensions that name them."""

KINDS: tuple[str, ...] = tuple(MEDIA_EXTENSIONS)
"""The kinds in bit order (kind ``KINDS[i]`` is bit ``1 << i`` of a mask)."""

HANDLE_WORDS = frozenset({"file", "path", "url", "uri", "link", "data", "bytes", "base64"})
"""A last word that names how an artefact is passed (``image_path``): the name is still its
kind's."""

_FILE = re.compile(
    r"\.(" + "|".join(e for exts in MEDIA_EXTENSIONS.values() for e in exts) + r")\b",
    re.IGNORECASE,
)
_KIND_OF_EXTENSION = {e: kind for kind, exts in MEDIA_EXTENSIONS.items() for e in exts}
_BIT = {kind: 1 << i for i, kind in enumerate(KINDS)}


def media_kind(name: str) -> str | None:
    """The media kind a parameter or output name denotes (``image_2``, ``audio_file``), or None.

    The name's words, less a numeric suffix and a last `HANDLE_WORDS` word, must be the kind
    alone: ``image_type``, ``image_height`` and ``video_id`` denote none.
    """
    found = [w for w in words(str(name)) if not w.isdigit()]
    if len(found) == 2 and found[1] in HANDLE_WORDS:
        found = found[:1]
    return found[0] if len(found) == 1 and found[0] in _BIT else None


def kinds_mask(kinds: Iterable[str]) -> int:
    """The bit mask of media kinds (names outside `KINDS` are ignored)."""
    mask = 0
    for kind in kinds:
        mask |= _BIT.get(kind, 0)
    return mask


def request_media(text: str) -> int:
    """The mask of media kinds whose files `text` names (by extension: ``example.jpg``)."""
    return kinds_mask(_KIND_OF_EXTENSION[m.lower()] for m in _FILE.findall(text))


def tool_needs(tool: Tool) -> int:
    """The mask of media kinds its required parameters take (all of them without ``required``)."""
    props = tool.parameters.get("properties")
    if not isinstance(props, Mapping):
        return 0
    required = tool.parameters.get("required")
    names = list(required) if isinstance(required, (list, tuple)) else list(props)
    return kinds_mask(k for k in map(media_kind, names) if k is not None)


def tool_gives(tool: Tool) -> int:
    """The mask of media kinds among `tool`'s declared outputs (`Tool.outputs`)."""
    return kinds_mask(k for k in map(media_kind, tool.outputs) if k is not None)


class ArtefactFlow:
    """Each tool's media needs and gives over a catalogue, and the per-step `flow`."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        """Read the needs and gives of every tool of `tools`.

        `names` and `catalogue_needs` keep the tools' names and needs masks in their order.
        """
        self._needs: dict[str, int] = {}
        self._gives: dict[str, int] = {}
        names: list[str] = []
        for tool in tools:
            names.append(tool.name)
            if needs := tool_needs(tool):
                self._needs[tool.name] = needs
            if gives := tool_gives(tool):
                self._gives[tool.name] = gives
        self.names: tuple[str, ...] = tuple(names)
        self.catalogue_needs: np.ndarray = self.needs(self.names)

    def __bool__(self) -> bool:
        """Whether any tool needs a media kind (else every `flow` is 0)."""
        return bool(self._needs)

    def needs(self, names: Sequence[str]) -> np.ndarray:
        """The needs masks of the named tools (0 for a name not in the catalogue)."""
        return np.fromiter((self._needs.get(n, 0) for n in names), np.int64, len(names))

    def state(self, given: int, history: Iterable[str]) -> tuple[int, int]:
        """(kinds available, kinds the request gave that no call has taken) after `history`.

        Args:
            given: `request_media` of the request.
            history: The calls made so far, in order.
        """
        available, untaken = given, given
        for name in history:
            available |= self._gives.get(name, 0)
            untaken &= ~self._needs.get(name, 0)
        return available, untaken

    def flow(self, needs: np.ndarray, available: int, untaken: int) -> np.ndarray:
        """Each tool's flow (+1 takes an untaken given kind, -1 needs a missing kind, else 0).

        Args:
            needs: The tools' needs masks (`needs`).
            available: The kinds available at the step (`state`).
            untaken: The given kinds no call has taken yet (`state`).
        """
        takes = (needs & untaken) != 0
        blocked = (needs & ~available) != 0
        out: np.ndarray = takes.astype(np.float64) - blocked.astype(np.float64)
        return out


__all__ = [
    "HANDLE_WORDS",
    "KINDS",
    "MEDIA_EXTENSIONS",
    "ArtefactFlow",
    "kinds_mask",
    "media_kind",
    "request_media",
    "tool_gives",
    "tool_needs",
]
