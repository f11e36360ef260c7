"""Limits and time-outs of the MCP proxy's stored sessions (`dtdr_agents.store.sessions`).

A module of constants only, without SQLAlchemy, so that the command line can show the
defaults in its help without loading the database layer.
"""

from __future__ import annotations

MAX_ANSWERS = 8
"""The answers a session keeps (to its last forwarded calls); older ones are dropped."""

MAX_ANSWER_CHARS = 1_000_000
"""The longest answer (as JSON) kept in full; a longer one is kept without its result."""

DEFAULT_TTL = 1800.0
"""Seconds a session may go unwritten before it is expired (the MCP SDK's idle time-out of
a stateful streamable HTTP session, 30 minutes)."""

DEFAULT_EXPIRE_INTERVAL = 60.0
"""Seconds between two expiries of idle sessions by the MCP proxy."""
