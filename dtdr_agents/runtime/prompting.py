"""Prompt text that encodes the retrieved tools, and token counts (DTDR paper, §5 and App. G).

The DTDR paper compares four ways of putting the retrieved tools `F_t` into the prompt:

* hard mask: only the retrieved tools are offered to the model;
* soft mask: every tool is offered, and the guidelines name the retrieved ones as preferred;
* weighted hard / weighted soft mask: the same, plus each retrieved tool's probability.

This module is the one place that holds that text. Integrations that bind tools through a
provider's tool-calling API (LangChain, LangGraph, the OpenAI client) give the model the tool
schemas through the API and add only `ToolPrompt.text` to the system message; agents that
prompt a model with plain text can render Appendix G's function list with
`render_function_list` and `render_selection_prompt`.

Token counts use, in order: `tiktoken` when its encoding is available offline (tiktoken
downloads encodings on first use; pass ``allow_download=True`` or set
``DTDR_AGENTS_ALLOW_DOWNLOADS=1`` to let it), else the WordPiece tokenizer of the bundled
all-MiniLM-L6-v2 model (an approximation of a chat model's tokenizer), else ``ceil(chars / 4)``.
Every count says which counter produced it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

from dtdr_agents.foundation.errors import EncoderUnavailableError
from dtdr_agents.foundation.types import Tool, Toolset

__all__ = [
    "AGENT_INSTRUCTIONS",
    "CHOOSE_ONE",
    "END_PLAN_DESCRIPTION",
    "EXAMPLE_HEADER",
    "FUNCTION_LIST_HEADER",
    "MASK_MODES",
    "RAW_DEMOS_HEADER",
    "WEIGHTED_LIST_HEADER",
    "CharApproxCounter",
    "MaskMode",
    "TiktokenCounter",
    "TokenCounter",
    "ToolPrompt",
    "WordPieceCounter",
    "binds_all_tools",
    "build_tool_prompt",
    "catalogue_schema_tokens",
    "check_mode",
    "count_tokens",
    "format_history",
    "get_token_counter",
    "is_weighted",
    "render_demonstration",
    "render_function_list",
    "render_selection_prompt",
    "soft_mask_guidelines",
    "tool_schema_tokens",
    "weighted_hard_note",
]

MaskMode = Literal["hard", "hard_weighted", "soft", "soft_weighted"]
"""How the retrieved tools reach the model (DTDR paper, Section 5)."""

MASK_MODES: tuple[MaskMode, ...] = get_args(MaskMode)

# --------------------------------------------------------------------------- Appendix G text
FUNCTION_LIST_HEADER = "Set of available functions and their descriptions:"
"""Heads the function list (Appendix G.1-G.3)."""

WEIGHTED_LIST_HEADER = (
    "Set of available functions, their descriptions, and the percentage of times they appear "
    "in the ground truth sequences of training queries right after this current function call "
    "history:"
)
"""Heads the function list of the weighted hard mask (Appendix G.4)."""

CHOOSE_ONE = "You will choose one of the function names above."
"""Closes every function list (Appendix G)."""

_SOFT_INTRO = (
    "To help guide your decision, here is a set of functions extracted from ground truth "
    "sequences of training queries. The functions in this list are functions that have come "
    'right after your latest function call history of "{history}"'
)
_SOFT_WEIGHTED_INTRO = (
    "To help guide your decision, here is a set of functions extracted from ground truth "
    "sequences of training queries, with the percentage of times each has come right after "
    'your latest function call history of "{history}"'
)
_SOFT_OUTRO = "Please use this to guide your decision-making on function selection."
_WEIGHTED_HARD_NOTE = (
    "The functions available at this step, with the percentage of times they appear in the "
    "ground truth sequences of training queries right after this current function call "
    'history of "{history}":'
)
_GUIDELINES_TITLE = "# Soft Mask guidelines"
_TOOL_GUIDANCE_TITLE = "# Tool guidance"


def check_mode(mode: str) -> MaskMode:
    """Validate a mask mode name.

    Args:
        mode: One of `MASK_MODES`.

    Returns:
        The mode, typed.

    Raises:
        ValueError: If `mode` is not a known mode.
    """
    if mode not in MASK_MODES:
        raise ValueError(f"unknown mask mode {mode!r}; choose one of {list(MASK_MODES)}")
    return mode


def binds_all_tools(mode: MaskMode) -> bool:
    """Whether the mode offers every tool to the model (the soft masks)."""
    return check_mode(mode).startswith("soft")


def is_weighted(mode: MaskMode) -> bool:
    """Whether the mode shows the retriever's probabilities."""
    return check_mode(mode).endswith("_weighted")


