"""What one client session sees: its request, its history and the exposed tools.

A session's state is one immutable snapshot replaced whole by each change, so that a
``tools/list`` answered while ``set_task`` runs is the list from before or after the change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types

from dtdr_agents.foundation.selection import SelectionPolicy, select, within_bounds
from dtdr_agents.foundation.types import Tool, Toolset, output_names
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.runtime import (
    DEFAULT_POLICY,
    CatalogueMismatchError,
    StepRecord,
    StepSelector,
    check_int,
    fitted_tools,
)
from dtdr_agents.store.publishing import Reloader
from mcp_dtdr.names import (
    _META_TOOLS,
    SEARCH_TOOLS,
    SET_TASK,
    _renamed,
    _warn_renamed,
    listed_names,
)
from mcp_dtdr.reloading import RetargetingLoad
from mcp_dtdr.upstream import UpstreamError, _mcp_error


@dataclass(frozen=True)
class ProxyConfig:
    """Options of the proxy.

    Attributes:
        k: Expose at most this many retrieved upstream tools.
        always_include: Upstream tools exposed at every step (not counted against `k`).
        timeout: Seconds to wait for each upstream request (start-up included).
        search_k: Tools returned (and made callable) by ``search_tools`` (default `k`).
        cache: ``"off"`` or ``"append"`` (the exposed list only grows within a task).
        policy: The `SelectionPolicy` of every step. Default: `DEFAULT_POLICY` with the
            `k`, `always_include` and `cache` above (shorthands for its fields; given with a
            policy, they must agree with it). The proxy ignores history names of tools the
            upstream dropped (``ignore_unknown_history``) and exposes the ``always_include``
            tools the upstream lists.
    """

    k: int = 5
    always_include: tuple[str, ...] = ()
    timeout: float = 30.0
    search_k: int | None = None
    cache: str = "off"
    policy: SelectionPolicy | None = None

    def __post_init__(self) -> None:
        check_int("ProxyConfig.k", self.k, minimum=1)
        timeout = self.timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"ProxyConfig.timeout must be > 0 seconds, got {timeout!r}")
        check_int("ProxyConfig.search_k", self.search_k, minimum=1, optional=True)
        given = self.policy
        if given is not None and not isinstance(given, SelectionPolicy):
            raise TypeError(f"ProxyConfig.policy must be a SelectionPolicy, got {type(given)}")
        shorthands: dict[str, Any] = {
            "k": self.k,
            "always_include": self.always_include,
            "cache": self.cache,
        }
        if given is None:
            policy = dataclasses.replace(DEFAULT_POLICY, **shorthands)
        else:
            defaults = {"k": 5, "always_include": (), "cache": "off"}
            for name, value in shorthands.items():
                if value != defaults[name] and value != getattr(given, name):
                    raise ValueError(
                        f"ProxyConfig.{name}={value!r} contradicts policy.{name}="
                        f"{getattr(given, name)!r}: pass one of them"
                    )
            policy = given
        object.__setattr__(self, "policy", policy)
        object.__setattr__(self, "always_include", policy.always_include)
        object.__setattr__(self, "cache", policy.cache)
        if policy.k is not None:
            object.__setattr__(self, "k", policy.k)

    @property
    def selection_policy(self) -> SelectionPolicy:
        """The resolved policy (never None after construction)."""
        assert self.policy is not None
        return self.policy


def _required_text(value: Any, tool: str, field: str, what: str = "") -> str:
    """`value` stripped, or an INVALID_PARAMS error naming the tool and the field."""
    if not isinstance(value, str) or not value.strip():
        raise _mcp_error(
            f"{tool} needs a non-empty '{field}' string{what}, got {value!r}",
            types.INVALID_PARAMS,
        )
    return value.strip()


# ---------------------------------------------------------------------------------- upstream


def _core_tool(tool: types.Tool) -> Tool:
    return Tool(
        name=tool.name,
        description=tool.description or "",
        parameters=tool.input_schema,
        outputs=output_names(tool.output_schema),
    )


@dataclass(frozen=True)
class _Catalogue:
    """The upstream's tools as the proxy ranks and lists them (never changed in place)."""

    selector: StepSelector
    tools: Mapping[str, types.Tool]  # by upstream name
    listed: Mapping[str, str]  # the name clients see, by upstream name
    by_listed: Mapping[str, str]  # the upstream name, by listed name


def _catalogue(
    selector: StepSelector,
    upstream_tools: Mapping[str, types.Tool],
    previous: Mapping[str, str] | None = None,
) -> _Catalogue:
    """The catalogue of the upstream's tools, warning about renamed tools.

    With `previous` (the names listed before), only newly renamed tools are warned about.
    """
    if previous is None:
        listed = listed_names(list(upstream_tools))
    else:
        renamed = _renamed(list(upstream_tools))
        _warn_renamed({n: new for n, new in renamed.items() if previous.get(n) != new})
        listed = {name: renamed.get(name, name) for name in upstream_tools}
    return _Catalogue(selector, dict(upstream_tools), listed, {new: n for n, new in listed.items()})


