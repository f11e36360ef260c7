"""Offline helpers for tests and examples: Pydantic AI tools and a plan-following model."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import Tool as PydanticTool

from dtdr_agents.foundation.types import Tool, Toolset
from pydantic_ai_dtdr.selection import SEARCH_TOOL_NAME, current_turn

__all__ = ["PlanModel", "pydantic_tools"]


def pydantic_tools(
    tools: Sequence[Tool] | Toolset, *, defer_loading: bool = False
) -> list[PydanticTool[Any]]:
    """Pydantic AI tools with the given schemas whose functions return a canned result."""

    def make(tool: Tool) -> PydanticTool[Any]:
        def run(**kwargs: Any) -> str:
            return json.dumps({"tool": tool.name, "args": kwargs, "status": "ok"}, sort_keys=True)

        made = PydanticTool[Any].from_schema(
            run, name=tool.name, description=tool.description, json_schema=dict(tool.parameters)
        )
        made.defer_loading = defer_loading
        return made

    return [make(t) for t in tools]


class PlanModel(FunctionModel):
    """A scripted model that plays each request's recorded plan (no LLM, no network).

    It calls the next planned tool when it was offered, searches with the request when it
    was not and Pydantic AI's ``search_tools`` is offered (once per step), answers that no
    offered tool fits otherwise, and answers ``Done: a -> b.`` once the plan is complete.
    ``offered`` keeps the tool names offered at each call.

    Args:
        plans: Request text -> tool names in call order.
        args_for: Arguments of a call of a tool (default: none).
    """

    def __init__(
        self,
        plans: Mapping[str, Sequence[str]],
        args_for: Any = None,
    ) -> None:
        self.plans = {q: tuple(p) for q, p in plans.items()}
        self.args_for = args_for
        self.offered: list[list[str]] = []
        super().__init__(self._respond, model_name="plan-follower")

    def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        offered = [t.name for t in info.function_tools]
        self.offered.append(offered)
        turn = current_turn(messages, skip=(SEARCH_TOOL_NAME,))
        plan = self.plans[turn.request]
        if len(turn.calls) >= len(plan):
            return ModelResponse(parts=[TextPart(f"Done: {' -> '.join(plan)}.")])
        name = plan[len(turn.calls)]
        last = messages[-2] if len(messages) > 1 else None
        searched = isinstance(last, ModelResponse) and any(
            isinstance(p, ToolCallPart) and p.tool_name == SEARCH_TOOL_NAME for p in last.parts
        )
        if name not in offered and SEARCH_TOOL_NAME in offered and not searched:
            return ModelResponse(
                parts=[ToolCallPart(SEARCH_TOOL_NAME, {"queries": [turn.request]})]
            )
        if name not in offered:
            return ModelResponse(parts=[TextPart(f"No offered tool can do {name}.")])
        args = dict(self.args_for(name)) if self.args_for is not None else {}
        return ModelResponse(parts=[ToolCallPart(name, args)])
