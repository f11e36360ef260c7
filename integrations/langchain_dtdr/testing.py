"""Offline helpers for tests and examples: a scripted chat model, a plan follower, demo tools.

`ScriptedChatModel` records the tools bound at each call; `PlanFollower` plays each request's
recorded plan; `langchain_tools` turns the demo catalogue into LangChain tools.

Nothing here calls a network service; everything is deterministic.
"""

from __future__ import annotations

import functools
import itertools
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field, PrivateAttr

from dtdr_agents.foundation.types import Demonstration, Tool, Toolset
from dtdr_agents.retrievers import make_retriever
from dtdr_agents.retrievers.base import ToolRetriever
from langchain_dtdr.messages import NoRequestError, current_turn

__all__ = [
    "DemoSetup",
    "ModelCall",
    "PlanFollower",
    "Responder",
    "ScriptedChatModel",
    "answer",
    "call_tool",
    "demo_setup",
    "example_args",
    "langchain_tools",
]

Responder = Callable[[Sequence[BaseMessage], tuple[str, ...]], "AIMessage | str"]
"""Computes a reply from the messages sent and the names of the tools bound."""

_IDS = itertools.count(1)


def call_tool(
    name: str, args: Mapping[str, Any] | None = None, *, id: str | None = None
) -> AIMessage:
    """An AI message that calls one tool."""
    return AIMessage(
        content="",
        tool_calls=[
            {
                "name": name,
                "args": dict(args or {}),
                "id": id or f"call_{next(_IDS)}",
                "type": "tool_call",
            }
        ],
    )


def answer(text: str) -> AIMessage:
    """An AI message that answers (no tool call)."""
    return AIMessage(content=text)


