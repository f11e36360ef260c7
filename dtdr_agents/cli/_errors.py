"""The command line's error type (its own module: `_common` and `_flags` both raise it)."""

from __future__ import annotations

from dtdr_agents.foundation.errors import DTDRError


class CLIError(DTDRError):
    """A bad command-line input; `main` prints `error: ...` and exits with status 2."""
