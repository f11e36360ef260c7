"""ToolQP query planning (paper 003): planners, the Fig. 14 prompt, plans files, rank fusion.

The retriever that uses them is `dtdr_agents.retrievers.toolqp.ToolQPRetriever` (id
``toolqp:<base>``). This package holds what does not depend on a retriever:

- `prompts`: the Fig. 14 prompt text (the only copy) and the parsers of the planner's turns;
- `plan`: `Plan`, the JSON-lines plans file (`read_plans`, `write_plans`, `PlanRecorder`)
  and one-query plans from a dataset's shipped instructions (`instruction_plans`);
- `planners`: the `Planner` protocol, `ChatPlanner` (any chat model, sync and async),
  `ReplayPlanner` (recorded plans) and `ClausePlanner` (no LLM; tests and offline examples);
- `fusion`: peak-rank fusion (ToolQP's default) and reciprocal rank fusion.
"""

from __future__ import annotations

from dtdr_agents.planning.fusion import FUSIONS, RRF_K, Fusion, fuse, peak_rank_fusion, rrf_fusion
from dtdr_agents.planning.plan import (
    SOURCE_CHAT,
    SOURCE_INSTRUCTION,
    SOURCE_REPLAY,
    SUB_GOALS_ONLY,
    Plan,
    PlanRecorder,
    instruction_plans,
    plan_from_record,
    read_plans,
    write_plans,
)
from dtdr_agents.planning.planners import (
    FEEDBACK_K,
    MAX_TURNS,
    ChatPlanner,
    ClausePlanner,
    Planner,
    ReplayPlanner,
    SearchFn,
)
from dtdr_agents.planning.prompts import (
    FIG14_SYSTEM_PROMPT,
    SYSTEM_PROMPT,
    PlanningError,
    parse_first_turn,
    parse_query_turn,
)

__all__ = [
    "FEEDBACK_K",
    "FIG14_SYSTEM_PROMPT",
    "FUSIONS",
    "MAX_TURNS",
    "RRF_K",
    "SOURCE_CHAT",
    "SOURCE_INSTRUCTION",
    "SOURCE_REPLAY",
    "SUB_GOALS_ONLY",
    "SYSTEM_PROMPT",
    "ChatPlanner",
    "ClausePlanner",
    "Fusion",
    "Plan",
    "PlanRecorder",
    "Planner",
    "PlanningError",
    "ReplayPlanner",
    "SearchFn",
    "fuse",
    "instruction_plans",
    "parse_first_turn",
    "parse_query_turn",
    "peak_rank_fusion",
    "plan_from_record",
    "read_plans",
    "rrf_fusion",
    "write_plans",
]
