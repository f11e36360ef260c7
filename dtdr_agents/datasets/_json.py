"""Reading JSON and JSON-lines dataset files, knowing the line of every record (internal).

Big JSON documents (an array or an object of records) are streamed with ``ijson``, the kept
incremental parser: the file is fed to it a line at a time (at most `_CHUNK` characters), so
memory stays at about one record plus one chunk, and the line every record starts on is
known. A syntax error cannot be skipped safely inside one document, so it always raises
`DatasetFormatError` naming the file and line.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import IO, Any, Protocol

import ijson  # type: ignore[import-untyped]
from ijson.common import ObjectBuilder  # type: ignore[import-untyped]

from dtdr_agents.foundation.errors import DatasetFormatError

_CHUNK = 1 << 16
"""Characters fed to the parser at a time (a line, or a piece of a longer one)."""

BEING_WRITTEN = "; the last line has no trailing newline: a record being written"
"""How `iter_jsonl` ends the problem of a partial last line (a live recording's)."""


class Reporter(Protocol):
    """What `iter_jsonl` needs of a `Report`."""

    def malformed(self, message: str, path: Path | str, line: int | None) -> None: ...

    def skipped(self, message: str, path: Path | str, line: int | None = None) -> None: ...


def open_text(path: Path) -> IO[str]:
    """Open a dataset file as UTF-8 text; a leading byte-order mark (BOM) is skipped."""
    return path.open(encoding="utf-8-sig")


def utf8_error(path: Path) -> DatasetFormatError:
    """The error for a file that is not UTF-8, naming the line of its first bad byte."""
    data = path.read_bytes()  # only on the error path
    body = data[3:] if data.startswith(codecs.BOM_UTF8) else data
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = body.rfind(b"\n", 0, exc.start) + 1
        return DatasetFormatError(
            f"not UTF-8 text: byte 0x{body[exc.start]:02x} at column {exc.start - line_start + 1}"
            " (save the file as UTF-8)",
            str(path),
            body.count(b"\n", 0, exc.start) + 1,
        )
    return DatasetFormatError("not UTF-8 text (save the file as UTF-8)", str(path))


def read_text(path: Path) -> str:
    """The whole (small) file as text; a file that is not UTF-8 names its first bad line."""
    try:
        with open_text(path) as fh:
            return fh.read()
    except UnicodeDecodeError:
        raise utf8_error(path) from None


def read_json(path: Path) -> Any:
    """Parse a whole (small) JSON document; syntax errors name the file and line."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetFormatError(f"invalid JSON: {exc.msg}", str(path), exc.lineno) from None


def iter_jsonl(path: Path, report: Reporter) -> Iterator[tuple[int, Any]]:
    """Stream a JSON-lines file: yield ``(line_number, value)`` for every non-blank line.

    A line that is not valid JSON or not UTF-8 (e.g. a Latin-1 byte, or a line torn by a
    killed writer) goes through `Report.malformed` (raise, or skip it), except the last line
    when it has no trailing newline: that is a record still being written (a live recording),
    skipped and reported. A leading UTF-8 byte-order mark is accepted.
    """
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            torn = not raw.endswith(b"\n")  # only a last line can lack its newline
            problem = report.skipped if torn else report.malformed
            being_written = BEING_WRITTEN * torn
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError as exc:
                problem(
                    f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at column {exc.start + 1}"
                    + being_written,
                    path,
                    lineno,
                )
                continue
            if not text:
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                problem(
                    f"invalid JSON: {exc.msg} (column {exc.colno}){being_written}", path, lineno
                )
                continue
            yield lineno, value


def first_char(path: Path) -> str | None:
    """The first non-whitespace character of a text file (None if it is empty)."""
    return _head(path)[0]


def _head(path: Path) -> tuple[str | None, int]:
    """The first non-whitespace character of a text file (None if empty) and its line."""
    line = 1
    with path.open("rb") as fh:
        chunk = fh.read(4096).removeprefix(codecs.BOM_UTF8)
        while chunk:
            stripped = chunk.lstrip()
            line += chunk.count(b"\n", 0, len(chunk) - len(stripped))
            if stripped:
                return (chr(stripped[0]) if stripped[0] < 0x80 else "?"), line
            chunk = fh.read(4096)
    return None, line


def _events(path: Path) -> Iterator[tuple[int, str, Any]]:
    """``(line, event, value)`` of every ijson parse event; a syntax error raises."""
    events = ijson.utils.sendable_list()
    parser = ijson.basic_parse_coro(events)
    line = 1
    with open_text(path) as fh:
        while piece := fh.readline(_CHUNK):
            try:
                parser.send(piece.encode("utf-8"))
            except ijson.JSONError as exc:
                raise _syntax_error(exc, path, line) from None
            for event, value in events:
                yield line, event, float(value) if isinstance(value, Decimal) else value
            del events[:]
            line += piece.endswith("\n")
    try:
        parser.close()
    except ijson.JSONError as exc:
        raise _syntax_error(exc, path, line) from None
    yield from ((line, event, value) for event, value in events)


def _syntax_error(exc: Exception, path: Path, line: int) -> DatasetFormatError:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    reason = reason.removeprefix("parse error: ").removeprefix("lexical error: ")
    if reason == "trailing garbage":
        reason = "unexpected data after the end of the document"
    elif reason == "premature EOF":
        reason = "unexpected end of file"
    return DatasetFormatError(f"invalid JSON: {reason}", str(path), line)


def _records(path: Path, container: str) -> Iterator[tuple[str | None, int, Any]]:
    """``(key, line, value)`` of each member of the top-level array or object of `path`."""
    end = "end_array" if container == "[" else "end_map"
    kind = "a JSON array" if container == "[" else "a JSON object"
    depth = 0
    key: str | None = None
    builder: Any = None
    first = 0
    head, line = _head(path)
    if head != container:
        got = "end of file" if head is None else repr(head)
        raise DatasetFormatError(
            f"invalid JSON: expected {container!r} at the start of the file ({kind}), got {got}",
            str(path),
            line,
        )
    for line, event, value in _events(path):
        if depth == 0:  # the opening bracket
            depth = 1
            continue
        if depth == 1:
            if event == end:
                depth = -1  # the document is complete; ijson rejects anything after it
                continue
            if event == "map_key":
                key = value
                continue
            builder, first = ObjectBuilder(), line
        builder.event(event, value)
        depth += event in ("start_map", "start_array")
        depth -= event in ("end_map", "end_array")
        if depth == 1:
            yield key, first, builder.value


def iter_json_array(path: Path) -> Iterator[tuple[int, int, Any]]:
    """Stream a JSON array file: yield ``(index, line, item)`` for each element."""
    try:
        for index, (_, line, item) in enumerate(_records(path, "[")):
            yield index, line, item
    except UnicodeDecodeError:
        raise utf8_error(path) from None


def iter_json_object(path: Path) -> Iterator[tuple[str, int, Any]]:
    """Stream a JSON object file: yield ``(key, line, value)`` for each member."""
    try:
        for key, line, value in _records(path, "{"):
            yield str(key), line, value
    except UnicodeDecodeError:
        raise utf8_error(path) from None


def iter_records(path: Path, report: Reporter) -> Iterator[tuple[int, int, Any]]:
    """Stream the records of a JSON array file or a JSON-lines file.

    Yields ``(index, line, record)``; the container is detected from the first character
    (``[`` means a JSON array, anything else JSON lines).
    """
    if first_char(path) == "[":
        yield from iter_json_array(path)
    else:
        for index, (line, value) in enumerate(iter_jsonl(path, report)):
            yield index, line, value
