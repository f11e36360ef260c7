"""LangChain integration of dtdr-agents: dynamic tool retrieval for tool-calling agents.

* `DTDRRetriever`: a `BaseRetriever` over any fitted core retriever; ``invoke(query, k=...,
  history=[...])`` returns one `Document` per tool.
* `ToolSelector`: the LangChain side of the integration runtime (`dtdr_agents.runtime`):
  per-step selection shared by the LangGraph nodes and the middleware. Options come as one
  `SelectionPolicy` and one `BindingPolicy`; each step is a typed `StepRecord` (`ToolStep`).
* `DTDRMiddleware`: middleware for ``langchain.agents.create_agent`` (needs the ``langchain``
  package; imported lazily).
* `DTDRRecorderCallback` / `record_turn`: append demonstrations from real runs to a JSONL file.
* `langchain_dtdr.testing`: a scripted chat model and demo tools for offline tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dtdr_agents.foundation.extras import needs_extra

with needs_extra("langchain_dtdr", "langchain"):  # a missing framework: name its extra
    from dtdr_agents.foundation.selection import SelectionPolicy
    from dtdr_agents.runtime import BindingPolicy, StepRecord, run_report
    from langchain_dtdr.messages import NoRequestError, Turn, current_turn, is_final_answer
    from langchain_dtdr.recording import DTDRRecorderCallback, record_turn
    from langchain_dtdr.retrievers import DTDRRetriever
    from langchain_dtdr.selector import (
        CatalogueMismatchError,
        ToolSelector,
        ToolStep,
        UnboundToolCallError,
        merge_selection_records,
        record_metadata,
        unbound_tool_message,
    )

if TYPE_CHECKING:
    from langchain_dtdr.middleware import DTDRMiddleware, DTDRMiddlewareState

__all__ = [
    "BindingPolicy",
    "CatalogueMismatchError",
    "DTDRMiddleware",
    "DTDRMiddlewareState",
    "DTDRRecorderCallback",
    "DTDRRetriever",
    "NoRequestError",
    "SelectionPolicy",
    "StepRecord",
    "ToolSelector",
    "ToolStep",
    "Turn",
    "UnboundToolCallError",
    "current_turn",
    "is_final_answer",
    "merge_selection_records",
    "record_metadata",
    "record_turn",
    "run_report",
    "unbound_tool_message",
]


def __getattr__(name: str) -> Any:
    """Import the middleware lazily: it needs the optional ``langchain`` package."""
    if name in ("DTDRMiddleware", "DTDRMiddlewareState"):
        with needs_extra("langchain_dtdr.middleware", "langchain"):
            from langchain_dtdr import middleware

        return getattr(middleware, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
