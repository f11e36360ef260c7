"""The end-to-end protocol: one chat-completions request per teacher-forced step (paper §5, App. I).

For each step of each test plan the model gets the user's request, the calls made so far (as
assistant tool calls with their results, teacher-forced from the recorded plan), and the tools
the mode binds; it must call the next tool. Every prompt carries one seeded random
demonstration (Section 5: "1 randomly selected demonstration"). An end-of-plan function
(`end_plan`) is bound at every step: calling it is how the model says the plan is complete.

Modes:

* ``no_icl``: every tool, no retrieval (the only mode of retriever ``none``);
* ``raw_demos``: every tool, plus up to 5 training demonstrations whose plans use the
  retrieved tools;
* ``hard`` / ``hard_weighted``: only the retrieved tools (weighted: with their probabilities);
* ``soft`` / ``soft_weighted``: every tool, with the guidance text naming the retrieved ones.

Tool names are sent in an API-safe form (``[A-Za-z0-9_-]``, at most 64 characters, as the
OpenAI API requires); the model's answers are mapped back.

Parameter filling (the paper's Algorithm 2): after the model selects a function, the same
model fills its arguments in a second request (`ProtocolBuilder.argument_request`). That
prompt holds the request, the calls so far (teacher-forced with their recorded arguments and
result labels) and the one function's signature, which the request forces (``tool_choice``).
It does not depend on the retriever or the mode, so one answer serves every cell that
selected that function at that step.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dtdr_agents.foundation.selection import TOP_K, SelectionPolicy, select
from dtdr_agents.foundation.types import END_OF_PLAN, CallArguments, Demonstration, Tool, Toolset
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.runtime.prompting import (
    AGENT_INSTRUCTIONS,
    END_PLAN_DESCRIPTION,
    EXAMPLE_HEADER,
    RAW_DEMOS_HEADER,
    TokenCounter,
    build_tool_prompt,
    catalogue_schema_tokens,
    check_mode,
    render_demonstration,
)

E2E_MODES = ("no_icl", "raw_demos", "hard", "soft", "hard_weighted", "soft_weighted")
"""The ICL methods of the DTDR paper's Section 5 (Figure 3)."""

NO_RETRIEVER = "none"
"""The retriever id of the `no_icl` baseline (every tool, nothing retrieved)."""

END_TOOL = "end_plan"
"""The function the model calls to end a plan."""

ZERO_DEMOS = "@0demos"
"""Suffix of a retriever spec fitted on no demonstrations whose prompts carry none either
(``hybrid@0demos``: a new user with no recorded plans)."""


def split_spec(spec: str) -> tuple[str, bool]:
    """(retriever id, whether it runs with zero demonstrations) of a retriever spec.

    Raises:
        ValueError: For a spec that is only the suffix, or ``none`` with it (no-ICL binds every
            tool and has no demonstration to drop).
    """
    if not spec.endswith(ZERO_DEMOS):
        return spec, False
    base = spec[: -len(ZERO_DEMOS)]
    if not base or base == NO_RETRIEVER:
        raise ValueError(
            f"retriever spec {spec!r}: {ZERO_DEMOS} needs a retriever id before it "
            f"(e.g. hybrid{ZERO_DEMOS}); {NO_RETRIEVER!r} has no zero-demonstration variant"
        )
    return base, True


MAX_RAW_DEMOS = 5
"""Demonstrations added by `raw_demos` (Section 5: "up to 5 additional demonstrations")."""

TOOL_RESULT = "Done."
"""The result shown for each teacher-forced call (the calls are not executed)."""

ARGUMENT_INSTRUCTIONS = (
    "You fill in the arguments of one function call that answers part of the user's request. "
    "Call the function {name} with every argument the request gives, as the values are "
    "written in the request. To pass the result of an earlier call, write its result label "
    "where the value goes, as the calls so far do."
)
"""System message of a parameter-filling request (``{name}`` is the function)."""

