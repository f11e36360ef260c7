"""``python -m mcp_dtdr ARGS`` is ``dtdr-agents mcp-proxy ARGS``."""

from __future__ import annotations

import sys

from dtdr_agents.cli import main, process_gc

if __name__ == "__main__":
    with process_gc():  # this process runs the proxy until it stops, then exits
        code = main(["mcp-proxy", *sys.argv[1:]])
    sys.exit(code)
