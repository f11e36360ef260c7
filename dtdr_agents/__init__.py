"""dtdr-agents: dynamic tool retrieval for tool-calling agents.

Rank the next tools from the request AND the calls made so far, learned from demonstrations
(DTDR-C, DTDR-L), plus the baselines of the DTDR paper. The core never imports LangChain.
"""

from __future__ import annotations

from dtdr_agents import _compat
from dtdr_agents._version import __version__
from dtdr_agents.foundation.encoders import (
    CachedEncoder,
    Encoder,
    SentenceTransformerEncoder,
    TfidfEncoder,
    get_encoder,
)
from dtdr_agents.foundation.errors import (
    DatasetFormatError,
    DTDRError,
    EncoderUnavailableError,
    InvalidDemonstrationError,
    InvalidToolError,
    ModelLoadError,
    NotFittedError,
    UnknownToolError,
)
from dtdr_agents.foundation.selection import Selection, SelectionPolicy, select
from dtdr_agents.foundation.types import (
    END_OF_PLAN,
    Demonstration,
    RankedTool,
    Ranking,
    Step,
    Tool,
    Toolset,
)
from dtdr_agents.retrievers import (
    DTDRC,
    DTDRL,
    BM25Retriever,
    GraphToolCallRetriever,
    LessIsMoreRetriever,
    QTSRetriever,
    RandomRetriever,
    StaticDR,
    StaticLR,
    ToolGraphRetriever,
    ToolRetriever,
    load_retriever,
    make_retriever,
    retriever_ids,
)

_compat.install()

__all__ = [
    "DTDRC",
    "DTDRL",
    "END_OF_PLAN",
    "BM25Retriever",
    "CachedEncoder",
    "DTDRError",
    "DatasetFormatError",
    "Demonstration",
    "Encoder",
    "EncoderUnavailableError",
    "GraphToolCallRetriever",
    "InvalidDemonstrationError",
    "InvalidToolError",
    "LessIsMoreRetriever",
    "ModelLoadError",
    "NotFittedError",
    "QTSRetriever",
    "RandomRetriever",
    "RankedTool",
    "Ranking",
    "Selection",
    "SelectionPolicy",
    "SentenceTransformerEncoder",
    "StaticDR",
    "StaticLR",
    "Step",
    "TfidfEncoder",
    "Tool",
    "ToolGraphRetriever",
    "ToolRetriever",
    "Toolset",
    "UnknownToolError",
    "__version__",
    "get_encoder",
    "load_retriever",
    "make_retriever",
    "retriever_ids",
    "select",
]
