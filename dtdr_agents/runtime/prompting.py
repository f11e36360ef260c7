"""What one step gives a tool-calling model: the bound tools, the guidance text, its tokens.

`build_tool_prompt` puts the retrieved tools into a step's prompt for any mask mode (DTDR paper,
Section 5). Integrations that bind tools through a provider's tool-calling API (LangChain,
LangGraph, the OpenAI client) give the model the tool schemas through the API and add only
`ToolPrompt.text` to the system message.

The text itself lives in `dtdr_agents.runtime.masks` (Appendix G: guidelines, notes, the
function list and selection prompt for text-only agents) and `dtdr_agents.runtime.icl` (the
end-to-end instructions and demonstrations); token counts in `dtdr_agents.runtime.tokens`
(tiktoken when its encoding is available offline, else the bundled MiniLM WordPiece tokenizer,
else ``ceil(chars / 4)``). Every name imports from here as well.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dtdr_agents.foundation.types import Toolset
from dtdr_agents.runtime.icl import (
    AGENT_INSTRUCTIONS,
    END_PLAN_DESCRIPTION,
    EXAMPLE_HEADER,
    RAW_DEMOS_HEADER,
    render_demonstration,
)
from dtdr_agents.runtime.masks import (
    CHOOSE_ONE,
    FUNCTION_LIST_HEADER,
    MASK_MODES,
    WEIGHTED_LIST_HEADER,
    MaskMode,
    binds_all_tools,
    check_mode,
    format_history,
    is_weighted,
    render_function_list,
    render_selection_prompt,
    soft_mask_guidelines,
    weighted_hard_note,
)
from dtdr_agents.runtime.tokens import (
    CharApproxCounter,
    TiktokenCounter,
    TokenCounter,
    WordPieceCounter,
    catalogue_schema_tokens,
    count_tokens,
    get_token_counter,
    tool_schema_tokens,
)

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
