"""Offline helpers for tests and examples: Agents SDK tools and a plan-following model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from agents import FunctionTool, Model, ModelResponse, Usage
from agents.tool_context import ToolContext
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputRefusal,
    ResponseOutputText,
)

from dtdr_agents.foundation.types import Tool, Toolset
from openai_agents_dtdr.selection import current_turn

__all__ = ["PlanModel", "agents_tools"]


def agents_tools(tools: Sequence[Tool] | Toolset) -> list[FunctionTool]:
    """Agents SDK function tools with the given schemas that return a canned result."""

    def make(tool: Tool) -> FunctionTool:
        async def run(ctx: ToolContext[Any], arguments: str) -> str:
            args = json.loads(arguments or "{}")
            return json.dumps({"tool": tool.name, "args": args, "status": "ok"}, sort_keys=True)

        return FunctionTool(
            name=tool.name,
            description=tool.description,
            params_json_schema=dict(tool.parameters),
            on_invoke_tool=run,
            strict_json_schema=False,
        )

    return [make(t) for t in tools]


class PlanModel(Model):
    """A scripted Agents SDK model that plays each request's recorded plan (no LLM).

    It calls the next planned tool when it was offered, answers that no offered tool fits
    when it was not, and answers ``Done: a -> b.`` once the plan is complete. ``offered``
    keeps the tool names offered at each call.

    Args:
        plans: Request text -> tool names in call order.
        args_for: Arguments of a call of a tool (default: none).
    """

    def __init__(
        self,
        plans: Mapping[str, Sequence[str]],
        args_for: Callable[[str], Mapping[str, Any]] | None = None,
    ) -> None:
        self.plans = {q: tuple(p) for q, p in plans.items()}
        self.args_for = args_for
        self.offered: list[list[str]] = []

    @staticmethod
    def _message(text: str) -> ResponseOutputMessage:
        content: list[ResponseOutputText | ResponseOutputRefusal] = [
            ResponseOutputText(type="output_text", text=text, annotations=[])
        ]
        return ResponseOutputMessage(
            id="msg", type="message", role="assistant", status="completed", content=content
        )

    async def get_response(
        self,
        system_instructions: Any,
        input: Any,
        model_settings: Any,
        tools: Any,
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        """The next call of the plan, or the answer."""
        offered = [str(getattr(t, "name", "")) for t in tools]
        self.offered.append(offered)
        request, calls = current_turn(input)
        plan = self.plans[request]
        if len(calls) >= len(plan):
            output: list[Any] = [self._message(f"Done: {' -> '.join(plan)}.")]
        elif plan[len(calls)] not in offered:
            output = [self._message(f"No offered tool can do {plan[len(calls)]}.")]
        else:
            name = plan[len(calls)]
            arguments = dict(self.args_for(name)) if self.args_for is not None else {}
            call_id = f"call_{len(self.offered)}"
            output = [
                ResponseFunctionToolCall(
                    type="function_call",
                    id=call_id,
                    call_id=call_id,
                    name=name,
                    arguments=json.dumps(arguments),
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """Not supported: the scripted model answers whole responses."""
        raise NotImplementedError("PlanModel does not stream; use Runner.run")
