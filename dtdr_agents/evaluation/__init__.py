"""The evaluation layer: the protocol, metrics, intervals, bench, speed, reports and end to end.

Nothing below this layer imports it. The protocol's names (`evaluate`, `fit_and_evaluate`,
`EvalResult`, ...) are importable from here, loaded on first use so that importing a light
module such as `dtdr_agents.evaluation.metrics` does not load the retrievers.
"""

from __future__ import annotations

import importlib
from typing import Any

_PROTOCOL_NAMES = (
    "PROTOCOL",
    "EvalResult",
    "ScoredStep",
    "eval_steps",
    "evaluate",
    "fit_and_evaluate",
    "has_own_stop",
    "recommend_for",
    "set_metrics",
    "stop_metrics",
)


def __getattr__(name: str) -> Any:
    """Load a protocol name from `dtdr_agents.evaluation.protocol` on first use."""
    if name in _PROTOCOL_NAMES:
        return getattr(importlib.import_module("dtdr_agents.evaluation.protocol"), name)
    raise AttributeError(f"module 'dtdr_agents.evaluation' has no attribute {name!r}")


__all__ = list(_PROTOCOL_NAMES)
