"""Pydantic AI integration of dtdr-agents (``pip install 'dtdr-agents[pydantic-ai]'``).

* `prepare_tools`: a ``ToolsPrepareFunc`` for ``Agent(capabilities=[PrepareTools(...)])``
  that, before every model call, reads the run's messages, ranks the tools from the request
  and the calls made so far, and returns only the tool definitions the selection binds.
* `search_strategy`: a search callable for ``ToolSearch(strategy=...)`` that answers the
  model's tool searches from the retriever, with the run's calls so far.
"""

from __future__ import annotations

from dtdr_agents.foundation.selection import SelectionPolicy
from dtdr_agents.runtime import StepRecord, run_report
from pydantic_ai_dtdr.selection import (
    DTDRPrepareTools,
    DTDRSearchStrategy,
    core_tool,
    current_turn,
    prepare_tools,
    search_strategy,
)

__all__ = [
    "DTDRPrepareTools",
    "DTDRSearchStrategy",
    "SelectionPolicy",
    "StepRecord",
    "core_tool",
    "current_turn",
    "prepare_tools",
    "run_report",
    "search_strategy",
]