RECORDED_FIELDS = ("bound", "preferred", "prompt_text")
"""What a step-cache row records of the prompt it answered, beyond its key (`StepRequest.recorded`).

With the step's frame (instructions, example, request, calls so far: no float in it), these
rebuild that prompt exactly, so a replay needs no retriever to give the same probabilities
to 3 decimals again (`ProtocolBuilder.recorded_request`)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def prompt_fingerprint(messages: Sequence[Mapping[str, Any]], tools: Sequence[Any]) -> str:
    """SHA-256 of a request's messages and tools: the content part of its step-cache key."""
    body = {"messages": list(messages), "tools": list(tools)}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def api_names(names: Sequence[str], reserved: Sequence[str] = (END_TOOL,)) -> dict[str, str]:
    """API-safe, unique function names for `names` (``[A-Za-z0-9_-]``, at most 64 characters).

    Args:
        names: The catalogue's tool names.
        reserved: Names no tool may take (the end-of-plan function).

    Returns:
        Catalogue name -> API name (unchanged when already safe and free).
    """
    taken = set(reserved)
    out: dict[str, str] = {}
    for name in names:
        base = (_UNSAFE.sub("_", name.strip()) or "tool")[:64]
        candidate, n = base, 1
        while candidate in taken:
            n += 1
            suffix = f"_{n}"
            candidate = base[: 64 - len(suffix)] + suffix
        taken.add(candidate)
        out[name] = candidate
    return out


@dataclass(frozen=True)
class E2EStep:
    """One teacher-forced step of a test plan (names are API names).

    Attributes:
        plan: Index of the test plan.
        step: Index of the step in the plan (0 = first call).
        query: The user's request.
        history: Calls made so far.
        acceptable: Acceptable next calls (`END_TOOL` at the last step).
        plan_length: Calls in the plan (end-of-plan not counted).
        plan_id: The dataset's id of the plan, if any.
        history_arguments: Recorded arguments of the calls so far (None: the dataset has
            none).
        gold_arguments: (API name, recorded arguments) of each call that may come next
            (None: the dataset has no arguments; empty at the plan's end).
    """

    plan: int
    step: int
    query: str
    history: tuple[str, ...]
    acceptable: frozenset[str]
    plan_length: int
    plan_id: str | None = None
    history_arguments: tuple[CallArguments, ...] | None = None
    gold_arguments: tuple[tuple[str, CallArguments], ...] | None = None

    def gold_for(self, name: str) -> list[dict[str, Any]]:
        """The recorded arguments of the acceptable calls of `name` (API name)."""
        return [a.values() for n, a in self.gold_arguments or () if n == name]

    @property
    def labels(self) -> list[str]:
        """Result labels of the calls so far."""
        return [a.label for a in self.history_arguments or () if a.label]

    @property
    def is_end(self) -> bool:
        """Whether the plan is complete at this step (end-of-plan is the answer)."""
        return END_TOOL in self.acceptable


@dataclass(frozen=True)
class ArgumentRequest:
    """A parameter-filling request: one function at one step (retriever- and mode-free).

    Attributes:
        step: The step.
        function: API name of the function whose arguments are asked for.
        messages: OpenAI chat messages.
        tools: The function's schema (the only tool).
        prompt_tokens: Tokens of the messages plus the schema.
        fingerprint: SHA-256 of the messages and tools (part of the cache key).
    """

    step: E2EStep
    function: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    prompt_tokens: int
    fingerprint: str

    @property
    def tool_choice(self) -> dict[str, Any]:
        """The ``tool_choice`` that forces the function."""
        return {"type": "function", "function": {"name": self.function}}


