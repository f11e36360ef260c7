"""End-to-end function-calling evaluation: does the retrieval make the model call the right tool?

The DTDR paper's Section 5 protocol against any OpenAI-compatible chat endpoint: for each
teacher-forced step of each test plan, the model gets the request, the calls so far and the
tools a mode binds, and must call the next tool. Metrics per (retriever, mode): function
selection accuracy (FSA), success rate (SR, function selection only), end-of-plan accuracy,
prompt tokens per step, latency p50/p99, unbound-call rate; failures are recorded per step.

Example:
    >>> from dtdr_agents.evaluation.e2e import prepare_e2e, run_e2e  # doctest: +SKIP
    >>> plan = prepare_e2e(train, test, ["none", "dtdr-c"], ["hard"], encoder=enc)  # doctest: +SKIP
    >>> llm = OpenAIChat("qwen3:4b", base_url="http://localhost:11434/v1")  # doctest: +SKIP
    >>> report = run_e2e(plan, llm)  # doctest: +SKIP
"""

from __future__ import annotations

from dtdr_agents.evaluation.e2e.cache import StepCache, step_key
from dtdr_agents.evaluation.e2e.harness import (
    REPORT_KIND,
    E2EPlan,
    EndpointUnreachableError,
    ReplayChat,
    StepNotCachedError,
    arun_e2e,
    dry_run_report,
    error_type,
    prepare_e2e,
    run_e2e,
    summarize_cells,
)
from dtdr_agents.evaluation.e2e.metrics import classify_reply, summarize
from dtdr_agents.evaluation.e2e.protocol import (
    E2E_MODES,
    END_TOOL,
    NO_RETRIEVER,
    ZERO_DEMOS,
    E2EStep,
    ProtocolBuilder,
    StepRequest,
    api_names,
    cells,
    split_spec,
)
from dtdr_agents.evaluation.e2e.report import format_e2e_markdown, plot_e2e
from dtdr_agents.evaluation.e2e.uncertainty import cell_intervals, compare_cells, plan_sums

__all__ = [
    "E2E_MODES",
    "END_TOOL",
    "NO_RETRIEVER",
    "REPORT_KIND",
    "ZERO_DEMOS",
    "E2EPlan",
    "E2EStep",
    "EndpointUnreachableError",
    "ProtocolBuilder",
    "ReplayChat",
    "StepCache",
    "StepNotCachedError",
    "StepRequest",
    "api_names",
    "arun_e2e",
    "cell_intervals",
    "cells",
    "classify_reply",
    "compare_cells",
    "dry_run_report",
    "error_type",
    "format_e2e_markdown",
    "plan_sums",
    "plot_e2e",
    "prepare_e2e",
    "run_e2e",
    "split_spec",
    "step_key",
    "summarize",
    "summarize_cells",
]
