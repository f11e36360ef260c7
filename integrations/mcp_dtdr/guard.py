"""Run the upstream MCP server so that it ends with the proxy, whatever ends the proxy (POSIX).

    python -I -S guard.py PROXY_PID GRACE COMMAND [ARGS...]

The proxy starts this script (standard library only, in a session of its own, as the SDK starts
every stdio server) in place of the upstream's command. The script starts the command in a new
process group (its children join that group), hands it its standard streams and lets go of its
own copies, then waits for whichever comes first:

* the command exits: whatever is left of its group gets SIGTERM, then SIGKILL after GRACE
  seconds, and the script exits with the command's status;
* the script gets SIGTERM, SIGHUP or SIGINT (the SDK's shutdown of a server that does not exit
  when its stdin closes), or its parent is no longer the proxy (the proxy ended, even by
  SIGKILL, which nothing can catch): the command's group gets SIGTERM, then SIGKILL after GRACE
  seconds, and the script exits.

GRACE is below the SDK's own SIGTERM-to-SIGKILL delay (2 s), so that the script has ended the
group before the SDK could kill the script. A process that leaves the group (``setsid``) is out
of reach, as it is of any process-group kill.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Sequence

POLL = 0.05
"""Seconds between looks at the command and at the parent."""

NOT_STARTED = 127
"""The exit status when the command cannot be started (as a shell's)."""


def _group_alive(group: int) -> bool:
    """Whether any process of the process group `group` remains (zombies included)."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


class _Child:
    """The command's process (also its process group's id) and its status once reaped."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.status: int | None = None

    def reap(self) -> bool:
        """Collect the command's status if it exited; whether it has."""
        if self.status is None:
            done, raw = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.status = os.waitstatus_to_exitcode(raw)
        return self.status is not None

    def end(self, grace: float) -> int:
        """SIGTERM the group, SIGKILL what is left after `grace` seconds; the exit status."""
        if self.reap() and not _group_alive(self.pid):
            return self._exit_code()
        _signal(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if self.reap() and not _group_alive(self.pid):
                return self._exit_code()
            time.sleep(POLL)
        _signal(self.pid, signal.SIGKILL)
        if self.status is None:
            self.status = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self._exit_code()

    def _exit_code(self) -> int:
        status = self.status if self.status is not None else 0
        return 128 - status if status < 0 else status  # killed by signal N: 128 + N


def main(argv: Sequence[str]) -> int:
    """Run the command of `argv` (``PROXY_PID GRACE COMMAND [ARGS...]``); its exit status."""
    if len(argv) < 3:
        print("usage: guard.py PROXY_PID GRACE COMMAND [ARGS...]", file=sys.stderr)
        return 2
    parent, grace, command = int(argv[0]), float(argv[1]), list(argv[2:])
    stop: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        stop.append(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, on_signal)
    if os.getppid() != parent:  # the proxy ended before we could start the command
        return 1
    try:
        pid = os.posix_spawnp(
            command[0],
            command,
            os.environ,
            setpgroup=0,
            setsigdef=(signal.SIGTERM, signal.SIGHUP, signal.SIGINT),
        )
    except OSError as exc:
        print(
            f"dtdr-agents mcp-proxy: cannot start the upstream MCP server {command[0]!r}: {exc}",
            file=sys.stderr,
            flush=True,
        )
        return NOT_STARTED
    child = _Child(pid)
    null = os.open(os.devnull, os.O_RDWR)  # the command holds the pipes now: let go of ours,
    os.dup2(null, 0)  # so that the proxy sees the command's end of them
    os.dup2(null, 1)
    os.close(null)
    while not child.reap() and not stop and os.getppid() == parent:
        time.sleep(POLL)
    return child.end(grace)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
