"""PTR's three stages as small functions (paper 004, Section 2 and Algorithm 1).

`dtdr_agents.retrievers.ptr.PTRRecommender` wires them together over a base retriever.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from dtdr_agents.foundation.chat import ChatModel, invoke_text
from dtdr_agents.foundation.errors import ChatModelError
from dtdr_agents.recommend.prompts import (
    MalformedAnswerError,
    matching_prompt,
    parse_matches,
    parse_requirements,
    requirements_prompt,
)

VIEW_SIZE = 7
"""Candidates taken from each view of the multi-view re-ranking (the PTR code uses 7)."""

Verdict = Literal["exact solving", "oversolving", "partial solving"]


# --------------------------------------------------------------------- stage 1: bundles
@dataclass(frozen=True)
class Bundle:
    """Stage 1's answer: the tools of the most similar historical bundles.

    Attributes:
        tools: Tool names (first bundle's order, then new names of later bundles).
        sources: Indices of the demonstrations the bundles came from.
        similarity: Cosine similarity of the request to the best demonstration.
    """

    tools: tuple[str, ...]
    sources: tuple[int, ...]
    similarity: float


def bundle_acquisition(
    sims: np.ndarray, bundles: Sequence[Sequence[str]], *, k: int = 1, min_similarity: float = 0.0
) -> Bundle:
    """The union of the `k` bundles whose demonstrations are most similar to the request.

    Args:
        sims: Cosine similarity of the request to each demonstration.
        bundles: Each demonstration's tool set.
        k: How many bundles to merge (the paper uses 1).
        min_similarity: Bundles less similar than this are not used (an empty `Bundle`).

    Returns:
        The merged bundle; empty when no demonstration is similar enough.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if len(sims) == 0:
        return Bundle((), (), float("nan"))
    k = min(k, len(sims))
    idx = np.argpartition(-sims, k - 1)[:k]
    idx = idx[np.argsort(-sims[idx], kind="stable")]
    best = float(sims[idx[0]])
    chosen = [int(i) for i in idx if sims[i] >= min_similarity]
    tools = dict.fromkeys(t for i in chosen for t in bundles[i])
    return Bundle(tuple(tools), tuple(chosen), best)


# ------------------------------------------------------------ stage 2: coverage mapping
@dataclass(frozen=True)
class Coverage:
    """Stage 2's answer: the four steps of functional coverage mapping.

    Attributes:
        requirements: Step 1, the key requirements of the request.
        matches: Step 2, requirement -> tools of the bundle that fulfil it.
        verdict: Step 3, "exact solving", "oversolving" or "partial solving".
        keep: Step 3, the bundle tools that fulfil some requirement.
        unsolved: Step 4, the requirements no bundle tool fulfils.
        notes: Tool names the model gave that are in the catalogue but not in the bundle.
    """

    requirements: tuple[str, ...]
    matches: Mapping[str, tuple[str, ...]]
    verdict: Verdict
    keep: tuple[str, ...]
    unsolved: tuple[str, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)


def coverage_mapping(
    chat_model: ChatModel,
    query: str,
    bundle: Mapping[str, str],
    catalogue: Sequence[str],
) -> Coverage:
    """Run the four coverage-mapping steps with a chat model (Appendix F prompts).

    Args:
        chat_model: Any `ChatModel` (LangChain chat models and `OpenAIChat` qualify).
        query: The request.
        bundle: The Stage-1 bundle as name -> description.
        catalogue: Every tool name (an answer naming another tool is malformed).

    Raises:
        MalformedAnswerError: An answer that is not JSON, names a tool outside the catalogue, or
            lists no requirement.
        ChatModelError: The chat model failed.
    """
    reqs = parse_requirements(invoke_text(chat_model, [("human", requirements_prompt(query))]))
    matches: dict[str, tuple[str, ...]] = {}
    for req in reqs:
        answer = invoke_text(chat_model, [("human", matching_prompt(req, bundle))])
        matches[req] = tuple(parse_matches(answer, list(bundle), catalogue))
    keep = tuple(dict.fromkeys(t for tools in matches.values() for t in tools))
    unsolved = tuple(r for r, tools in matches.items() if not tools)
    verdict: Verdict
    if unsolved:
        verdict = "partial solving"
    elif len(keep) < len(bundle):
        verdict = "oversolving"
    else:
        verdict = "exact solving"
    return Coverage(tuple(reqs), matches, verdict, keep, unsolved)


# ----------------------------------------------------------- stage 3: multi-view re-rank
def multi_view_rank(*views: Sequence[str]) -> list[str]:
    """Algorithm 1, lines 14-16: tools of all views ranked by how many views list them.

    Ties keep the order of first appearance (direct semantic alignment first), as
    `collections.Counter.most_common` does in the PTR code.
    """
    counts = Counter(name for view in views for name in dict.fromkeys(view))
    return [name for name, _ in counts.most_common()]


def top_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the `k` highest scores, best first (ties: lower index first)."""
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    idx = np.argpartition(-scores, k - 1)[:k]
    out: np.ndarray = idx[np.lexsort((idx, -scores[idx]))]
    return out


__all__ = [
    "VIEW_SIZE",
    "Bundle",
    "ChatModelError",
    "Coverage",
    "MalformedAnswerError",
    "Verdict",
    "bundle_acquisition",
    "coverage_mapping",
    "multi_view_rank",
    "top_indices",
]
