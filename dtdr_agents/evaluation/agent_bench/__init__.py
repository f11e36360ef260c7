"""Live agents against the tool-selection approaches users pick (issue 37).

Each test plan's request is run as a real agent loop by every contestant (all tools bound,
langgraph-bigtool's retrieval, LangChain's LLM selector, a search tool, DTDR middleware ...)
over the same chat model, system prompt and step limit; tool results are simulated from the
dataset; every model answer is cached by its request body, so `--replay` rebuilds the figures
offline. The framework contestants live in `langchain_dtdr.agent_bench`. See
docs/agent-bench.md.
"""

from __future__ import annotations

from dtdr_agents.evaluation.agent_bench.endpoint import (
    AGENT,
    SELECTOR,
    BenchEndpoint,
    ModelCall,
    RunLog,
    StepLimitError,
    body_hash,
)
from dtdr_agents.evaluation.agent_bench.harness import (
    CONTESTANT_IDS,
    DEFAULT_CONTESTANTS,
    EXTRA_STEPS,
    FIGURES,
    META_TOOLS,
    REFERENCE,
    REPLAYED_FIGURES,
    REPORT_KIND,
    RETRIEVE_TOOL,
    SEARCH_TOOL,
    SYSTEM_PROMPT,
    AgentTask,
    Contestant,
    RunResult,
    api_split,
    results_json,
    run_agent_bench,
    score_log,
    simulated_result,
    summarize,
)
from dtdr_agents.evaluation.agent_bench.report import format_agent_bench_markdown
from dtdr_agents.evaluation.agent_bench.scoring import (
    FAILURE_REASONS,
    call_precision,
    call_recall,
    failure_reason,
    loops,
    matched_calls,
    order_allowed,
    plan_success,
)

__all__ = [
    "AGENT",
    "CONTESTANT_IDS",
    "DEFAULT_CONTESTANTS",
    "EXTRA_STEPS",
    "FAILURE_REASONS",
    "FIGURES",
    "META_TOOLS",
    "REFERENCE",
    "REPLAYED_FIGURES",
    "REPORT_KIND",
    "RETRIEVE_TOOL",
    "SEARCH_TOOL",
    "SELECTOR",
    "SYSTEM_PROMPT",
    "AgentTask",
    "BenchEndpoint",
    "Contestant",
    "ModelCall",
    "RunLog",
    "RunResult",
    "StepLimitError",
    "api_split",
    "body_hash",
    "call_precision",
    "call_recall",
    "failure_reason",
    "format_agent_bench_markdown",
    "loops",
    "matched_calls",
    "order_allowed",
    "plan_success",
    "results_json",
    "run_agent_bench",
    "score_log",
    "simulated_result",
    "summarize",
]
