"""Tool retrievers: DTDR-C, DTDR-L, the baselines of the DTDR paper and composites.

Every module of this package is imported here, so a retriever class defined in a new module
registers itself (see `dtdr_agents.retrievers.registry`); `make_retriever`, the CLI, the bench
and the contract tests read the registry.
"""

from __future__ import annotations

import importlib
import pkgutil

from dtdr_agents.retrievers.base import Scores, ToolRetriever, load_retriever, save_retriever
from dtdr_agents.retrievers.baselines import (
    BM25Retriever,
    LessIsMoreRetriever,
    QTSRetriever,
    RandomRetriever,
    ToolGraphRetriever,
)
from dtdr_agents.retrievers.composite import CompositeRetriever
from dtdr_agents.retrievers.dtdr_c import DTDRC, StaticDR
from dtdr_agents.retrievers.linear import DTDRL, StaticLR
from dtdr_agents.retrievers.peer import GraphToolCallRetriever
from dtdr_agents.retrievers.registry import (
    class_by_name,
    composite_ids,
    default_bench_ids,
    make_retriever,
    registered_classes,
    retriever_ids,
)

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")


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
