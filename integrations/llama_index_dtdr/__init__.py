"""LlamaIndex integration of dtdr-agents (``pip install 'dtdr-agents[llamaindex]'``).

* `DTDRObjectRetriever`: an `ObjectRetriever` over the agent's tools for
  ``FunctionAgent(tool_retriever=...)``; it answers exact tool-name look-ups (LlamaIndex finds
  the tool to run by name).
* `DTDRFunctionAgent`: a `FunctionAgent` that passes the run's call history to the retriever
  at every step (LlamaIndex itself passes only the user message), with the shared runtime's
  widening, unbound-call policy and ``cache="append"``.
"""

from __future__ import annotations

from dtdr_agents.foundation.extras import needs_extra

with needs_extra("llama_index_dtdr", "llamaindex"):  # a missing framework: name its extra
    from dtdr_agents.foundation.selection import SelectionPolicy
    from dtdr_agents.runtime import BindingPolicy, StepRecord, run_report
    from llama_index_dtdr.agent import RECORDS_KEY, DTDRFunctionAgent
    from llama_index_dtdr.retriever import DTDRObjectRetriever, core_tool

__all__ = [
    "RECORDS_KEY",
    "BindingPolicy",
    "DTDRFunctionAgent",
    "DTDRObjectRetriever",
    "SelectionPolicy",
    "StepRecord",
    "core_tool",
    "run_report",
]