def format_history(history: Sequence[str], key: Sequence[str] | None = None) -> str:
    """The call history as the paper prints it: a tuple that starts with ``'start'``.

    Args:
        history: Tools called so far, in order.
        key: The history key the retriever used (e.g. DTDR-C's padded Markov key); shown
            instead of the full history when given.

    Returns:
        For example ``('start', 'create_note')``.
    """
    shown = tuple(key) if key else ("start", *history)
    return repr(shown)


def _round(p: float) -> float:
    return round(float(p), 3)


def render_function_list(
    tools: Sequence[Tool],
    probabilities: Mapping[str, float] | None = None,
    *,
    descriptions: bool = True,
) -> str:
    """The Python-literal function list of Appendix G.

    Args:
        tools: The tools to list, in the order to show.
        probabilities: When given, each entry carries its ``'probability'`` (rounded to 3
            decimals), as in the weighted masks.
        descriptions: Include each tool's ``'description'``.

    Returns:
        For example ``[{'function': 'a', 'description': 'Does a', 'probability': 0.714}]``.
    """
    entries: list[dict[str, Any]] = []
    for tool in tools:
        entry: dict[str, Any] = {"function": tool.name}
        if descriptions:
            entry["description"] = tool.description
        if probabilities is not None:
            entry["probability"] = _round(probabilities.get(tool.name, 0.0))
        entries.append(entry)
    return str(entries)


def soft_mask_guidelines(
    preferred: Sequence[str],
    history: Sequence[str] = (),
    *,
    probabilities: Mapping[str, float] | None = None,
    key: Sequence[str] | None = None,
) -> str:
    """The soft-mask guidelines of Appendix G.2 (weighted when `probabilities` is given).

    Args:
        preferred: Retrieved tool names, best first.
        history: Tools called so far, in order.
        probabilities: The retriever's probability of each preferred tool (weighted soft mask).
        key: The history key the retriever used, shown instead of `history`.

    Returns:
        The guidelines text.
    """
    shown = format_history(history, key)
    if probabilities is None:
        intro = _SOFT_INTRO.format(history=shown)
        listing = str(list(preferred))
    else:
        intro = _SOFT_WEIGHTED_INTRO.format(history=shown)
        listing = str(
            [{"function": n, "probability": _round(probabilities.get(n, 0.0))} for n in preferred]
        )
    return f"{_GUIDELINES_TITLE}\n{intro}\nThe list is below:\n{listing}\n{_SOFT_OUTRO}"


def weighted_hard_note(
    bound: Sequence[str],
    probabilities: Mapping[str, float],
    history: Sequence[str] = (),
    *,
    key: Sequence[str] | None = None,
) -> str:
    """The probabilities of the weighted hard mask, for models given the tools through an API.

    The tool schemas (with their descriptions) reach the model through the provider's tool
    list, so only names and probabilities are repeated here (Appendix G.4 adds the
    probability to each entry of the function list).

    Args:
        bound: The tools offered to the model, best first.
        probabilities: The retriever's probability of each.
        history: Tools called so far.
        key: The history key the retriever used, shown instead of `history`.

    Returns:
        The note text.
    """
    head = _WEIGHTED_HARD_NOTE.format(history=format_history(history, key))
    listing = str(
        [{"function": n, "probability": _round(probabilities.get(n, 0.0))} for n in bound]
    )
    return f"{_TOOL_GUIDANCE_TITLE}\n{head}\n{listing}"


