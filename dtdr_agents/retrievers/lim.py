"""Less-is-More search level 1 ("lim", Paramanayakam et al., 2025) as a QTS baseline.

A chat model describes the ideal tools for the query and that description is matched by QTS.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, Unpack

import numpy as np

from dtdr_agents.foundation.chat import ChatModel, Message, invoke_text
from dtdr_agents.foundation.errors import ChatModelError
from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.retrievers.base import Scores
from dtdr_agents.retrievers.bm25 import split_identifiers
from dtdr_agents.retrievers.saving import LoadOptions
from dtdr_agents.retrievers.similarity import SimilarityRetriever

LIM_SYSTEM_PROMPT = (
    "You are a tool recommender for an AI agent that solves user requests by calling "
    "functions. Given a user request, think about the ideal set of functions (tools) the agent "
    "would need to solve it, and describe each ideal tool: a short snake_case name and one "
    "sentence saying what the tool does. Do not solve the request and do not call any tool. "
    'Answer only with JSON of the form {"tools": [{"name": "...", "description": "..."}]}, '
    "one entry per tool the request needs."
)
"""System prompt asking for the ideal tools. The DTDR paper names a "Less is More Thought
Prompt" (Algorithm 7) but does not print it (its Appendix G shows only the function-selection
and parameter-filling prompts); this one is written after Less-is-More's description of its
tool recommender (the LLM describes the ideal tools for the query, in JSON)."""

LIM_USER_PROMPT = "User request: {query}"
"""User message template; `{query}` is replaced by the user's request."""

_JSON_START = re.compile(r"[\[{]")
_MAX_JSON_TRIES = 64


def _tool_line(item: Any) -> str:
    if isinstance(item, str):
        return item.strip()
    if isinstance(item, dict):
        name = str(item.get("name") or "").strip()
        desc = str(item.get("description") or "").strip()
        return f"{split_identifiers(name)}: {desc}" if name and desc else name or desc
    return ""


def parse_ideal_tools(text: str) -> list[str]:
    """The ideal-tool descriptions in a Less-is-More answer.

    Reads the first JSON value in the answer (so code fences and surrounding prose are fine)
    that is `{"tools": [...]}`, a list, or one tool object; each tool is `{"name",
    "description"}` or a string. Returns one "name: description" string per tool. An answer
    with no such JSON is returned whole, as one description.
    """
    decoder = json.JSONDecoder()
    for n, match in enumerate(_JSON_START.finditer(text)):
        if n >= _MAX_JSON_TRIES:
            break
        try:
            data, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        items = data.get("tools", [data]) if isinstance(data, dict) else data
        if not isinstance(items, list):
            continue
        out = [line for line in map(_tool_line, items) if line]
        if out:
            return out
    stripped = text.strip()
    return [stripped] if stripped else []