@dataclass(frozen=True)
class StepRequest:
    """What one (retriever, mode, step) sends to the model.

    Attributes:
        retriever: The retriever id (`NO_RETRIEVER` for `no_icl`).
        mode: The mode.
        step: The step.
        messages: OpenAI chat messages.
        tools: OpenAI tool schemas of the bound functions (end-of-plan included).
        bound: API names of the bound functions, in catalogue order, end-of-plan last.
        preferred: API names of the retrieved tools, best first (empty for `no_icl`).
        prompt_tokens: Tokens of the messages plus the bound tools' schemas.
        variable_tokens: The part of `prompt_tokens` that changes from step to step (the
            paper's Figure 5 split): all but the instructions, the example demonstration and,
            when every tool is bound, the tool schemas.
        tool_tokens: Tokens of the bound tools' schemas.
        fingerprint: SHA-256 of the messages and tools (part of the step cache key).
        text: The mode's text closing the system message (the retrieved tools, with their
            probabilities in the weighted modes, or the raw demonstrations; "" for none).
    """

    retriever: str
    mode: str
    step: E2EStep
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    bound: tuple[str, ...]
    preferred: tuple[str, ...] = ()
    prompt_tokens: int = 0
    variable_tokens: int = 0
    tool_tokens: int = 0
    fingerprint: str = field(default="", compare=False)
    text: str = ""

    def recorded(self) -> dict[str, Any]:
        """The `RECORDED_FIELDS` of this request, as a step-cache row keeps them."""
        return {
            "bound": list(self.bound),
            "preferred": list(self.preferred),
            "prompt_text": self.text,
        }


def _call_messages(call_id: str, name: str, arguments: str, result: str) -> list[dict[str, Any]]:
    """A teacher-forced call: the assistant's tool call and the tool's result message."""
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]


def cells(retrievers: Sequence[str], modes: Sequence[str]) -> list[tuple[str, str]]:
    """The (retriever, mode) pairs a run evaluates.

    `no_icl` needs no retriever and retriever ``none`` has only `no_icl`: either one in the
    lists adds the one cell ``("none", "no_icl")``; every other retriever runs every other mode.

    Raises:
        ValueError: For an unknown mode, or when the lists give no cell.
    """
    for mode in modes:
        if mode not in E2E_MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(E2E_MODES)}")
    out: list[tuple[str, str]] = []
    if NO_RETRIEVER in retrievers or "no_icl" in modes:
        out.append((NO_RETRIEVER, "no_icl"))
    for rid in dict.fromkeys(retrievers):
        if rid == NO_RETRIEVER:
            continue
        out.extend((rid, m) for m in dict.fromkeys(modes) if m != "no_icl")
    if not out:
        raise ValueError(
            "no (retriever, mode) pair to run: retriever 'none' only runs mode 'no_icl', and "
            "the other modes need a retriever"
        )
    return out


