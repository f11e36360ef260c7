"""Reading the files of a model folder safely.

One open folder handle, no symbolic link followed, only regular files (a named pipe is refused
before it is opened), a size cap.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from dtdr_agents.foundation.errors import ModelLoadError
from dtdr_agents.foundation.manifest import _RetryableError


def _open_dir(name: str | Path, parent_fd: int | None, shown: Path) -> int:
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    if parent_fd is not None:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        if parent_fd is None:
            return os.open(name, flags)
        return os.open(name, flags, dir_fd=parent_fd)
    except FileNotFoundError:
        raise _RetryableError(f"{shown}: no such model folder") from None
    except NotADirectoryError:
        raise ModelLoadError(f"{shown}: not a folder") from None
    except OSError as exc:
        raise _open_error(exc, shown) from None


def _open_error(exc: OSError, shown: Path) -> ModelLoadError:
    """The error for a file or folder of a model that cannot be opened."""
    if exc.errno == errno.ELOOP:
        return ModelLoadError(
            f"{shown}: is a symbolic link; a model folder must not link outside itself"
        )
    return ModelLoadError(f"{shown}: cannot open ({exc.strerror})")


_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def special_kind(path: Path) -> str | None:
    """What `path` is when it exists but is neither a regular file nor a folder, else None.

    For example "a named pipe (FIFO)": say so rather than "not found".
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _check_regular(mode: int, size: int, shown: Path, cap: int, cap_name: str) -> None:
    """Refuse what is not a regular file of at most `cap` bytes (named `cap_name`)."""
    if stat.S_ISLNK(mode):
        raise ModelLoadError(
            f"{shown}: is a symbolic link; a model folder must not link outside itself"
        )
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise ModelLoadError(f"{shown}: is {kind}, not a regular file")
    if size > cap:
        raise ModelLoadError(
            f"{shown}: {size} bytes, more than the {cap} allowed "
            f"(dtdr_agents.foundation.persistence.{cap_name})"
        )


def _read_file(dir_fd: int, name: str, shown: Path, cap: int, cap_name: str) -> bytes:
    """The bytes of the regular file `name` in the open folder (no symlink followed).

    The type is checked before the file is opened, and opened without blocking, so a named
    pipe in its place is refused instead of waiting for a writer.
    """
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise _RetryableError(f"{shown}: missing") from None
    except OSError as exc:
        raise _open_error(exc, shown) from None
    _check_regular(info.st_mode, info.st_size, shown, cap, cap_name)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise _RetryableError(f"{shown}: missing") from None
    except OSError as exc:
        raise _open_error(exc, shown) from None
    try:
        info = os.fstat(fd)  # the name may have been replaced since the check
        _check_regular(info.st_mode, info.st_size, shown, cap, cap_name)
        with os.fdopen(fd, "rb") as fh:
            fd = -1
            data = fh.read(info.st_size + 1)  # one byte more shows a file still growing
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > info.st_size:
        raise ModelLoadError(f"{shown}: grew while it was read (is something writing it?)")
    return data


def _replaced(folder: Path, fd: int) -> bool:
    """Whether `folder` no longer names the folder open as `fd` (a save replaced it)."""
    try:
        now = os.stat(folder)
    except OSError:
        return True
    held = os.fstat(fd)
    return (now.st_ino, now.st_dev) != (held.st_ino, held.st_dev)