def render_selection_prompt(
    query: str,
    history: Sequence[str],
    catalogue: Toolset,
    preferred: Sequence[str],
    probabilities: Mapping[str, float] | None = None,
    *,
    mode: MaskMode = "hard",
    key: Sequence[str] | None = None,
) -> str:
    """The test part of Appendix G's function-selection prompt, for text-only agents.

    Hard masks list only `preferred`; soft masks list the whole catalogue and add the
    guidelines; weighted modes add the probabilities.

    Args:
        query: The user's request.
        history: Tools called so far, in order (shown as the executed plan).
        catalogue: Every tool.
        preferred: Retrieved tool names, best first.
        probabilities: The retriever's probabilities (needed by the weighted modes).
        mode: The mask mode.
        key: The history key the retriever used, shown in the guidelines.

    Returns:
        The prompt text, ending with the executed plan.
    """
    mode = check_mode(mode)
    probs = dict(probabilities or {})
    parts: list[str] = []
    if mode.startswith("hard"):
        shown = [catalogue[catalogue.index(n)] for n in preferred]
        header = WEIGHTED_LIST_HEADER if mode == "hard_weighted" else FUNCTION_LIST_HEADER
        weights = probs if mode == "hard_weighted" else None
        parts.append(f"# Test Functions\n{header}\n{render_function_list(shown, weights)}")
        parts.append(CHOOSE_ONE)
    else:
        parts.append(
            f"# Test Functions\n{FUNCTION_LIST_HEADER}\n{render_function_list(list(catalogue))}"
        )
        parts.append(CHOOSE_ONE)
        weights = probs if mode == "soft_weighted" else None
        parts.append(soft_mask_guidelines(preferred, history, probabilities=weights, key=key))
    plan = "\n".join(f"out_{i} = {name}(...)" for i, name in enumerate(history, start=1))
    parts.append(
        "# Test Task\nNow choose the next function call for this task:\n"
        f"User query: {query!r}.\nExecuted plan so far:{(chr(10) + plan) if plan else ' None'}"
    )
    return "\n\n".join(parts)


# ------------------------------------------------------- end-to-end function calling (§5)
AGENT_INSTRUCTIONS = (
    "You are a function-calling agent. You solve the user's request as a plan of function "
    "calls, one call per turn. At each turn, call exactly one of the functions you are given: "
    "the next function of the plan. When every part of the request has been handled, call "
    "`{end}`."
)
"""System instructions of the end-to-end evaluation (`{end}` is the end-of-plan function)."""

END_PLAN_DESCRIPTION = (
    "Call this when every part of the user's request has been handled (the plan is complete)."
)
"""Description of the end-of-plan function bound at every step of the end-to-end evaluation."""

EXAMPLE_HEADER = "# Example\nHere is an example task and the plan of function calls that solves it:"
"""Heads the one example demonstration every prompt carries (Section 5: "1 randomly selected")."""

RAW_DEMOS_HEADER = (
    "# Demonstrations\nHere are solved tasks whose plans use functions relevant to this step:"
)
"""Heads the retrieved demonstrations of the Raw Demonstrations method (Section 5)."""


def render_demonstration(query: str, calls: Sequence[str], end: str) -> str:
    """One demonstration as text: the query, then its plan of calls ending with `end`.

    Example:
        >>> print(render_demonstration("Caption it", ["Image Captioning"], "end_plan"))
        Query: 'Caption it'
        Plan: Image Captioning -> end_plan
    """
    return f"Query: {query!r}\nPlan: {' -> '.join([*calls, end])}"


# ------------------------------------------------------------------------------ token counts
class TokenCounter(Protocol):
    """Counts the tokens of a text."""

    @property
    def name(self) -> str:
        """Which counter this is, e.g. ``"tiktoken:o200k_base"``."""
        ...

    @property
    def exact(self) -> bool:
        """True for a chat model's own tokenizer (tiktoken), False for an approximation."""
        ...

    @property
    def note(self) -> str:
        """Why this counter was chosen (e.g. why tiktoken was not used)."""
        ...

    def count(self, text: str) -> int:
        """Number of tokens of `text`."""
        ...


