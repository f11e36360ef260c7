"""LangGraph integration of dtdr-agents: a ReAct graph that re-selects its tools every step.

* `create_dtdr_agent(model, tools, retriever, *, k=..., policy=..., binding=..., mode=...,
  cache=...)`: the uncompiled graph
  ``select_tools -> model -> tools -> select_tools -> ... -> END``.
* `create_select_tools_node`, `create_model_node`, `create_tool_node`,
  `create_record_node`: the nodes, to build your own graph around a `ToolSelector`.
* `DTDRAgentState`: messages, ``selected_tools`` and ``tool_selections`` (why each tool was
  bound).
"""

from __future__ import annotations

from dtdr_agents.foundation.extras import needs_extra

with needs_extra("langgraph_dtdr", "langgraph"):  # a missing framework: name its extra
    from dtdr_agents.foundation.selection import SelectionPolicy
    from dtdr_agents.runtime import BindingPolicy, StepRecord, run_report
    from langchain_dtdr.selector import ToolSelector, ToolStep
    from langgraph_dtdr.agent import (
        DTDRAgentState,
        OnUnbound,
        create_dtdr_agent,
        create_model_node,
        create_record_node,
        create_select_tools_node,
        create_tool_node,
    )

__all__ = [
    "BindingPolicy",
    "DTDRAgentState",
    "OnUnbound",
    "SelectionPolicy",
    "StepRecord",
    "ToolSelector",
    "ToolStep",
    "create_dtdr_agent",
    "create_model_node",
    "create_record_node",
    "create_select_tools_node",
    "create_tool_node",
    "run_report",
]