@dataclass(frozen=True)
class _State:
    """A snapshot of what a session sees; replaced whole, never changed in place."""

    catalogue: _Catalogue
    request: str | None = None
    history: tuple[str, ...] = ()
    step: StepRecord | None = None
    found: tuple[str, ...] = ()

    def exposed(self) -> tuple[str, ...]:
        """Upstream tool names the session may call, in the order they are listed."""
        names = list(self.step.bound if self.step is not None else ())
        selector = self.catalogue.selector
        policy = selector.policy
        for name in (*policy.always_include, *self.found):
            if name not in names:
                names.append(name)
        # the policy's bounds (`within_bounds`); the client's model sees the meta-tools too
        tokens = None if policy.max_schema_tokens is None else selector.schema_tokens
        return within_bounds(names, policy, schema_tokens=tokens, reserved=len(_META_TOOLS))


class ProxySession:
    """What one client session sees: its request, its call history and the exposed tools.

    The state is one immutable snapshot (`state`), replaced whole by each change, so a
    ``tools/list`` answered while ``set_task`` runs sees the state before or after it, never
    half of it. The changing methods (`set_task`, `search`, `record_call`) run in worker
    threads; callers hold `lock` around them, so that one change does not undo another.

    Args:
        selector: The step selector over the upstream's tools.
        upstream_tools: The upstream's tools, by name.
        search_k: Tools returned by ``search_tools``.

    Attributes:
        lock: Held (by the server) around every change of the state.
        steps: The steps selected in the current task, in order.
    """

    def __init__(
        self,
        selector: StepSelector,
        upstream_tools: Mapping[str, types.Tool],
        *,
        search_k: int,
        lock: anyio.Lock | None = None,
    ) -> None:
        self._start(_catalogue(selector, upstream_tools), search_k, lock)

    def _start(self, catalogue: _Catalogue, search_k: int, lock: anyio.Lock | None) -> None:
        self.search_k = search_k
        self.lock = lock if lock is not None else anyio.Lock()
        self.steps: list[StepRecord] = []
        self.state = _State(catalogue)

    @classmethod
    def over(
        cls, catalogue: _Catalogue, *, search_k: int, lock: anyio.Lock | None = None
    ) -> ProxySession:
        """A new session over a catalogue shared with other sessions (and their `lock`)."""
        session = cls.__new__(cls)
        session._start(catalogue, search_k, lock)
        return session

    @property
    def selector(self) -> StepSelector:
        """The step selector over the upstream's current tools."""
        return self.state.catalogue.selector

    @property
    def upstream_tools(self) -> Mapping[str, types.Tool]:
        """The upstream's tools, by upstream name."""
        return self.state.catalogue.tools

    @property
    def listed(self) -> Mapping[str, str]:
        """The name clients see for each upstream tool, by upstream name (`listed_names`)."""
        return self.state.catalogue.listed

    @property
    def by_listed(self) -> Mapping[str, str]:
        """The upstream name of each listed name."""
        return self.state.catalogue.by_listed

    @property
    def request(self) -> str | None:
        """The session's request, None before ``set_task``."""
        return self.state.request

    @property
    def history(self) -> tuple[str, ...]:
        """The upstream tools called in the current task, in order."""
        return self.state.history

    @property
    def step(self) -> StepRecord | None:
        """The selection for the next step, None before ``set_task``."""
        return self.state.step

    @property
    def found(self) -> tuple[str, ...]:
        """The tools the last ``search_tools`` found (callable)."""
        return self.state.found

    def exposed(self) -> tuple[str, ...]:
        """Upstream tool names the session may call, in the order they are listed."""
        return self.state.exposed()

    def rerank(self) -> None:
        """Select the tools for the next step (needs a request; hold `lock`)."""
        self.state = self._ranked(self.state, self.state.step)

    def _ranked(self, state: _State, previous: StepRecord | None) -> _State:
        """`state` with the step selected for its request and history (needs a request)."""
        if state.request is None:
            return state
        step = state.catalogue.selector.select(state.request, state.history, previous=previous)
        self.steps.append(step)
        return dataclasses.replace(state, step=step)

    def set_task(self, request: Any) -> str:
        """Set the request, reset the history, re-rank; the text answered to the client.

        Raises:
            MCPError: The request is missing or empty.
        """
        text = _required_text(request, SET_TASK, "request", " (the user's task)")
        self.steps = []
        self.state = self._ranked(_State(self.state.catalogue, request=text), None)
        return f"Task set. Tools offered for the next step: {', '.join(self.callable_names())}."

    def search(self, query: Any) -> str:
        """Look tools up by `query` and make them callable; the text answered to the client.

        Raises:
            MCPError: The query is missing or empty.
        """
        state = self.state
        cat = state.catalogue
        ranking = cat.selector.retriever.rank(_required_text(query, SEARCH_TOOLS, "query"), ())
        sel = select(
            ranking, SelectionPolicy(k=self.search_k, threshold=None, respect_fallback=False)
        )
        self.state = dataclasses.replace(state, found=sel.names)
        lines = [
            f"- {cat.listed[n]}: {cat.tools[n].description or ''}".rstrip(": ") for n in sel.names
        ]
        return "Found (now callable):\n" + "\n".join(lines)

    def record_call(self, name: str) -> None:
        """Append an upstream call to the history and re-rank."""
        state = self.state
        state = dataclasses.replace(state, history=(*state.history, name))
        self.state = self._ranked(state, state.step)

    def restore(self, request: str | None, history: Sequence[str], found: Sequence[str]) -> None:
        """Take up a saved session (request, calls, found tools) and select its next step.

        The task's steps are selected again in order (``set_task``, then one step per call),
        so that a binding strategy that grows the list within a task (``cache="append"``)
        binds what the session that saved the state bound; with ``cache="off"`` only the last
        step is selected. Found tools the upstream no longer lists are dropped. Hold `lock`.
        """
        cat = self.state.catalogue
        self.steps = []
        state = _State(
            cat,
            request=request,
            history=tuple(history),
            found=tuple(n for n in found if n in cat.tools),
        )
        if request is None or cat.selector.policy.cache == "off":
            self.state = self._ranked(state, None)
            return
        previous: StepRecord | None = None
        for i in range(len(state.history) + 1):
            step = self._ranked(dataclasses.replace(state, history=state.history[:i]), previous)
            previous = step.step
        self.state = dataclasses.replace(state, step=previous)

    def set_catalogue(
        self, selector: StepSelector, upstream_tools: Mapping[str, types.Tool]
    ) -> None:
        """Switch to the upstream's new tools and re-rank the current task.

        Tools that left are no longer exposed or callable (nor found by the last search);
        the history keeps their calls. Warns about newly renamed tools (`listed_names`).
        """
        self.use_catalogue(_catalogue(selector, upstream_tools, self.state.catalogue.listed))

    def use_catalogue(self, catalogue: _Catalogue) -> None:
        """Switch to a new catalogue (see `set_catalogue`) and re-rank the current task."""
        state = self.state
        found = tuple(n for n in state.found if n in catalogue.tools)
        # the previous step may bind tools that left: the binding starts afresh
        self.state = self._ranked(
            dataclasses.replace(state, catalogue=catalogue, found=found), None
        )

    def callable_names(self) -> tuple[str, ...]:
        """The listed names of the exposed upstream tools (what clients call them)."""
        state = self.state
        return tuple(state.catalogue.listed[n] for n in state.exposed())

    def list_tools(self) -> list[types.Tool]:
        """The meta-tools, then the exposed upstream tools under their listed names."""
        state = self.state  # one snapshot: complete even while another request changes it
        cat = state.catalogue
        tools = [*_META_TOOLS]
        for name in state.exposed():
            tool = cat.tools[name]
            shown = cat.listed[name]
            tools.append(tool if shown == name else tool.model_copy(update={"name": shown}))
        return tools