@dataclass
class TiktokenCounter:
    """OpenAI's tokenizer through `tiktoken` (exact for OpenAI models).

    Args:
        encoding: A tiktoken encoding object.
        encoding_name: Its name.
    """

    encoding: Any
    encoding_name: str
    note: str = "tiktoken encoding available"
    exact: bool = True

    @property
    def name(self) -> str:
        """``tiktoken:<encoding>``."""
        return f"tiktoken:{self.encoding_name}"

    def count(self, text: str) -> int:
        """Number of tokens of `text`."""
        return len(self.encoding.encode(text, disallowed_special=()))


@dataclass
class WordPieceCounter:
    """The WordPiece tokenizer of the bundled all-MiniLM-L6-v2 model (an approximation).

    BERT's uncased WordPiece vocabulary (30k entries) splits English text and JSON into about
    as many tokens as a chat model's BPE tokenizer, within roughly 10-25%.

    Args:
        tokenizer: A `tokenizers.Tokenizer`.
    """

    tokenizer: Any
    note: str = ""
    name: str = "wordpiece:all-MiniLM-L6-v2"
    exact: bool = False

    def count(self, text: str) -> int:
        """Number of tokens of `text` (without the [CLS]/[SEP] markers)."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


@dataclass
class CharApproxCounter:
    """``ceil(len(text) / 4)``: OpenAI's rule of thumb for English text (an approximation)."""

    note: str = ""
    name: str = "approx:chars/4"
    exact: bool = False

    def count(self, text: str) -> int:
        """Approximate number of tokens of `text`."""
        return math.ceil(len(text) / 4)


_TIKTOKEN_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}
_COUNTERS: dict[tuple[str, bool], TokenCounter] = {}
_COUNTERS_LOCK = threading.Lock()


def _tiktoken_cached(encoding: str) -> bool:
    """Whether tiktoken can load `encoding` without the network (its file cache holds it)."""
    url = _TIKTOKEN_URLS.get(encoding)
    if url is None:
        return False
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        cache_dir = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        cache_dir = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if not cache_dir:
        return False
    return (Path(cache_dir) / hashlib.sha1(url.encode()).hexdigest()).is_file()


def _load_tiktoken(encoding: str, allow_download: bool) -> tuple[TokenCounter | None, str]:
    try:
        import tiktoken
    except ImportError:
        return None, "tiktoken is not installed (pip install 'dtdr-agents[tokens]')"
    if not allow_download and not _tiktoken_cached(encoding):
        return None, (
            f"tiktoken encoding {encoding!r} is not cached and downloads are off "
            "(set DTDR_AGENTS_ALLOW_DOWNLOADS=1 or pass allow_download=True)"
        )
    try:
        enc = tiktoken.get_encoding(encoding)
    except Exception as exc:  # network errors, corrupt cache, unknown encoding
        return None, f"tiktoken could not load {encoding!r}: {type(exc).__name__}: {exc}"[:300]
    return TiktokenCounter(enc, encoding), "tiktoken encoding available"


def _load_wordpiece(note: str = "") -> tuple[TokenCounter | None, str]:
    from dtdr_agents.foundation.encoders import bundled_minilm_path

    root = bundled_minilm_path()
    if root is None or not (Path(root) / "tokenizer.json").is_file():
        return None, "the bundled all-MiniLM-L6-v2 tokenizer is not installed"
    try:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(Path(root) / "tokenizer.json"))
        tok.no_truncation()
        tok.no_padding()
    except Exception as exc:
        return None, f"could not load the MiniLM tokenizer: {type(exc).__name__}: {exc}"[:300]
    return WordPieceCounter(tok, note=note), ""


