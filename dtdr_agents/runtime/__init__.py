"""The framework-neutral runtime shared by every agent integration.

Every adapter (LangGraph nodes, the LangChain middleware, the LlamaIndex agent, the MCP proxy)
does the same thing before a model call: rank the catalogue from the request and the calls made
so far, apply a `SelectionPolicy` (the one carrier of selection, binding, widening and
unbound-call settings), decide which tools to bind, call the model, re-select once with a wider
`k` when the reply shows the selection was too narrow, and handle calls of tools that were not
bound. This package holds all of it, with no framework import, one idea per module:

* `policy`: `DEFAULT_POLICY` and `resolve_policy` (the keywords of an integration into one
  policy); `BindingPolicy` / `resolve_policies` are deprecated shims.
* `steps`: `StepRecord`, the typed record of one step (what was bound and why); `to_record` /
  `from_record` convert it to and from the plain-JSON dict kept in graph state and traces.
* `selector`: `StepSelector` ranks, selects and binds; `run_step` / `arun_step` is the one
  widen-and-retry helper.
* `guard`: the one unbound-call guard (`check_unbound`, `refusal`, `rejection_text`).
* `binding`: `BINDERS`, how the bound list follows from the selection. ``"off"`` binds the
  selection in catalogue order; ``"append"`` keeps the bound list of the turn growing in
  first-bound order, so each request's tools array starts with the previous one's (prompt
  caches keep their prefix). A new strategy is one `register_binder` call.
* `steps.run_report`: per run, prefix reuse and bound-schema tokens.
* `checks`: input checks (tool lists, fitted retrievers, integer options).
"""

from __future__ import annotations

from dtdr_agents.runtime.binding import BINDERS, BindContext, Binder, register_binder
from dtdr_agents.runtime.checks import (
    DEFAULT_RETRIEVER,
    UNSET,
    CatalogueMismatchError,
    Unset,
    check_int,
    check_tool_list,
    fitted_tools,
    unwrap_retriever,
)
from dtdr_agents.runtime.guard import (
    OnUnbound,
    Reply,
    UnboundToolCallError,
    check_on_unbound,
    check_unbound,
    refusal,
    rejection_text,
)
from dtdr_agents.runtime.policy import (
    DEFAULT_POLICY,
    AgentMode,
    BindingPolicy,
    SelectionKeywords,
    resolve_policies,
    resolve_policy,
)
from dtdr_agents.runtime.selector import StepSelector
from dtdr_agents.runtime.steps import (
    RunReport,
    StepRecord,
    merge_selection_records,
    record_metadata,
    run_report,
)

__all__ = [
    "BINDERS",
    "DEFAULT_POLICY",
    "DEFAULT_RETRIEVER",
    "UNSET",
    "AgentMode",
    "BindContext",
    "Binder",
    "BindingPolicy",
    "CatalogueMismatchError",
    "OnUnbound",
    "Reply",
    "RunReport",
    "SelectionKeywords",
    "StepRecord",
    "StepSelector",
    "UnboundToolCallError",
    "Unset",
    "check_int",
    "check_on_unbound",
    "check_tool_list",
    "check_unbound",
    "fitted_tools",
    "merge_selection_records",
    "record_metadata",
    "refusal",
    "register_binder",
    "rejection_text",
    "resolve_policies",
    "resolve_policy",
    "run_report",
    "unwrap_retriever",
]