@dataclass(frozen=True)
class ModelCall:
    """One call of a `ScriptedChatModel`.

    Attributes:
        tools: Names of the tools bound for this call, in the order they were given.
        messages: The messages sent.
        kwargs: Other call keywords (e.g. ``tool_choice``).
    """

    tools: tuple[str, ...]
    messages: tuple[BaseMessage, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def system(self) -> str:
        """Text of the system messages sent."""
        return "\n".join(m.text for m in self.messages if m.type == "system")


class _Log:
    """Mutable call log shared by a model and its bound / copied variants."""

    def __init__(self) -> None:
        self.calls: list[ModelCall] = []
        self.position = 0
        self.lock = threading.Lock()


class ScriptedChatModel(BaseChatModel):
    """A chat model that plays a script and records the tools bound at each call.

    Supports `bind_tools` like a real provider model (tools reach `_generate` as OpenAI
    schemas), so the tools an agent bound at each step can be asserted on `calls`.

    Attributes:
        responses: Replies played in order: AI messages, strings (answers), or responders
            called with (messages, bound tool names).
        responder: Used for every call after `responses` run out (or for all calls).
    """

    responses: list[Any] = Field(default_factory=list)
    responder: Any = None
    _log: _Log = PrivateAttr(default_factory=_Log)

    @property
    def _llm_type(self) -> str:
        return "scripted-chat"

    @property
    def calls(self) -> list[ModelCall]:
        """Every call so far."""
        return self._log.calls

    @property
    def bound_tools(self) -> list[tuple[str, ...]]:
        """The tool names bound at each call so far."""
        return [c.tools for c in self._log.calls]

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools as OpenAI schemas (like provider chat models do)."""
        formatted = [convert_to_openai_tool(t) for t in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=formatted, **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        tools = kwargs.pop("tools", None) or []
        names = tuple(str(t["function"]["name"]) for t in tools)
        log = self._log
        with log.lock:
            log.calls.append(ModelCall(names, tuple(messages), dict(kwargs)))
            position = log.position
            log.position += 1
        if position < len(self.responses):
            reply = self.responses[position]
        elif self.responder is not None:
            reply = self.responder
        else:
            raise ValueError(
                f"ScriptedChatModel: the script has {len(self.responses)} replies and no "
                f"responder; call {position + 1} has nothing to play"
            )
        if callable(reply) and not isinstance(reply, BaseMessage):
            reply = reply(messages, names)
        message = AIMessage(content=reply) if isinstance(reply, str) else reply.model_copy()
        return ChatResult(generations=[ChatGeneration(message=message)])


def example_args(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Placeholder arguments for a JSON schema's required properties."""
    props = parameters.get("properties") or {}
    out: dict[str, Any] = {}
    for name in parameters.get("required") or []:
        kind = (props.get(name) or {}).get("type", "string")
        out[name] = {
            "array": [f"<{name}>"],
            "integer": 1,
            "number": 1.0,
            "boolean": True,
            "object": {},
        }.get(kind, f"<{name}>")
    return out


class PlanFollower:
    """A responder that plays each request's plan: the next planned call, then an answer.

    It reads the turn's request and counts the tool results that succeeded, so it follows a
    plan across steps no matter which tools an agent binds.

    Args:
        plans: Request text -> tool names in call order.
        tools: The catalogue, for placeholder arguments (default: none).
        on_unbound: When the next planned tool is not bound: ``"call"`` it anyway (as a model
            that hallucinates a tool would), or ``"answer"`` that no tool fits.
    """

    def __init__(
        self,
        plans: Mapping[str, Sequence[str]],
        tools: Toolset | None = None,
        *,
        on_unbound: Literal["call", "answer"] = "call",
    ) -> None:
        self.plans = {q.strip(): tuple(p) for q, p in plans.items()}
        self.tools = tools
        self.on_unbound = on_unbound

    def __call__(self, messages: Sequence[BaseMessage], bound: tuple[str, ...]) -> AIMessage:
        """The next reply."""
        try:
            turn = current_turn(messages)
        except NoRequestError:
            return answer("There is no request to answer.")
        plan = self.plans.get(turn.request)
        if plan is None:
            return answer("I have no plan for this request.")
        done = sum(
            1
            for m in messages[turn.request_index + 1 :]
            if m.type == "tool" and getattr(m, "status", "success") != "error"
        )
        if done >= len(plan):
            return answer(f"Done: {' -> '.join(plan)}.")
        name = plan[done]
        if bound and name not in bound and self.on_unbound == "answer":
            return answer(f"None of the offered tools can do the next step ({name}).")
        tool = self.tools.get(name) if self.tools is not None else None
        return call_tool(name, example_args(tool.parameters) if tool is not None else {})


def langchain_tools(tools: Sequence[Tool] | Toolset) -> list[BaseTool]:
    """LangChain tools with the given schemas whose functions return a canned result."""

    def make(tool: Tool) -> BaseTool:
        def run(**kwargs: Any) -> str:
            return json.dumps({"tool": tool.name, "args": kwargs, "status": "ok"}, sort_keys=True)

        return StructuredTool.from_function(
            func=run,
            name=tool.name,
            description=tool.description,
            args_schema=dict(tool.parameters),
        )

    return [make(t) for t in tools]


@dataclass(frozen=True)
class DemoSetup:
    """The embedded demo data split in train / test, with a fitted retriever.

    Attributes:
        tools: The 21-tool assistant catalogue.
        train: Demonstrations the retriever was fitted on.
        test: Held-out demonstrations (their queries are new to the retriever).
        retriever: The fitted retriever (shared by every caller: do not mutate it).
    """

    tools: Toolset
    train: tuple[Demonstration, ...]
    test: tuple[Demonstration, ...]
    retriever: ToolRetriever

    def plans(self) -> dict[str, tuple[str, ...]]:
        """Query -> recorded calls of every demonstration."""
        return {d.query: d.calls for d in (*self.train, *self.test)}

    def args_for(self, name: str) -> dict[str, Any]:
        """Placeholder arguments of a call of the tool `name` (see `example_args`)."""
        tool = self.tools.get(name)
        return example_args(tool.parameters) if tool is not None else {}


def demo_setup(
    retriever: str = "dtdr-c",
    *,
    n_train: int = 300,
    n_test: int = 40,
    seed: int = 0,
    encoder: str = "default",
) -> DemoSetup:
    """Fit `retriever` on the embedded demo data (cached per process and arguments).

    Args:
        retriever: A `make_retriever` id.
        n_train: Demonstrations to fit on.
        n_test: Held-out demonstrations.
        seed: Seed of the generated data.
        encoder: Encoder spec ("default" is all-MiniLM-L6-v2, loaded once per process;
            "tfidf" needs no model and is faster to fit).

    Returns:
        The `DemoSetup`.
    """
    return _demo_setup(retriever, n_train, n_test, seed, encoder)


@functools.lru_cache(maxsize=16)
def _demo_setup(retriever: str, n_train: int, n_test: int, seed: int, encoder: str) -> DemoSetup:
    from dtdr_agents.datasets.synthetic import make_demo_dataset

    data = make_demo_dataset(n_train + n_test, seed=seed)
    train, test = tuple(data.demos[:n_train]), tuple(data.demos[n_train:])
    core = make_retriever(retriever)
    if "encoder" in core.get_params():  # BM25 and other lexical baselines take no encoder
        core.set_params(encoder=encoder)
    core.fit(train, data.tools)
    return DemoSetup(data.tools, train, test, core)
