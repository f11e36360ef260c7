"""`DTDRObjectRetriever`: a LlamaIndex `ObjectRetriever` over an agent's tools.

LlamaIndex asks an agent's ``tool_retriever`` twice per step: with the user message before a
model call (which tools to offer) and with a tool's name when it runs a call (which tool
object to run). The retriever answers the first with the dtdr-agents selection and the second
with an exact name look-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Unpack

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.objects.base import ObjectRetriever
from llama_index.core.objects.tool_node_mapping import SimpleToolNodeMapping, convert_tool_to_node
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.tools.types import BaseTool

from dtdr_agents.foundation.errors import InvalidToolError, UnknownToolError
from dtdr_agents.foundation.types import Tool
from dtdr_agents.runtime import (
    SelectionKeywords,
    StepRecord,
    StepSelector,
    check_tool_list,
    resolve_policy,
)
from dtdr_agents.runtime.prompting import TokenCounter

__all__ = ["DTDRObjectRetriever", "core_tool", "model_name", "name_map"]


def core_tool(tool: BaseTool) -> Tool:
    """The dtdr-agents `Tool` (name, description, JSON schema) of a LlamaIndex tool."""
    meta = tool.metadata
    if not meta.name:
        raise InvalidToolError(f"a LlamaIndex tool has no name: {meta!r:.200}")
    return Tool(
        name=meta.name, description=meta.description or "", parameters=meta.get_parameters_dict()
    )


def model_name(tool: BaseTool) -> str:
    """The name the model sees for `tool`: LlamaIndex's own OpenAI tool schema's name.

    LlamaIndex sanitises it (``ToolMetadata.to_openai_tool`` replaces every character
    outside ``[a-zA-Z0-9_-]`` with ``_``), so ``"météo du jour"`` is offered, and called, as
    ``"m_t_o_du_jour"``.
    """
    function = tool.metadata.to_openai_tool(skip_length_check=True).get("function", {})
    return str(function.get("name") or tool.metadata.name)


def name_map(tools: Sequence[BaseTool]) -> dict[str, str]:
    """Every name a model may call one of `tools` by -> that tool's own (catalogue) name.

    Both a tool's own name (LLMs that send it as is) and its `model_name` (LLMs that send
    LlamaIndex's OpenAI tool schema) map to it.

    Raises:
        InvalidToolError: Two tools get the same sanitised name (the model could not tell
            them apart).
    """
    names = {str(t.metadata.name): str(t.metadata.name) for t in tools}
    sanitised: dict[str, str] = {}
    for tool in tools:
        name, seen = str(tool.metadata.name), model_name(tool)
        other = sanitised.setdefault(seen, name)
        if other != name:
            raise InvalidToolError(
                f"the tool names {other!r} and {name!r} both reach the model as {seen!r} "
                "(LlamaIndex replaces characters outside [a-zA-Z0-9_-] with '_'), so a call "
                "could not be told apart: rename one of them"
            )
    return {**sanitised, **names}


def _check_unique(tools: Sequence[BaseTool]) -> None:
    seen: dict[str, int] = {}
    for pos, tool in enumerate(tools):
        if not isinstance(tool, BaseTool):
            raise TypeError(
                f"tools[{pos}] must be a LlamaIndex tool (e.g. FunctionTool.from_defaults(fn)), "
                f"got {type(tool).__name__}"
            )
        name = tool.metadata.name or ""
        if name in seen:
            raise InvalidToolError(
                f"duplicate tool name {name!r} (tools[{seen[name]}] and tools[{pos}]): LlamaIndex "
                "finds the tool to run by name, so names must be unique"
            )
        seen[name] = pos


class _NodeRetriever(BaseRetriever):
    """The LlamaIndex node retriever behind `DTDRObjectRetriever` (one node per tool)."""

    def __init__(self, owner: DTDRObjectRetriever) -> None:
        super().__init__()
        self._owner = owner

    def _nodes(self, query: str) -> list[NodeWithScore]:
        owner = self._owner
        if query in owner.tools_by_name:  # LlamaIndex looks a tool up by name to run it
            return [NodeWithScore(node=convert_tool_to_node(owner.tools_by_name[query]), score=1.0)]
        step = owner.select(query)
        probs = dict(zip(step.selection.names, step.selection.probabilities, strict=True))
        return [
            NodeWithScore(
                node=convert_tool_to_node(owner.tools_by_name[n]), score=probs.get(n, 0.0)
            )
            for n in step.bound
        ]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(query_bundle.query_str)


class DTDRObjectRetriever(ObjectRetriever[BaseTool]):
    """A LlamaIndex `ObjectRetriever` over the agent's tools, ranked by a dtdr-agents retriever.

    Give it to ``FunctionAgent(tool_retriever=...)``: before each model call the agent gets
    the selected tools for the user message, and when the model calls a tool, the look-up by
    the tool's exact name returns that tool. A plain `FunctionAgent` only passes the user
    message, so the selection ignores the calls made so far; `DTDRFunctionAgent` passes them.

    Args:
        tools: The agent's LlamaIndex tools; names must be unique.
        retriever: A fitted core retriever (any id of `make_retriever`) ranking exactly these
            tools' names.
            None: `hybrid` fitted on these tools alone (no demonstrations yet).
        token_counter: Token counter for the prompt figures.
        **selection: ``k``, ``policy``, ``mode``, ``cache`` (and the deprecated
            ``binding``): `dtdr_agents.runtime.SelectionKeywords`.

    Raises:
        InvalidToolError: Duplicate tool names.
        TypeError: A tool is not a LlamaIndex tool.
        CatalogueMismatchError: The retriever was fitted on another catalogue.
    """

    def __init__(
        self,
        tools: Sequence[BaseTool],
        retriever: Any = None,
        *,
        token_counter: TokenCounter | None = None,
        **selection: Unpack[SelectionKeywords],
    ) -> None:
        tools = check_tool_list(tools)
        _check_unique(tools)
        self.tools = tools
        self.tools_by_name: dict[str, BaseTool] = {str(t.metadata.name): t for t in tools}
        self.policy = resolve_policy(**selection)
        core = [core_tool(t) for t in tools]
        self.selector = StepSelector(
            core, retriever, policy=self.policy, token_counter=token_counter
        )
        super().__init__(
            retriever=_NodeRetriever(self),
            object_node_mapping=SimpleToolNodeMapping.from_objects(tools),
        )

    def select(
        self, query: str, history: Sequence[str] = (), *, previous: StepRecord | None = None
    ) -> StepRecord:
        """The dtdr-agents step for `query` after the calls `history` (see `StepSelector`)."""
        return self.selector.select(query, history, previous=previous)

    def tools_for(self, names: Sequence[str]) -> list[BaseTool]:
        """The tools called `names`, in that order.

        Raises:
            UnknownToolError: A name is not one of the tools.
        """
        missing = [n for n in names if n not in self.tools_by_name]
        if missing:
            raise UnknownToolError(f"unknown tools: {missing}", tuple(missing))
        return [self.tools_by_name[n] for n in names]
