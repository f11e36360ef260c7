"""``python -m mcp_dtdr ARGS`` is ``dtdr-agents mcp-proxy ARGS``."""

from __future__ import annotations

import sys

from dtdr_agents.cli import main

if __name__ == "__main__":
    sys.exit(main(["mcp-proxy", *sys.argv[1:]]))
