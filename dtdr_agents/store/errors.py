"""The run store's error (import-light: publishing and reloading need no database driver)."""

from __future__ import annotations

from dtdr_agents.foundation.errors import DTDRError


class StoreError(DTDRError, RuntimeError):
    """The run store cannot be opened or used (bad URL, foreign or newer schema)."""