def get_token_counter(prefer: str = "auto", *, allow_download: bool | None = None) -> TokenCounter:
    """Resolve a token counter (cached per process).

    Args:
        prefer: ``"auto"`` (tiktoken ``o200k_base`` if available offline, else the MiniLM
            WordPiece tokenizer, else ``chars/4``), ``"tiktoken"`` or a tiktoken encoding name
            (``"o200k_base"``, ``"cl100k_base"``), ``"wordpiece"``, or ``"approx"``.
        allow_download: Let tiktoken download its encoding. None reads the environment
            variable ``DTDR_AGENTS_ALLOW_DOWNLOADS`` (``"1"`` allows); off by default.

    Returns:
        The counter; its `name` and `note` say which one it is and why.

    Raises:
        EncoderUnavailableError: If a specific counter was asked for and cannot load.
        ValueError: If `prefer` is unknown.
    """
    if allow_download is None:
        allow_download = os.environ.get("DTDR_AGENTS_ALLOW_DOWNLOADS", "") == "1"
    key = (prefer, allow_download)
    with _COUNTERS_LOCK:
        cached = _COUNTERS.get(key)
        if cached is not None:
            return cached
        counter = _resolve_counter(prefer, allow_download)
        _COUNTERS[key] = counter
        return counter


def _resolve_counter(prefer: str, allow_download: bool) -> TokenCounter:
    if prefer == "approx":
        return CharApproxCounter(note="asked for")
    if prefer == "wordpiece":
        wp, why = _load_wordpiece()
        if wp is None:
            raise EncoderUnavailableError(why)
        return wp
    if prefer == "tiktoken" or prefer in _TIKTOKEN_URLS:
        encoding = "o200k_base" if prefer == "tiktoken" else prefer
        tk, why = _load_tiktoken(encoding, allow_download)
        if tk is None:
            raise EncoderUnavailableError(why)
        return tk
    if prefer != "auto":
        raise ValueError(
            f"unknown token counter {prefer!r}; choose 'auto', 'tiktoken', "
            f"{', '.join(repr(e) for e in _TIKTOKEN_URLS)}, 'wordpiece' or 'approx'"
        )
    tk, why_tk = _load_tiktoken("o200k_base", allow_download)
    if tk is not None:
        return tk
    wp, why_wp = _load_wordpiece(note=f"fallback: {why_tk}")
    if wp is not None:
        return wp
    return CharApproxCounter(note=f"fallback: {why_tk}; {why_wp}")


def count_tokens(text: str, counter: TokenCounter | None = None) -> int:
    """Tokens of `text` with `counter` (default: `get_token_counter()`)."""
    return (counter or get_token_counter()).count(text)


def tool_schema_tokens(tool: Tool, counter: TokenCounter | None = None) -> int:
    """Tokens of a tool's OpenAI schema as JSON (a proxy for what a provider puts in the prompt)."""
    return count_tokens(json.dumps(tool.to_openai(), ensure_ascii=False), counter)


# ----------------------------------------------------------------------------- tool prompts
@dataclass(frozen=True)
class ToolPrompt:
    """What one step gives the model: the bound tools and the text to add to the system message.

    Attributes:
        mode: The mask mode.
        bound: Names of the tools offered to the model, in catalogue order.
        preferred: The retrieved tool names, best first.
        probabilities: The retriever's probability of each preferred tool.
        text: Text to add to the system message ("" for the plain hard mask).
        text_tokens: Tokens of `text`.
        tool_tokens: Tokens of the bound tools' schemas.
        all_tool_tokens: Tokens of every tool's schema (what binding all tools would cost).
        counter: Name of the token counter used.
    """

    mode: MaskMode
    bound: tuple[str, ...]
    preferred: tuple[str, ...]
    probabilities: Mapping[str, float] = field(default_factory=dict)
    text: str = ""
    text_tokens: int = 0
    tool_tokens: int = 0
    all_tool_tokens: int = 0
    counter: str = ""

    @property
    def saved_tokens(self) -> int:
        """Prompt tokens saved against binding every tool with no guidance text."""
        return self.all_tool_tokens - self.tool_tokens - self.text_tokens


