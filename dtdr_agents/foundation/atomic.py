"""Atomic writes of files and folders: a reader sees the old content or the new, never a mix."""

from __future__ import annotations

import ctypes
import errno
import glob
import os
import re
import secrets
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from dtdr_agents.foundation.errors import DTDRError


class ForeignFolderError(DTDRError, FileExistsError):
    """A save would replace a folder that holds something this package did not write."""


ReplaceCheck = Callable[[Path], str | None]
"""Why an existing folder may not be replaced by a save, or None when it may."""


def _fsync_write(path: Path, content: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(content)
        fh.flush()
        os.fsync(fh.fileno())


def atomic_write_bytes(path: str | Path, content: bytes) -> Path:
    """Write a file atomically (a temporary file in the same folder, then a rename)."""
    path = Path(path).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write a UTF-8 text file atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def _relative(name: str) -> PurePosixPath:
    rel = PurePosixPath(name)
    if rel.is_absolute() or not rel.parts or any(p in ("", ".", "..") for p in rel.parts):
        raise ValueError(f"file name {name!r} must be a relative path inside the folder")
    return rel


_TOKEN_HEX = 8
"""Hex digits of the random token in the names of a save's own temporary folders."""


def _own_name(prefix: str) -> str:
    """`prefix` + this process's id + a random token: a name only this save uses."""
    return f"{prefix}{os.getpid()}-{secrets.token_hex(_TOKEN_HEX // 2)}"


def _make_dir(parent: Path, prefix: str) -> Path:
    """A new, empty folder whose mode follows the umask (unlike `tempfile.mkdtemp`'s 0700)."""
    for _ in range(100):
        path = parent / _own_name(prefix)
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"could not create a temporary folder in {parent}")


@contextmanager
def _save_lock(parent: Path) -> Iterator[None]:
    """Serialise saves into `parent` (an advisory lock on the folder; readers take none)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: saves are not serialised
        yield
        return
    fd = os.open(parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _leftovers(parent: Path, name: str) -> list[Path]:
    """Folders beside `name` named as a save names its own (`.NAME.tmp-PID-TOKEN`, `.old-`).

    A save that was killed leaves one. They are listed, never removed: a name alone cannot
    tell such a folder from one of the user's that happens to look the same.
    """
    own = re.compile(rf"\.{re.escape(name)}\.(?:tmp|old)-[0-9]+-[0-9a-f]{{{_TOKEN_HEX}}}")
    return sorted(
        p
        for p in parent.glob(f".{glob.escape(name)}.*-*")
        if own.fullmatch(p.name) and p.is_dir() and not p.is_symlink()
    )


def _report_leftovers(parent: Path, target: Path) -> None:
    """Warn about what killed saves may have left beside `target` (removed by nobody)."""
    found = _leftovers(parent, target.name)
    if found:
        names = ", ".join(p.name for p in found)
        warnings.warn(
            f"{target}: an interrupted save may have left {names} in {parent}; nothing was "
            "removed (a save removes only the folders it made itself): remove them yourself "
            "once you have checked them",
            stacklevel=3,
        )


def _swap_dirs(new: Path, target: Path) -> bool:
    """Exchange two folders in one atomic step (Linux `renameat2(RENAME_EXCHANGE)`).

    Returns False when the system cannot (another OS, an old kernel or file system).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
    renameat2.argtypes.append(ctypes.c_uint)
    if renameat2(at_fdcwd, os.fsencode(new), at_fdcwd, os.fsencode(target), rename_exchange):
        err = ctypes.get_errno()
        if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            return False
        raise OSError(err, os.strerror(err), str(target))
    return True


def only_empty(folder: Path) -> str | None:
    """The default `ReplaceCheck`: only an empty folder may be replaced."""
    try:
        with os.scandir(folder) as entries:
            first = next(iter(entries), None)
    except OSError as exc:
        return f"cannot list it ({exc.strerror})"
    return None if first is None else f"it holds {first.name!r}"


def resolve_target(target: str | Path) -> Path:
    """The absolute folder a write to `target` replaces (".", ".." and "" resolved)."""
    path = Path(target).expanduser()
    if path.name in ("", ".", ".."):
        return path.resolve()
    return path.parent.resolve() / path.name