class ProtocolBuilder:
    """Builds the requests of a run: steps, retrievals and prompts (no network).

    Args:
        train: Training demonstrations (the retrievers' data, the example and raw demos).
        test: Test plans.
        tools: The tool catalogue.
        counter: Token counter for prompt sizes.
        policy: How many retrieved tools a step keeps (default: the top 5).
        seed: Seed of the example demonstration (one for the whole run).
    """

    def __init__(
        self,
        train: Sequence[Demonstration],
        test: Sequence[Demonstration],
        tools: Toolset,
        *,
        counter: TokenCounter,
        policy: SelectionPolicy | None = None,
        seed: int = 0,
    ) -> None:
        if not train:
            raise ValueError("the end-to-end evaluation needs training demonstrations")
        self.train = list(train)
        self.test = list(test)
        self.tools = tools
        self.counter = counter
        self.policy = policy or TOP_K
        self.seed = seed
        self.names = api_names(tools.names)
        self._back = {api: name for name, api in self.names.items()}
        self.end_tool = Tool(END_TOOL, END_PLAN_DESCRIPTION)
        self.api_catalogue = Toolset(
            [Tool(self.names[t.name], t.description, t.parameters) for t in tools]
        )
        self.schemas = {t.name: t.to_openai() for t in [*self.api_catalogue, self.end_tool]}
        self.schema_tokens = catalogue_schema_tokens(
            Toolset([*self.api_catalogue, self.end_tool]), counter
        )
        self._ranked_tokens = {
            n: self.schema_tokens[self._api(n)] for n in [*tools.names, END_OF_PLAN]
        }
        self.steps = self._steps()
        self._examples = self._draw_examples()
        self._prefix_tokens = [counter.count(self._system_prefix(i)) for i in range(len(test))]

    def _api(self, name: str) -> str:
        return END_TOOL if name == END_OF_PLAN else self.names.get(name, name)

    def _steps(self) -> list[E2EStep]:
        out = []
        for i, demo in enumerate(self.test):
            args = demo.arguments
            for j, step in enumerate(demo.steps()):
                out.append(
                    E2EStep(
                        plan=i,
                        step=j,
                        query=demo.query,
                        history=tuple(self._api(h) for h in step.history),
                        acceptable=frozenset(self._api(a) for a in step.acceptable),
                        plan_length=len(demo.calls),
                        plan_id=demo.id,
                        history_arguments=None if args is None else args[:j],
                        gold_arguments=None
                        if args is None
                        else tuple((self._api(demo.calls[r]), args[r]) for r in demo.ready(j)),
                    )
                )
        return out

    @property
    def has_arguments(self) -> bool:
        """Whether every test plan has recorded arguments (parameter filling is scored)."""
        return bool(self.test) and all(d.arguments is not None for d in self.test)

    def _draw_examples(self) -> list[str]:
        """The example demonstration of each plan: one drawn for the whole run.

        The paper gives every method "1 randomly selected demonstration". One for all plans
        keeps the prompt's constant part (the instructions, the example and, for ``no_icl``,
        every tool's schema) one prefix that a server's prompt cache reuses across plans.
        """
        if not self.train:
            return ["" for _ in self.test]
        demo = self.train[random.Random(f"{self.seed}:example").randrange(len(self.train))]
        example = render_demonstration(demo.query, [self._api(c) for c in demo.calls], END_TOOL)
        return [example for _ in self.test]

    def raw_demos(self, preferred: Sequence[str], query: str) -> list[str]:
        """Up to `MAX_RAW_DEMOS` training demonstrations whose plans use the retrieved tools.

        Demonstrations sharing more tools with `preferred` come first (then training order);
        one with the test query itself is skipped.
        """
        wanted = set(preferred)
        scored = []
        for idx, demo in enumerate(self.train):
            calls = [self._api(c) for c in demo.calls]
            overlap = len(wanted.intersection(calls))
            if overlap and demo.query != query:
                scored.append((-overlap, idx, demo.query, calls))
        scored.sort(key=lambda t: (t[0], t[1]))
        return [render_demonstration(q, c, END_TOOL) for _, _, q, c in scored[:MAX_RAW_DEMOS]]

    def _system_prefix(self, plan: int) -> str:
        """The part of the system message every step of a plan shares."""
        instructions = AGENT_INSTRUCTIONS.format(end=END_TOOL)
        if not self._examples[plan]:  # zero demonstrations: no example
            return instructions
        return f"{instructions}\n\n{EXAMPLE_HEADER}\n{self._examples[plan]}"

    def without_demonstrations(self) -> ProtocolBuilder:
        """This builder for a user with no demonstrations.

        The same steps and catalogue, but prompts with no example demonstration (and no raw
        demonstrations).
        """
        clone = copy.copy(self)
        clone.train = []
        clone._examples = ["" for _ in self.test]
        clone._prefix_tokens = [
            self.counter.count(clone._system_prefix(i)) for i in range(len(self.test))
        ]
        return clone

    def _messages(self, step: E2EStep, extra: str) -> list[dict[str, Any]]:
        system = self._system_prefix(step.plan)
        if extra:
            system += f"\n\n{extra}"
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": step.query},
        ]
        for n, name in enumerate(step.history, start=1):
            messages.extend(_call_messages(f"call_{n}", name, "{}", TOOL_RESULT))
        return messages

    def argument_request(self, step: E2EStep, function: str) -> ArgumentRequest:
        """The parameter-filling request of `function` (API name) at `step`.

        The calls so far are teacher-forced with their recorded arguments and each result is
        shown with its label, so the model can pass an earlier output as later calls do.
        """
        schema = self.schemas[function]
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": ARGUMENT_INSTRUCTIONS.format(name=function)},
            {"role": "user", "content": step.query},
        ]
        history_args = step.history_arguments
        for n, name in enumerate(step.history, start=1):
            recorded = history_args[n - 1] if history_args is not None else None
            label = recorded.label if recorded else None
            result = f"{TOOL_RESULT} Result label: {label}" if label else TOOL_RESULT
            arguments = recorded.json if recorded else "{}"
            messages.extend(_call_messages(f"call_{n}", name, arguments, result))
        tools = [schema]
        fingerprint = prompt_fingerprint(messages, tools)
        tokens = self.counter.count(json.dumps(messages, ensure_ascii=False))
        return ArgumentRequest(
            step=step,
            function=function,
            messages=messages,
            tools=tools,
            prompt_tokens=tokens + self.schema_tokens[function],
            fingerprint=fingerprint,
        )

    def argument_requests(self) -> list[ArgumentRequest]:
        """One parameter-filling request per step and next function: what a dry run lists.

        A run asks one only where a model selected that function and the step has recorded
        arguments to score it against.
        """
        out: list[ArgumentRequest] = []
        for step in self.steps:
            names = dict.fromkeys(n for n, _ in step.gold_arguments or ())
            if step.gold_arguments is None:  # no recorded arguments: the signature still asks
                names = dict.fromkeys(sorted(n for n in step.acceptable if n != END_TOOL))
            out.extend(self.argument_request(step, n) for n in names)
        return out

    def request(
        self,
        retriever_id: str,
        mode: str,
        step: E2EStep,
        retrieved: tuple[tuple[str, ...], Mapping[str, float]] | None,
    ) -> StepRequest:
        """The request of one step.

        Args:
            retriever_id: The retriever id.
            mode: One of `E2E_MODES`.
            step: The step.
            retrieved: (API names kept by the selection policy, best first; probability per
                name), or None for `no_icl`.
        """
        extra = ""
        preferred: tuple[str, ...] = ()
        if mode == "no_icl":
            bound = self.api_catalogue.names
        else:
            if retrieved is None:
                raise ValueError(f"mode {mode!r} needs a retriever")
            preferred, probabilities = retrieved
            if mode == "raw_demos":
                bound = self.api_catalogue.names
                demos = self.raw_demos(preferred, step.query)
                if demos:
                    extra = RAW_DEMOS_HEADER + "\n" + "\n\n".join(demos)
            else:
                prompt = build_tool_prompt(
                    check_mode(mode),
                    self.api_catalogue,
                    preferred,
                    probabilities,
                    history=step.history,
                    counter=self.counter,
                    schema_tokens=self.schema_tokens,
                )
                bound = prompt.bound
                extra = prompt.text
        bound = (*bound, END_TOOL)
        messages = self._messages(step, extra)
        tools = [self.schemas[n] for n in bound]
        tool_tokens = sum(self.schema_tokens[n] for n in bound)
        text_tokens = self.counter.count(json.dumps(messages, ensure_ascii=False))
        constant = self._prefix_tokens[step.plan]
        if len(bound) == len(self.schemas):  # every tool bound: the schemas never change
            constant += tool_tokens
        return StepRequest(
            retriever=retriever_id,
            mode=mode,
            step=step,
            messages=messages,
            tools=tools,
            bound=bound,
            preferred=preferred,
            prompt_tokens=text_tokens + tool_tokens,
            variable_tokens=max(0, text_tokens + tool_tokens - constant),
            tool_tokens=tool_tokens,
            fingerprint=prompt_fingerprint(messages, tools),
            text=extra,
        )

    def recorded_request(self, req: StepRequest, row: Mapping[str, Any]) -> StepRequest | None:
        """`req` with the bound tools and mode text a step-cache row recorded (`RECORDED_FIELDS`).

        The step's frame (instructions, example, request, calls so far) is `req`'s; the
        prompt sizes are the row's (what was sent). Whether the result is the prompt the row
        answered is for its key to say: `fingerprint` is that prompt's only when the frame
        has not changed since.

        Returns:
            The request, or None when the row records no prompt (an older row) or a bound
            tool this catalogue does not have.
        """
        try:
            bound = tuple(str(n) for n in row["bound"])
            preferred = tuple(str(n) for n in row["preferred"])
            text = row["prompt_text"]
            tools = [self.schemas[n] for n in bound]
        except (KeyError, TypeError):
            return None
        if not isinstance(text, str) or not req.messages:
            return None
        system = dict(req.messages[0])
        content = str(system["content"])
        old = f"\n\n{req.text}" if req.text else ""
        if not content.endswith(old):
            return None
        system["content"] = content[: len(content) - len(old)] + (f"\n\n{text}" if text else "")
        messages = [system, *req.messages[1:]]
        return dataclasses.replace(
            req,
            messages=messages,
            tools=tools,
            bound=bound,
            preferred=preferred,
            prompt_tokens=int(row.get("prompt_tokens") or 0),
            variable_tokens=int(row.get("variable_tokens") or 0),
            tool_tokens=int(row.get("tool_tokens") or 0),
            fingerprint=prompt_fingerprint(messages, tools),
            text=text,
        )

    def retrieve(
        self, retriever: ToolRetriever, step: E2EStep
    ) -> tuple[tuple[str, ...], dict[str, float]]:
        """The retriever's selection for a step, in API names (the end token left out)."""
        ranking = retriever.rank(step.query, [self._back[h] for h in step.history])
        chosen = select(ranking, self.policy, schema_tokens=self._ranked_tokens)
        names = tuple(self.names[n] for n in chosen.names)
        probabilities = {
            self.names[n]: float(p) for n, p in zip(chosen.names, chosen.probabilities, strict=True)
        }
        return names, probabilities

    def requests(
        self, retrievers: Mapping[str, ToolRetriever | None], modes: Sequence[str]
    ) -> list[StepRequest]:
        """Every request of the run, cell by cell (see `cells`) and step by step.

        Args:
            retrievers: Fitted retrievers by id (``"none"`` maps to None).
            modes: The modes.
        """
        out: list[StepRequest] = []
        pairs = cells(list(retrievers), modes)
        for rid in dict.fromkeys(r for r, _ in pairs):
            wanted = [m for r, m in pairs if r == rid]
            out.extend(self.requests_for(rid, retrievers.get(rid), wanted))
        return out

    def requests_for(
        self, retriever_id: str, retriever: ToolRetriever | None, modes: Sequence[str]
    ) -> list[StepRequest]:
        """The requests of one retriever (None for `no_icl`) in `modes`, step by step."""
        out: list[StepRequest] = []
        for step in self.steps:
            retrieved = None if retriever is None else self.retrieve(retriever, step)
            out.extend(self.request(retriever_id, mode, step, retrieved) for mode in modes)
        return out


__all__ = [
    "ARGUMENT_INSTRUCTIONS",
    "E2E_MODES",
    "END_TOOL",
    "MAX_RAW_DEMOS",
    "NO_RETRIEVER",
    "RECORDED_FIELDS",
    "ZERO_DEMOS",
    "ArgumentRequest",
    "E2EStep",
    "ProtocolBuilder",
    "StepRequest",
    "api_names",
    "cells",
    "prompt_fingerprint",
    "split_spec",
]
