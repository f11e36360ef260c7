"""The tool-retrieval baselines of the DTDR paper that do not learn from demonstrations.

DTDR paper, Section 5 ("Tool Retrieval Baselines"), Appendix C ("Other details") and Appendix
I.3, Algorithm 7:

* `RandomRetriever` ("random"): a seeded random ranking, the floor every method must beat.
* `BM25Retriever` ("bm25"): BM25 term matching of the query against tool names and descriptions.
* `QTSRetriever` ("qts"): vanilla query-tool similarity, the cosine similarity of the query's and
  the tools' sentence embeddings.
* `ToolGraphRetriever` ("tgr"): Tool Graph Retriever (Gao et al., 2025) as the DTDR paper runs
  it: QTS over tool embeddings smoothed by a parameter-free graph convolution over a tool
  dependency graph built from the demonstrations.
* `LessIsMoreRetriever` ("lim"): Less-is-More search level 1 (Paramanayakam et al., 2025): a
  chat model describes the ideal tools for the query and that description is matched by QTS.

All but `RandomRetriever` are query-only (`uses_history = False`): as Algorithm 7 says, they
rank once at the start of the task and the ranking is kept for every step. They cannot know
when a plan ends, so the end-of-plan token always gets its base rate among the training steps
(`end_rate_`) and the tools share the rest.

Each baseline lives in its own module (`random_baseline`, `bm25`, `similarity`, `tgr`, `lim`);
this module re-exports them under the import path they have always had.
"""

from __future__ import annotations

# isort: off
# Imported in the order the classes register, which is the order `dtdr-agents bench` runs
# them by default (`registry.default_bench_ids`): random, bm25, qts, tgr, lim.
from dtdr_agents.retrievers.random_baseline import RandomRetriever
from dtdr_agents.retrievers.bm25 import BM25_INSTALL_HINT, BM25Retriever, split_identifiers
from dtdr_agents.retrievers.similarity import QTSRetriever, similarity_probabilities
from dtdr_agents.retrievers.tgr import (
    GraphDirection,
    GraphSource,
    ToolGraphRetriever,
    dependency_pairs,
    graph_convolution,
)
from dtdr_agents.retrievers.lim import (
    LIM_SYSTEM_PROMPT,
    LIM_USER_PROMPT,
    LessIsMoreRetriever,
    parse_ideal_tools,
)
# isort: on

__all__ = [
    "BM25_INSTALL_HINT",
    "LIM_SYSTEM_PROMPT",
    "LIM_USER_PROMPT",
    "BM25Retriever",
    "GraphDirection",
    "GraphSource",
    "LessIsMoreRetriever",
    "QTSRetriever",
    "RandomRetriever",
    "ToolGraphRetriever",
    "dependency_pairs",
    "graph_convolution",
    "parse_ideal_tools",
    "similarity_probabilities",
    "split_identifiers",
]