def check_target(target: Path, replaceable: ReplaceCheck) -> None:
    """Refuse a write that would replace something not ours (`target` from `resolve_target`).

    Raises:
        ForeignFolderError: If `target` is a symbolic link or not a folder, would be made
            inside a file, is or holds the current working folder, or exists and
            `replaceable` gives a reason against it.
    """
    for ancestor in (target.parent, *target.parent.parents):
        if ancestor.exists():  # the nearest existing one: a folder is made inside it
            if not ancestor.is_dir():
                raise ForeignFolderError(
                    f"{ancestor} is a file, not a folder, so {target} cannot be made inside "
                    "it; nothing was written"
                )
            break
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise ForeignFolderError(f"{target} exists and is not a folder; nothing was written")
    if not target.exists():
        return
    try:
        cwd = Path.cwd().resolve()
    except OSError:
        cwd = None
    if cwd is not None and (cwd == target or target in cwd.parents):
        raise ForeignFolderError(
            f"{target} is the current working folder or holds it; a save replaces the whole "
            "folder, so name a new sub-folder instead (e.g. -o model); nothing was written"
        )
    reason = replaceable(target)
    if reason is not None:
        raise ForeignFolderError(
            f"{target} exists and is not a model folder that a save may replace ({reason}); "
            "nothing was written: choose a new folder, or remove it yourself"
        )


def _dispose(old: Path, target: Path, replaceable: ReplaceCheck) -> None:
    """Remove the previous version `old` of `target` if it is still replaceable.

    Something that appeared in it since the check is kept: the folder is renamed to a
    visible `NAME.replaced-*` sibling and a warning names it.
    """
    if replaceable(old) is None:
        shutil.rmtree(old, ignore_errors=True)
        return
    kept = target.parent / _own_name(f"{target.name}.replaced-")
    os.replace(old, kept)
    warnings.warn(
        f"{target}: files appeared in the previous version while it was replaced; it was "
        f"kept as {kept}",
        stacklevel=3,
    )


def atomic_write_dir(
    target: str | Path,
    files: Mapping[str, bytes],
    *,
    replaceable: ReplaceCheck = only_empty,
) -> Path:
    """Write `files` (relative path -> content) as the folder `target`, all or nothing.

    Nothing that this write did not make is deleted. An existing `target` is replaced only
    when `replaceable(target)` returns None (by default: only an empty folder); otherwise,
    and when `target` is or holds the current working folder, the write is refused before
    anything is written. The previous version is checked again before it is removed.

    The folder is built completely beside the target (`.NAME.tmp-*`), then made visible in
    one atomic step: a rename when `target` does not exist, else an atomic exchange of the
    two folders (Linux `renameat2(RENAME_EXCHANGE)`), after which the old content is
    removed. A reader that holds the folder open keeps reading one complete version (see
    `dtdr_agents.foundation.persistence.read_model`). Saves into the same parent folder are
    serialised by an advisory lock. A save removes only what it made itself (the folders it
    named with its process id and a random token, and the previous version it replaced);
    folders named like those that a killed save may have left are named in a warning,
    never removed. Where the exchange is not available the old folder is first renamed
    aside (`.NAME.old-*`): a reader in between retries, and a save killed in between leaves
    the old folder there. A write that fails leaves the previous version in place and no
    temporary folder.

    Relative paths may name sub-folders ("base/manifest.json"). Folders and files follow
    the umask.

    Raises:
        ForeignFolderError: If `target` is not a folder, is or holds the current working
            folder, or may not be replaced (the reason is given); nothing is written.
    """
    target = resolve_target(target)
    checked = {name: _relative(name) for name in files}
    target.parent.mkdir(parents=True, exist_ok=True)
    with _save_lock(target.parent):
        check_target(target, replaceable)
        _report_leftovers(target.parent, target)
        tmp = _make_dir(target.parent, f".{target.name}.tmp-")
        swapped = False
        try:
            for name, rel in checked.items():
                dest = tmp.joinpath(*rel.parts)
                dest.parent.mkdir(parents=True, exist_ok=True)
                _fsync_write(dest, files[name])
            if not target.exists():
                os.rename(tmp, target)
            elif _swap_dirs(tmp, target):
                swapped = True  # `tmp` now holds the previous version
                _dispose(tmp, target, replaceable)
            else:
                old = target.parent / _own_name(f".{target.name}.old-")
                os.replace(target, old)
                try:
                    os.replace(tmp, target)
                except BaseException:
                    os.replace(old, target)
                    raise
                _dispose(old, target, replaceable)
        finally:
            if not swapped:  # the new build, never the previous version
                shutil.rmtree(tmp, ignore_errors=True)
    return target
