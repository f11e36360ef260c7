"""A throw-away PostgreSQL server on loopback for tests and benchmarks (Debian's `postgresql`).

`postgres_server()` initialises a throw-away cluster in a temporary folder, starts it on a free
port of 127.0.0.1 (trust authentication, loopback only), and stops and removes it afterwards.
As root the server runs as the `postgres` user (PostgreSQL refuses to run as root). Without
the server's binaries the caller skips with the reason `postgres_unavailable()` gives.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SETUP_HINT = "apt-get update && apt-get install -y postgresql"


def _bindir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    return Path(candidates[0]).parent if candidates else None


def postgres_unavailable() -> str | None:
    """Why no PostgreSQL server can be started here, or None when one can."""
    if _bindir() is None:
        return f"PostgreSQL's initdb is not installed (one-line set-up: {SETUP_HINT})"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server as"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a PostgreSQL server; yields the URL of its ``postgres`` database."""
    bindir = _bindir()
    assert bindir is not None, postgres_unavailable()
    folder = Path(tempfile.mkdtemp(prefix="dtdr-pg-"))
    data = folder / "data"
    prefix: list[str] = []
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chmod(folder, 0o755)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    port = _free_port()

    def run(*args: str) -> None:
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)

    try:
        run(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        run(
            str(bindir / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"), "-w", "-t", "60",
            "-o", f"-c listen_addresses=127.0.0.1 -p {port} -k {folder} -c fsync=off",
            "start",
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(
                [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                capture_output=True,
                timeout=120,
            )
        shutil.rmtree(folder, ignore_errors=True)
