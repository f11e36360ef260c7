"""OpenAI Agents SDK integration of dtdr-agents (``pip install 'dtdr-agents[openai-agents]'``).

* `DTDRToolSelection`: per-step tool enabling for an ``Agent`` (each catalogue tool's
  ``FunctionTool.is_enabled`` asks the selection) and a dynamic MCP ``tool_filter``, both
  ranked from the run's request and the tool calls made so far.
* `DTDRRunContext`: the run context that carries the request and the calls so far
  (``Runner.run(agent, input, context=selection.context(input))``).
* `DTDRAgentHooks`: the agent hooks that record each model response's calls.
"""

from __future__ import annotations

from dtdr_agents.foundation.selection import SelectionPolicy
from dtdr_agents.runtime import StepRecord, run_report
from openai_agents_dtdr.selection import (
    DTDRAgentHooks,
    DTDRRunContext,
    DTDRToolSelection,
    core_tool,
    current_turn,
)

__all__ = [
    "DTDRAgentHooks",
    "DTDRRunContext",
    "DTDRToolSelection",
    "SelectionPolicy",
    "StepRecord",
    "core_tool",
    "current_turn",
    "run_report",
]