class LessIsMoreRetriever(SimilarityRetriever):
    """Less-is-More search level 1 (Paramanayakam et al., 2025) as a QTS baseline.

    Once per query, a chat model describes the ideal tools for the request (prompt:
    `LIM_SYSTEM_PROMPT`, `LIM_USER_PROMPT`); the description is embedded and the catalogue is
    ranked by cosine similarity to it (Algorithm 7 with `qts_method` "less_is_more"). The DTDR
    paper uses the same LLM for this as for function selection. The answer is cached per query
    (with the retriever's other per-query results), so the evaluation's and an agent's later
    steps cost no LLM call.

    `match="joint"` (Algorithm 7) embeds the whole answer as one text; `match="each"` embeds
    every ideal tool separately and scores a tool by its best similarity to any of them (closer
    to Less-is-More's own per-tool search). If the chat model answers with no text, the query
    itself is embedded (vanilla QTS for that query; the explanation says so).

    Any object with `invoke(messages)` works (see `dtdr_agents.foundation.chat.ChatModel`): a
    LangChain chat model, `dtdr_agents.foundation.chat.OpenAIChat`, or a test double. Without
    one, `fit` and `rank` raise `ChatModelError`; `unavailable_reason(chat_model=...)` says so
    beforehand.

    Persistence: a chat model cannot be saved; `save` records the other parameters and
    `LessIsMoreRetriever.load(path, chat_model=...)` requires one. A model loaded through the
    generic `ToolRetriever.load` needs `set_params(chat_model=...)` before ranking.

    Args:
        chat_model: The chat model that writes the ideal-tool descriptions.
        system_prompt: System message; None uses `LIM_SYSTEM_PROMPT`.
        user_prompt: User message template with `{query}`; None uses `LIM_USER_PROMPT`.
        match: "joint" or "each" (see above).
        encoder: Encoder spec or object (see `get_encoder`).
        temperature: Softmax temperature over cosine similarities, or None (normalised).
        prior_weight: Weight of the query-similarity prior for tools added after fit.
    """

    retriever_id: ClassVar[str] = "lim"
    bench_default: ClassVar[bool] = True
    runtime_params: ClassVar[tuple[str, ...]] = ("chat_model",)

    chat_model: ChatModel | None = None
    system_prompt: str | None = None
    user_prompt: str | None = None
    match: Literal["joint", "each"] = "joint"

    @classmethod
    def unavailable_reason(cls, **params: Any) -> str | None:
        """Why this retriever cannot run with these parameters (no chat model), or None."""
        if params.get("chat_model") is None:
            return (
                "lim (Less-is-More) needs a chat model: pass chat_model= (a LangChain chat "
                "model, dtdr_agents.foundation.chat.OpenAIChat(...), or any object with "
                "invoke(messages))"
            )
        return None

    def _require_chat_model(self) -> ChatModel:
        model = self.chat_model
        if model is None:
            reason = self.unavailable_reason(chat_model=None)
            raise ChatModelError(f"{reason}; after load, use set_params(chat_model=...)")
        if not callable(getattr(model, "invoke", None)):
            raise ChatModelError(
                f"chat_model must have an invoke(messages) method, got {type(model).__name__}"
            )
        return model

    def _fit(self, demos: list[Demonstration], tools: Toolset) -> None:
        self._require_chat_model()
        if self.match not in ("joint", "each"):
            raise ValueError(f"match must be 'joint' or 'each', got {self.match!r}")
        if "{query}" not in (self.user_prompt or LIM_USER_PROMPT):
            raise ValueError("user_prompt must contain '{query}'")

    def messages(self, query: str) -> list[Message]:
        """The chat messages sent for `query`."""
        user = (self.user_prompt or LIM_USER_PROMPT).replace("{query}", query)
        return [("system", self.system_prompt or LIM_SYSTEM_PROMPT), ("human", user)]

    def ideal_tools(self, query: str) -> str:
        """The chat model's ideal-tool answer for `query` (asked once, then cached)."""
        self._check_fitted()
        return self._memo(query, "ideal_tools", self._ask)

    def _ask(self, query: str) -> str:
        return invoke_text(self._require_chat_model(), self.messages(query))

    def _query_embeddings(self, query: str) -> tuple[np.ndarray, dict[str, Any]]:
        assert self.encoder_ is not None
        descriptions = parse_ideal_tools(self.ideal_tools(query))
        if not descriptions:
            vec = self._query_vector(query)[None, :]
            return vec, {"ideal_tools": "(no answer: embedded the query)"}
        texts = ["\n".join(descriptions)] if self.match == "joint" else descriptions
        shown = "; ".join(descriptions)
        return self.encoder_.encode(texts), {
            "ideal_tools": shown if len(shown) <= 200 else shown[:197] + "..."
        }

    def _score(self, query: str, history: tuple[str, ...]) -> Scores:
        self._require_chat_model()
        return super()._score(query, history)

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        model = self.chat_model
        return {"chat_model": None if model is None else repr(model)[:200]}, {}

    def _set_state(self, state: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """Nothing to restore: the chat model is passed to `load`."""

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        chat_model: ChatModel | None = None,
        **options: Unpack[LoadOptions],
    ) -> LessIsMoreRetriever:
        """Load a saved Less-is-More retriever; `chat_model` is required (it is not saved).

        Other options: see `dtdr_agents.retrievers.saving.load_retriever`.

        Raises:
            ChatModelError: If `chat_model` is None.
        """
        params = options.get("params")
        chat_model = chat_model or (params or {}).get("chat_model")
        if chat_model is None:
            raise ChatModelError(
                "LessIsMoreRetriever.load needs chat_model=...: a chat model is not saved "
                "with the retriever"
            )
        options["params"] = {**(params or {}), "chat_model": chat_model}
        model = super().load(path, **options)
        assert isinstance(model, LessIsMoreRetriever)
        return model


__all__ = ["LIM_SYSTEM_PROMPT", "LIM_USER_PROMPT", "LessIsMoreRetriever", "parse_ideal_tools"]
