"""A LangChain `BaseRetriever` over a fitted dtdr-agents tool retriever."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, InstanceOf, field_validator

from dtdr_agents.foundation.encoders import Encoder
from dtdr_agents.foundation.selection import SelectionPolicy, select
from dtdr_agents.foundation.types import Demonstration, Ranking, Toolset, as_history
from dtdr_agents.retrievers import make_retriever
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.runtime import DEFAULT_RETRIEVER
from dtdr_agents.runtime.prompting import catalogue_schema_tokens, get_token_counter
from langchain_dtdr.selector import unwrap_retriever

__all__ = ["END_OF_PLAN_CONTENT", "DTDRRetriever"]

END_OF_PLAN_CONTENT = "End of plan: no further tool call is needed."
"""Page content of the end-of-plan document (returned only with `include_end=True`)."""


def _check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return int(k)  # numpy integers are accepted, like SelectionPolicy


class DTDRRetriever(BaseRetriever):
    """Ranks the tools for the next step from the request and the tool calls made so far.

    One `Document` per tool, best first: the tool's description as `page_content`, the tool
    name as `id`, and `metadata` with ``name``, ``probability``, ``rank`` (1-based position in
    the result), ``why`` (e.g. the DTDR-C cluster and Markov key), ``method``, ``fallback``
    and ``fallback_reason``.

    Example:
        .. code-block:: python

            from dtdr_agents.datasets.synthetic import make_demo_dataset
            from langchain_dtdr import DTDRRetriever

            data = make_demo_dataset(300)
            retriever = DTDRRetriever.from_demonstrations(data.demos, data.tools, k=3)
            docs = retriever.invoke(
                "email Bob the summary of report.pdf",
                history=["open_file", "summarize_pdf"],
            )
            [d.metadata["name"] for d in docs]  # e.g. ['get_email_address', ...]

    Attributes:
        retriever: The fitted core retriever (any id of `dtdr_agents.make_retriever`).
        k: Number of tools to return (also an `invoke` keyword).
        threshold: Only return tools whose probability is above this (None: top `k` only).
        include_end: Also rank the end-of-plan token as a document.
        ignore_unknown: Drop history names that are not in the catalogue instead of raising.
        policy: A `SelectionPolicy` for the result, used as given (an ``invoke(k=...)``
            replaces its `k`); when set, `k`, `threshold` and `include_end` are not used.
            Default: the top `k` above `threshold`, zero-probability tools included, no
            out-of-distribution fallback cut. Every field of the policy applies
            (`dtdr_agents.select`, the selection path of every stack).
        token_counter: Counts the tools' schema tokens for ``policy.max_schema_tokens``
            (None: `dtdr_agents.runtime.prompting.get_token_counter()`, as the runtime).
    """

    retriever: ToolRetriever = Field(repr=False)
    k: int = Field(default=5, ge=1)
    threshold: float | None = None
    include_end: bool = False
    ignore_unknown: bool = False
    policy: InstanceOf[SelectionPolicy] | None = None
    token_counter: Any = Field(default=None, repr=False)

    model_config = ConfigDict(arbitrary_types_allowed=True)

    @field_validator("retriever", mode="before")
    @classmethod
    def _fitted_retriever(cls, value: Any) -> ToolRetriever:
        return unwrap_retriever(value)

    @field_validator("threshold")
    @classmethod
    def _threshold_in_range(cls, value: float | None) -> float | None:
        SelectionPolicy(k=None, threshold=value)  # raises ValueError naming the threshold
        return value

    # --------------------------------------------------------------------------- builders
    @classmethod
    def from_demonstrations(
        cls,
        demos: Iterable[Demonstration],
        tools: Toolset | Iterable[Any],
        *,
        retriever: str | ToolRetriever = DEFAULT_RETRIEVER,
        encoder: str | Encoder | None = None,
        retriever_params: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> DTDRRetriever:
        """Fit a core retriever on demonstrations and wrap it.

        Args:
            demos: Solved requests (query and ordered calls).
            tools: The tool catalogue (core tools, dicts, or LangChain tools).
            retriever: A retriever id of `make_retriever` ("dtdr-c", "dtdr-l", "dr", "lr",
                ...) or an unfitted core retriever. Default
                `dtdr_agents.runtime.DEFAULT_RETRIEVER`.
            encoder: Sentence encoder spec for the retriever (default: its own default).
            retriever_params: Hyperparameters of the core retriever.
            **kwargs: Fields of this class (`k`, `threshold`, `include_end`, `tags`, ...).

        Returns:
            The fitted retriever.
        """
        params = dict(retriever_params or {})
        if encoder is not None:
            params["encoder"] = encoder
        if isinstance(retriever, str):
            core = make_retriever(retriever, **params)
        elif isinstance(retriever, ToolRetriever):
            core = retriever.set_params(**params) if params else retriever
        else:
            raise TypeError(
                "retriever must be a retriever id (e.g. 'dtdr-c') or an unfitted dtdr_agents "
                f"ToolRetriever, got {type(retriever).__name__}"
            )
        core.fit(demos, tools if isinstance(tools, Toolset) else Toolset(tools))
        return cls(retriever=core, **kwargs)

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        tools: Toolset | Iterable[Any] | None = None,
        encoder: str | Encoder | None = None,
        allow_catalogue_change: bool = False,
        **kwargs: Any,
    ) -> DTDRRetriever:
        """Wrap a retriever saved with `ToolRetriever.save` (or `dtdr-agents fit`).

        Args:
            path: The model folder.
            tools: The current catalogue, if it changed since fit (see `ToolRetriever.load`).
            encoder: Encoder override (must have the recorded id).
            allow_catalogue_change: Accept a `tools` catalogue that differs from the fitted one.
            **kwargs: Fields of this class.
        """
        from dtdr_agents.retrievers import load_retriever

        core = load_retriever(
            path, tools=tools, encoder=encoder, allow_catalogue_change=allow_catalogue_change
        )
        return cls(retriever=core, **kwargs)

    # ---------------------------------------------------------------------------- ranking
    def rank(self, query: str, history: Sequence[str] | str | None = ()) -> Ranking:
        """The core ranking (every tool and end-of-plan, with probabilities)."""
        return self.retriever.rank(query, as_history(history), ignore_unknown=self.ignore_unknown)

    def _policy(self, k: int | None) -> SelectionPolicy:
        """The policy of a result: `policy` (with `k` if given), or one from the fields."""
        if self.policy is not None:
            return self.policy if k is None else dataclasses.replace(self.policy, k=k)
        return SelectionPolicy(
            k=self.k if k is None else k,
            threshold=self.threshold,
            include_end=self.include_end,
            respect_fallback=False,
            include_zero=True,
        )

    def _documents(
        self, query: str, k: int | None, history: Sequence[str] | str | None
    ) -> list[Document]:
        ranking = self.rank(query, history)
        policy = self._policy(None if k is None else _check_k(k))
        tokens = None
        if policy.max_schema_tokens is not None:  # counted as the runtime counts them
            counter = self.token_counter or get_token_counter()
            tokens = catalogue_schema_tokens(self.retriever.tools_, counter)
        selection = select(ranking, policy, schema_tokens=tokens)  # the one selection path
        tools = self.retriever.tools_
        method = str(ranking.explanation.get("method", type(self.retriever).__name__))
        docs = []
        for rank, (name, p) in enumerate(
            zip(selection.names, selection.probabilities, strict=True), start=1
        ):
            tool = tools.get(name)
            content = END_OF_PLAN_CONTENT if tool is None else (tool.description or name)
            docs.append(
                Document(
                    id=name,
                    page_content=content,
                    metadata={
                        "name": name,
                        "probability": float(p),
                        "rank": rank,
                        "why": selection.why.get(name, ranking.why(name)),
                        "method": method,
                        "fallback": ranking.fallback,
                        "fallback_reason": ranking.fallback_reason,
                    },
                )
            )
        return docs

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        history: Sequence[str] | str | None = None,
    ) -> list[Document]:
        """The best `k` tools for the next step after `history` (names of the calls so far)."""
        return self._documents(query, k, history)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        history: Sequence[str] | str | None = None,
    ) -> list[Document]:
        """Async `_get_relevant_documents` (ranking runs in a worker thread)."""
        return await asyncio.to_thread(self._documents, query, k, history)
