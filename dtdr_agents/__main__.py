"""``python -m dtdr_agents ARGS`` is ``dtdr-agents ARGS``."""

from __future__ import annotations

import sys

from dtdr_agents.cli import main

if __name__ == "__main__":
    sys.exit(main())
