"""Tool-set recommendation: the right tools, and the right number of them, before the first call.

- `Recommendation`: names, probabilities, why, and the stage that chose each tool.
- `SetSizeModel`: how many tools a request needs, learned on the demonstrations.
- `stages`: PTR's three stages (bundle acquisition, coverage mapping, multi-view re-ranking).
- `prompts`: PTR's Appendix F prompts.
- `recommend_from_ranking`: the default recommendation of any retriever.

The composite retriever `ptr` / `ptr:<base>` is `dtdr_agents.retrievers.ptr.PTRRecommender`.
"""

from __future__ import annotations

from dtdr_agents.recommend.default import DEFAULT_POLICY, policy_name, recommend_from_ranking
from dtdr_agents.recommend.record import STAGES, Recommendation, Stage
from dtdr_agents.recommend.size import SetSizeModel, format_calibration

__all__ = [
    "DEFAULT_POLICY",
    "STAGES",
    "Recommendation",
    "SetSizeModel",
    "Stage",
    "format_calibration",
    "policy_name",
    "recommend_from_ranking",
]
