"""dtdr-agents: dynamic tool retrieval for tool-calling agents.

Rank the next tools from the request AND the calls made so far, learned from demonstrations
(DTDR-C, DTDR-L), plus the baselines of the DTDR paper. The core never imports LangChain.

Importing the package is light: each public name imports its module on first use (PEP 562),
and loading a saved model imports only the modules of its retrievers (no SQLAlchemy, pydantic,
scikit-learn or torch; `tests/test_light_import.py` checks it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dtdr_agents import _compat
from dtdr_agents._version import __version__
from dtdr_agents.foundation.lazy import lazy_names

if TYPE_CHECKING:
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

_LAZY = {
    "dtdr_agents.foundation.encoders": (
        "CachedEncoder",
        "Encoder",
        "SentenceTransformerEncoder",
        "TfidfEncoder",
        "get_encoder",
    ),
    "dtdr_agents.foundation.errors": (
        "DTDRError",
        "DatasetFormatError",
        "EncoderUnavailableError",
        "InvalidDemonstrationError",
        "InvalidToolError",
        "ModelLoadError",
        "NotFittedError",
        "UnknownToolError",
    ),
    "dtdr_agents.foundation.selection": ("Selection", "SelectionPolicy", "select"),
    "dtdr_agents.foundation.types": (
        "END_OF_PLAN",
        "Demonstration",
        "RankedTool",
        "Ranking",
        "Step",
        "Tool",
        "Toolset",
    ),
    "dtdr_agents.retrievers": (
        "DTDRC",
        "DTDRL",
        "BM25Retriever",
        "GraphToolCallRetriever",
        "LessIsMoreRetriever",
        "QTSRetriever",
        "RandomRetriever",
        "StaticDR",
        "StaticLR",
        "ToolGraphRetriever",
        "ToolRetriever",
        "load_retriever",
        "make_retriever",
        "retriever_ids",
    ),
}
"""Module -> the public names it gives (the `TYPE_CHECKING` imports above, for type checkers)."""

__getattr__, __dir__ = lazy_names(
    __name__, {name: module for module, names in _LAZY.items() for name in names}
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