class _SchemaTokenCache:
    """Per-counter memo of tool schema token counts (schemas do not change within a catalogue)."""

    def __init__(self) -> None:
        self._memo: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def get(self, tool: Tool, counter: TokenCounter) -> int:
        key = (counter.name, json.dumps(tool.to_dict(), sort_keys=True, ensure_ascii=False))
        with self._lock:
            hit = self._memo.get(key)
        if hit is not None:
            return hit
        n = tool_schema_tokens(tool, counter)
        with self._lock:
            if len(self._memo) > 100_000:
                self._memo.clear()
            self._memo[key] = n
        return n


_SCHEMA_TOKENS = _SchemaTokenCache()


def catalogue_schema_tokens(catalogue: Toolset, counter: TokenCounter) -> dict[str, int]:
    """Schema token counts of every tool of `catalogue` (memoised per tool and counter)."""
    return {t.name: _SCHEMA_TOKENS.get(t, counter) for t in catalogue}


def build_tool_prompt(
    mode: MaskMode,
    catalogue: Toolset,
    preferred: Sequence[str],
    probabilities: Mapping[str, float] | None = None,
    *,
    history: Sequence[str] = (),
    key: Sequence[str] | None = None,
    bound: Sequence[str] | None = None,
    counter: TokenCounter | None = None,
    schema_tokens: Mapping[str, int] | None = None,
) -> ToolPrompt:
    """Build what one step gives a tool-calling model, for any mask mode.

    Hard modes bind `bound` (default: `preferred`) in catalogue order; soft modes bind the
    whole catalogue. The text names the preferred tools (soft), adds probabilities (weighted),
    or is empty (hard).

    Args:
        mode: The mask mode.
        catalogue: Every tool, in the order tools are bound.
        preferred: The retrieved tool names, best first.
        probabilities: The retriever's probability per name (used by the weighted modes).
        history: Tools called so far, in order.
        key: The history key the retriever used (e.g. DTDR-C's Markov key), shown in the text.
        bound: Names to bind in the hard modes when they differ from `preferred` (e.g. with
            always-included tools).
        counter: Token counter (default: `get_token_counter()`).
        schema_tokens: Precomputed schema token counts per tool name with `counter` (see
            `catalogue_schema_tokens`); computed (and memoised) when missing.

    Returns:
        The `ToolPrompt`.

    Raises:
        UnknownToolError: If a name is not in the catalogue.
        ValueError: If `mode` is unknown.
    """
    mode = check_mode(mode)
    counter = counter or get_token_counter()
    probs = {n: float(p) for n, p in (probabilities or {}).items()}
    preferred = tuple(preferred)
    if binds_all_tools(mode):
        bound_names = catalogue.names
    else:
        bound_names = catalogue.subset(preferred if bound is None else bound).names
    catalogue.subset(preferred)  # raises UnknownToolError for names outside the catalogue
    if mode == "hard":
        text = ""
    elif mode == "hard_weighted":
        ordered = sorted(bound_names, key=lambda n: -probs.get(n, 0.0))
        text = weighted_hard_note(ordered, probs, history, key=key)
    else:
        weights = probs if mode == "soft_weighted" else None
        text = soft_mask_guidelines(preferred, history, probabilities=weights, key=key)
    if schema_tokens is None:
        schema_tokens = catalogue_schema_tokens(catalogue, counter)
    tool_tokens = sum(schema_tokens[n] for n in bound_names)
    all_tokens = sum(schema_tokens[n] for n in catalogue.names)
    return ToolPrompt(
        mode=mode,
        bound=tuple(bound_names),
        preferred=preferred,
        probabilities={n: probs.get(n, 0.0) for n in preferred},
        text=text,
        text_tokens=counter.count(text) if text else 0,
        tool_tokens=tool_tokens,
        all_tool_tokens=all_tokens,
        counter=counter.name,
    )
