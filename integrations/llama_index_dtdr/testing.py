"""Offline helpers for tests and examples: LlamaIndex tools with given JSON schemas."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.tools import FunctionTool, ToolMetadata

from dtdr_agents.foundation.types import Tool, Toolset

__all__ = ["SchemaToolMetadata", "llama_tools"]


@dataclass
class SchemaToolMetadata(ToolMetadata):
    """`ToolMetadata` whose parameters are a JSON schema (no pydantic model needed).

    Attributes:
        parameters: The JSON schema of the tool's arguments.
    """

    parameters: Mapping[str, Any] = field(default_factory=dict)

    def get_parameters_dict(self) -> dict[str, Any]:
        """The JSON schema sent to the model."""
        return dict(self.parameters) or {"type": "object", "properties": {}}


def llama_tools(tools: Sequence[Tool] | Toolset) -> list[FunctionTool]:
    """LlamaIndex tools with the given schemas whose functions return a canned result."""

    def make(tool: Tool) -> FunctionTool:
        def run(**kwargs: Any) -> str:
            return json.dumps({"tool": tool.name, "args": kwargs, "status": "ok"}, sort_keys=True)

        meta = SchemaToolMetadata(
            description=tool.description,
            name=tool.name,
            fn_schema=None,
            parameters=dict(tool.parameters),
        )
        return FunctionTool.from_defaults(fn=run, tool_metadata=meta)

    return [make(t) for t in tools]
