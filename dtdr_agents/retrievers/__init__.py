"""Tool retrievers: DTDR-C, DTDR-L, the baselines of the DTDR paper and composites.

Importing the package imports no retriever module: each name below loads its module on first
use, and the registry (`dtdr_agents.retrievers.registry`) imports a retriever's module when its
id or class name is first asked for, so that loading a saved model imports only the modules it
needs. `make_retriever`, the CLI, the bench and the contract tests read the registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dtdr_agents.foundation.lazy import lazy_names
from dtdr_agents.retrievers.registry import BUILT_IN

if TYPE_CHECKING:
    from dtdr_agents.retrievers.base import ToolRetriever
    from dtdr_agents.retrievers.bm25 import BM25Retriever
    from dtdr_agents.retrievers.composite import CompositeRetriever
    from dtdr_agents.retrievers.dtdr_c import DTDRC, StaticDR
    from dtdr_agents.retrievers.lim import LessIsMoreRetriever
    from dtdr_agents.retrievers.linear import DTDRL, StaticLR
    from dtdr_agents.retrievers.peer import GraphToolCallRetriever
    from dtdr_agents.retrievers.random_baseline import RandomRetriever
    from dtdr_agents.retrievers.registry import (
        class_by_name,
        composite_ids,
        default_bench_ids,
        make_retriever,
        registered_classes,
        retriever_ids,
    )
    from dtdr_agents.retrievers.saving import load_retriever, save_retriever
    from dtdr_agents.retrievers.scores import Scores
    from dtdr_agents.retrievers.similarity import QTSRetriever
    from dtdr_agents.retrievers.tgr import ToolGraphRetriever

_OTHER_NAMES = {
    "ToolRetriever": "base",
    "CompositeRetriever": "composite",
    "Scores": "scores",
    "load_retriever": "saving",
    "save_retriever": "saving",
    "class_by_name": "registry",
    "composite_ids": "registry",
    "default_bench_ids": "registry",
    "make_retriever": "registry",
    "registered_classes": "registry",
    "retriever_ids": "registry",
}
"""Public names other than the built-in classes (whose modules `BUILT_IN` names) -> module."""

__all__ = [
    "DTDRC",
    "DTDRL",
    "BM25Retriever",
    "CompositeRetriever",
    "GraphToolCallRetriever",
    "LessIsMoreRetriever",
    "QTSRetriever",
    "RandomRetriever",
    "Scores",
    "StaticDR",
    "StaticLR",
    "ToolGraphRetriever",
    "ToolRetriever",
    "class_by_name",
    "composite_ids",
    "default_bench_ids",
    "load_retriever",
    "make_retriever",
    "registered_classes",
    "retriever_ids",
    "save_retriever",
]

__getattr__, __dir__ = lazy_names(
    __name__,
    {
        name: f"{__name__}.{module}"
        for name, module in [
            *((cls, where[0]) for cls, where in BUILT_IN.items() if cls in __all__),
            *_OTHER_NAMES.items(),
        ]
    },
)