def _selector(
    toolset: Toolset,
    retriever: ToolRetriever | Reloader[Any],
    config: ProxyConfig,
    *,
    strict: bool,
) -> StepSelector:
    """The step selector over the upstream's `toolset`; retargets `retriever` to it.

    `retriever` may be a `Reloader` of published versions: its running version is retargeted
    and, with a `RetargetingLoad`, so are the versions it loads later.
    `strict`: an ``always_include`` name the upstream does not list is an error (at start-up);
    otherwise (after the upstream's tools changed) it is left out until the tool comes back.
    """
    renamed = {new: n for n, new in _renamed(list(toolset.names)).items()}
    always = tuple(dict.fromkeys(renamed.get(n, n) for n in config.always_include))
    missing = [n for n in always if not toolset.has(n)]
    if missing and strict:
        raise UpstreamError(f"--always-include names tools the upstream does not list: {missing}")
    policy = dataclasses.replace(
        config.selection_policy,
        always_include=tuple(n for n in always if toolset.has(n)),
        # the history may name tools the upstream dropped since: they are ignored
        ignore_unknown_history=True,
    )
    if not isinstance(retriever, Reloader):
        _retarget(retriever, toolset)
        return StepSelector(toolset, retriever, policy=policy, reserved=len(_META_TOOLS))
    if isinstance(retriever.load, RetargetingLoad):
        retriever.load.set_toolset(toolset)  # the versions loaded from now on
    for attempt in range(3):
        _retarget(retriever.current(), toolset)
        try:
            return StepSelector(toolset, retriever, policy=policy, reserved=len(_META_TOOLS))
        except CatalogueMismatchError:
            # a version loaded (for the old tools) while we retargeted: retarget it too
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _retarget(model: Any, toolset: Toolset) -> None:
    """Make `model` rank `toolset` (tools added after fit are ranked by a prior)."""
    if set(fitted_tools(model).names) != set(toolset.names):
        model.set_tools(toolset)
