"""Bad inputs to the integration adapters end in a clear error naming the argument.

The adapters (LangChain retriever and middleware, LangGraph factory, LlamaIndex retriever and
agent, MCP proxy entry points) are tried as an adversarial user would. One table-driven test
counts every case: a clear error (the expected exception, naming the argument), a documented
graceful behaviour (checked), a crash without a clear message, or a silently wrong result.
Everything runs offline on a tiny TF-IDF DTDR-C; no subprocess is started.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("langchain")
pytest.importorskip("langgraph")
pytest.importorskip("llama_index.core")
pytest.importorskip("mcp")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import BaseTool
from langchain_core.tools import tool as lc_tool
from llama_index.core.llms.mock import MockFunctionCallingLLM

from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.errors import (
    DTDRError,
    InvalidToolError,
    ModelLoadError,
    NotFittedError,
    UnknownToolError,
)
from dtdr_agents.foundation.selection import SelectionPolicy
from dtdr_agents.foundation.types import END_OF_PLAN, Demonstration, Tool, Toolset
from dtdr_agents.retrievers import load_retriever, make_retriever
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.runtime import BindingPolicy, CatalogueMismatchError
from langchain_dtdr import DTDRMiddleware, DTDRRetriever, NoRequestError
from langchain_dtdr.testing import ScriptedChatModel, langchain_tools
from langgraph_dtdr import create_dtdr_agent
from llama_index_dtdr import DTDRFunctionAgent, DTDRObjectRetriever
from llama_index_dtdr.testing import llama_tools
from mcp_dtdr.proxy import ProxyConfig, Upstream, build_server, run_proxy

QUERY = "email Bob the summary of report.pdf"

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:inspect")  # LlamaIndex


# ----------------------------------------------------------------------------- fixtures
@dataclass(frozen=True)
class Setup:
    """A tiny fitted TF-IDF DTDR-C and the same catalogue as each framework's tools."""

    core: ToolRetriever
    other: ToolRetriever
    catalogue: Toolset
    demos: tuple[Any, ...]
    lc: list[BaseTool]
    llama: list[Any]
    model_dir: Path
    tmp: Path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    data = make_demo_dataset(40, seed=0)
    core = make_retriever("dtdr-c", encoder="tfidf", n_clusters=2).fit(data.demos, data.tools)
    small = Toolset(list(data.tools)[:6])
    in_small = [d for d in data.demos if all(small.has(c) for c in d.calls)]
    other = make_retriever("dr", encoder="tfidf").fit(in_small, small)
    tmp = tmp_path_factory.mktemp("integration_bad")
    core.save(tmp / "model")
    return Setup(
        core=core,
        other=other,
        catalogue=data.tools,
        demos=tuple(data.demos),
        lc=langchain_tools(data.tools),
        llama=llama_tools(data.tools),
        model_dir=tmp / "model",
        tmp=tmp,
    )


# -------------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class Err:
    """The case must raise one of `types` with a message matching `pattern`."""

    types: tuple[type[BaseException], ...]
    pattern: str


@dataclass(frozen=True)
class Ok:
    """The case must return a result `check` accepts (a documented graceful behaviour)."""

    check: Callable[[Any], bool]
    what: str


Case = tuple[Callable[[], Any], Err | Ok]

VALUE = (ValueError, TypeError)


def _names(docs: list[Any]) -> list[str]:
    return [d.metadata["name"] for d in docs]


def _corrupt_model(s: Setup) -> Path:
    bad = s.tmp / "corrupt"
    if not bad.exists():
        bad.mkdir()
        (bad / "manifest.json").write_text("{not json")
        (bad / "arrays.safetensors").write_bytes(b"\0" * 16)
    return bad


def _retriever_cases(s: Setup) -> dict[str, Case]:
    r = DTDRRetriever(retriever=s.core, k=3)
    hist = ["open_file", "summarize_pdf"]
    fit = DTDRRetriever.from_demonstrations
    cases: dict[str, Case] = {
        f"DTDRRetriever.invoke k={k!r}": (
            lambda k=k: r.invoke(QUERY, k=k),
            Err(VALUE, r"\bk\b"),
        )
        for k in (0, -1, 2.5, "3", True, math.nan)
    }
    cases.update(
        {
            "DTDRRetriever.invoke k=numpy int": (
                lambda: r.invoke(QUERY, k=np.int64(2)),
                Ok(lambda docs: len(docs) == 2, "2 documents"),
            ),
            "DTDRRetriever.invoke k=None uses the field k": (
                lambda: r.invoke(QUERY, k=None),
                Ok(lambda docs: len(docs) == 3, "3 documents"),
            ),
            "DTDRRetriever.invoke history as a comma-separated string": (
                lambda: (r.invoke(QUERY, history=",".join(hist)), r.invoke(QUERY, history=hist)),
                Ok(lambda pair: _names(pair[0]) == _names(pair[1]), "same as the list"),
            ),
            "DTDRRetriever.invoke history with an unknown tool": (
                lambda: r.invoke(QUERY, history=["open_file", "teleport"]),
                Err((UnknownToolError,), "teleport"),
            ),
            "DTDRRetriever.invoke history with END_OF_PLAN": (
                lambda: r.invoke(QUERY, history=["open_file", END_OF_PLAN]),
                Err((UnknownToolError, ValueError), "history"),
            ),
            "DTDRRetriever.invoke history=5": (
                lambda: r.invoke(QUERY, history=5),
                Err((TypeError,), "history"),
            ),
            "DTDRRetriever.invoke history=[1, 2]": (
                lambda: r.invoke(QUERY, history=[1, 2]),
                Err((TypeError,), r"history\[0\]"),
            ),
            "DTDRRetriever.invoke empty query": (
                lambda: r.invoke(""),
                Err((ValueError,), "query"),
            ),
            "DTDRRetriever.invoke blank query": (
                lambda: r.invoke("   "),
                Err((ValueError,), "query"),
            ),
            "DTDRRetriever.invoke query=None": (
                lambda: r.invoke(None),
                Err((ValueError, TypeError), "query"),
            ),
            "DTDRRetriever(retriever=unfitted)": (
                lambda: DTDRRetriever(retriever=make_retriever("dtdr-c", encoder="tfidf")),
                Err((NotFittedError, ValueError), "not fitted"),
            ),
            "DTDRRetriever(retriever='dtdr-c')": (
                lambda: DTDRRetriever(retriever="dtdr-c"),
                Err((TypeError, ValueError), "retriever"),
            ),
            "DTDRRetriever(retriever=None)": (
                lambda: DTDRRetriever(retriever=None),
                Err((TypeError, ValueError), "retriever"),
            ),
            "DTDRRetriever(k=0)": (
                lambda: DTDRRetriever(retriever=s.core, k=0),
                Err((ValueError,), r"\bk\b"),
            ),
            "DTDRRetriever(k=2.5)": (
                lambda: DTDRRetriever(retriever=s.core, k=2.5),
                Err((ValueError,), r"\bk\b"),
            ),
            "DTDRRetriever(threshold=1.5)": (
                lambda: DTDRRetriever(retriever=s.core, threshold=1.5),
                Err((ValueError,), "threshold"),
            ),
            "DTDRRetriever(threshold='x')": (
                lambda: DTDRRetriever(retriever=s.core, threshold="x"),
                Err((ValueError,), "threshold"),
            ),
            "from_demonstrations retriever='nosuch'": (
                lambda: fit(s.demos, s.catalogue, retriever="nosuch", encoder="tfidf"),
                Err((DTDRError, ValueError), "nosuch"),
            ),
            "from_demonstrations retriever=5": (
                lambda: fit(s.demos, s.catalogue, retriever=5, encoder="tfidf"),
                Err((TypeError,), "retriever"),
            ),
            "from_demonstrations retriever_params bogus": (
                lambda: fit(
                    s.demos, s.catalogue, retriever="dtdr-c", retriever_params={"bogus": 1}
                ),
                Err((DTDRError, ValueError, TypeError), "bogus"),
            ),
            "from_demonstrations no tools": (
                lambda: fit(s.demos, [], retriever="dtdr-c", encoder="tfidf"),
                Err((DTDRError, ValueError), "tool"),
            ),
            "from_demonstrations a call of an unknown tool": (
                lambda: fit(
                    [*s.demos, Demonstration("beam me up", ("teleport",))],
                    s.catalogue,
                    retriever="dtdr-c",
                    encoder="tfidf",
                ),
                Err((DTDRError, ValueError, TypeError), "teleport|demonstration"),
            ),
            "from_demonstrations k=0": (
                lambda: fit(s.demos, s.catalogue, retriever="dtdr-c", encoder="tfidf", k=0),
                Err((ValueError,), r"\bk\b"),
            ),
            "DTDRRetriever.load missing folder": (
                lambda: DTDRRetriever.load(s.tmp / "nosuch"),
                Err((ModelLoadError,), "nosuch"),
            ),
            "DTDRRetriever.load corrupt folder": (
                lambda: DTDRRetriever.load(_corrupt_model(s)),
                Err((ModelLoadError,), "manifest"),
            ),
            "DTDRRetriever.load k=0": (
                lambda: DTDRRetriever.load(s.model_dir, k=0),
                Err((ValueError,), r"\bk\b"),
            ),
            "DTDRRetriever.load tools of another catalogue": (
                lambda: DTDRRetriever.load(s.model_dir, tools=s.other.tools_),
                Err((ModelLoadError, DTDRError), "catalogue|tools"),
            ),
        }
    )
    return cases


def _factory_cases(s: Setup) -> dict[str, Case]:
    """The same bad options for `create_dtdr_agent` and `DTDRMiddleware`."""

    def graph(**kw: Any) -> Any:
        tools = kw.pop("tools", s.lc)
        retriever = kw.pop("retriever", s.core)
        model = kw.pop("model", ScriptedChatModel(responses=["ok"]))
        return create_dtdr_agent(model, tools, retriever, **kw)

    def middleware(**kw: Any) -> Any:
        kw.setdefault("tools", s.lc)
        return DTDRMiddleware(kw.pop("retriever", s.core), **kw)

    bad: dict[str, tuple[dict[str, Any], Err]] = {
        "k=0": ({"k": 0}, Err(VALUE, r"\bk\b")),
        "k=-1": ({"k": -1}, Err(VALUE, r"\bk\b")),
        "k=2.5": ({"k": 2.5}, Err(VALUE, r"\bk\b")),
        "k='3'": ({"k": "3"}, Err(VALUE, r"\bk\b")),
        "k=True": ({"k": True}, Err(VALUE, r"\bk\b")),
        "mode='bogus'": ({"mode": "bogus"}, Err(VALUE, "mode")),
        "cache='bogus'": ({"cache": "bogus"}, Err(VALUE, "cache")),
        "mode='set' with cache='append'": (
            {"mode": "set", "cache": "append"},
            Err(VALUE, "cache"),
        ),
        "k contradicting policy.k": (
            {"k": 3, "policy": SelectionPolicy(k=4)},
            Err(VALUE, "policy.k"),
        ),
        "policy as a dict": ({"policy": {"k": 3}}, Err(VALUE, "policy")),
        "binding as a str": ({"binding": "hard"}, Err(VALUE, "binding")),
        "duplicate tool names": (
            {"tools": [*s.lc, s.lc[0]]},
            Err((InvalidToolError,), f"duplicate.*{s.lc[0].name}"),
        ),
        "tools missing from the retriever's catalogue": (
            {"tools": s.lc[:5]},
            Err((CatalogueMismatchError,), "catalogue"),
        ),
        "a tool the retriever does not rank": (
            {"tools": [*s.lc, langchain_tools([Tool("teleport", "Move somewhere.")])[0]]},
            Err((CatalogueMismatchError,), "teleport"),
        ),
        "always_include naming an unknown tool": (
            {"policy": SelectionPolicy(k=3, always_include=("teleport",))},
            Err((UnknownToolError,), "always_include.*teleport"),
        ),
        "always_include as a plain string": (
            {"always_include_str": True},
            Err(VALUE, "always_include"),
        ),
        "retriever fitted on another catalogue": (
            {"retriever": s.other},
            Err((CatalogueMismatchError,), "another tool catalogue"),
        ),
        "retriever not fitted": (
            {"retriever": make_retriever("dtdr-c", encoder="tfidf")},
            Err((NotFittedError,), "not fitted"),
        ),
        "retriever as an id string": ({"retriever": "dtdr-c"}, Err((TypeError,), "retriever")),
        "binding widen_k='3'": (
            {"binding_kw": {"widen_k": "3"}},
            Err(VALUE, "widen_k"),
        ),
        "binding widen_k smaller than k": (
            {"k": 4, "binding_kw": {"widen_k": 2}},
            Err(VALUE, "widen_k"),
        ),
        "binding cache_cap=2.5": ({"binding_kw": {"cache_cap": 2.5}}, Err(VALUE, "cache_cap")),
        "binding max_rejections='x'": (
            {"binding_kw": {"max_rejections": "x"}},
            Err(VALUE, "max_rejections"),
        ),
        "binding widen_on_answer='no'": (
            {"binding_kw": {"widen_on_answer": "no"}},
            Err(VALUE, "widen_on_answer"),
        ),
        "binding on_unbound='skip'": (
            {"binding_kw": {"on_unbound": "skip"}},
            Err(VALUE, "on_unbound"),
        ),
    }

    def build(make: Callable[..., Any], kw: dict[str, Any]) -> Any:
        kw = dict(kw)
        if kw.pop("always_include_str", False):
            kw["policy"] = SelectionPolicy(k=3, always_include="web_search")  # type: ignore[arg-type]
        binding_kw = kw.pop("binding_kw", None)
        if binding_kw is not None:
            kw["binding"] = BindingPolicy(**binding_kw)
        return make(**kw)

    cases: dict[str, Case] = {}
    for label, (kw, err) in bad.items():
        cases[f"create_dtdr_agent {label}"] = (lambda kw=kw: build(graph, kw), err)
        cases[f"DTDRMiddleware {label}"] = (lambda kw=kw: build(middleware, kw), err)
    cases.update(
        {
            "create_dtdr_agent model as a str": (
                lambda: graph(model="gpt-4o"),
                Err((TypeError,), "model"),
            ),
            "create_dtdr_agent tools=[5]": (
                lambda: graph(tools=[5]),
                Err((TypeError,), r"tools\[0\]"),
            ),
            "create_dtdr_agent tools as one tool, not a list": (
                lambda: graph(tools=s.lc[0]),
                Err((TypeError,), "tools"),
            ),
            "create_dtdr_agent state_schema without the keys": (
                lambda: graph(state_schema=dict),
                Err(VALUE, "state_schema"),
            ),
            "DTDRMiddleware tools as a str": (
                lambda: middleware(tools="web_search"),
                Err((TypeError,), "tools"),
            ),
        }
    )
    return cases


@lc_tool
def web_search(query: str, num_results: int = 3) -> str:
    """Search the web and return the top results with titles, links and snippets."""
    return f"{num_results} results for {query}"


def _run_cases(s: Setup) -> dict[str, Case]:
    """Runs of the compiled agents with bad message lists or malformed tool calls."""
    lc = [web_search if t.name == "web_search" else t for t in s.lc]  # validates its args
    bad_call = AIMessage(
        content="",
        invalid_tool_calls=[
            {"name": "web_search", "args": "{not json", "id": "c1", "error": "bad JSON"}
        ],
    )
    missing_arg = AIMessage(
        content="",
        tool_calls=[{"name": "web_search", "args": {}, "id": "c2", "type": "tool_call"}],
    )

    def graph(responses: list[Any], messages: list[Any]) -> Any:
        model = ScriptedChatModel(responses=responses)
        agent = create_dtdr_agent(
            model, lc, s.core, k=3, binding=BindingPolicy(widen_on_answer=False)
        )
        return agent.compile().invoke({"messages": messages})

    def agent_mw(responses: list[Any], messages: list[Any]) -> Any:
        model = ScriptedChatModel(responses=responses)
        mw = DTDRMiddleware(s.core, k=3, binding=BindingPolicy(widen_on_answer=False))
        return create_agent(model, lc, middleware=[mw]).invoke({"messages": messages})

    def tool_error_names_arg(out: Any) -> bool:
        tool_msgs = [m for m in out["messages"] if m.type == "tool"]
        return bool(tool_msgs) and tool_msgs[0].status == "error" and "query" in tool_msgs[0].text

    def invalid_call_kept(out: Any) -> bool:
        last = out["messages"][-1]
        return isinstance(last, AIMessage) and bool(last.invalid_tool_calls)

    no_human = [AIMessage(content="hello")]
    cases: dict[str, Case] = {}
    for name, run in (("create_dtdr_agent", graph), ("create_agent + DTDRMiddleware", agent_mw)):
        cases.update(
            {
                f"{name}: no human message": (
                    lambda run=run: run(["ok"], no_human),
                    Err((NoRequestError,), "human message"),
                ),
                f"{name}: empty message list": (
                    lambda run=run: run(["ok"], []),
                    Err((NoRequestError,), "human message"),
                ),
                f"{name}: blank request": (
                    lambda run=run: run(["ok"], [HumanMessage("  ")]),
                    Err((NoRequestError,), "no text"),
                ),
                f"{name}: a tool call with malformed JSON args ends the run visibly": (
                    lambda run=run: run([bad_call], [HumanMessage(QUERY)]),
                    Ok(invalid_call_kept, "the reply's invalid_tool_calls are kept"),
                ),
                f"{name}: a tool call missing a required arg gets an error tool message": (
                    lambda run=run: run(
                        [missing_arg, "done"], [HumanMessage("search the web for x")]
                    ),
                    Ok(tool_error_names_arg, "error ToolMessage naming the argument"),
                ),
            }
        )
    return cases


def _llama_cases(s: Setup) -> dict[str, Case]:
    tools = s.llama

    def obj(**kw: Any) -> Any:
        return DTDRObjectRetriever(kw.pop("tools", tools), kw.pop("retriever", s.core), **kw)

    r = obj(k=3)

    async def run_agent(message: str) -> Any:
        agent = DTDRFunctionAgent.from_tools(tools, s.core, k=3, llm=MockFunctionCallingLLM())
        return await agent.run(user_msg=message)

    return {
        "DTDRObjectRetriever duplicate names": (
            lambda: obj(tools=[*tools, tools[1]]),
            Err((InvalidToolError,), f"duplicate tool name '{tools[1].metadata.name}'"),
        ),
        "DTDRObjectRetriever a LangChain tool": (
            lambda: obj(tools=[*tools[:-1], s.lc[-1]]),
            Err((TypeError,), r"tools\[\d+\] must be a LlamaIndex tool"),
        ),
        "DTDRObjectRetriever a function": (
            lambda: obj(tools=[*tools, len]),
            Err((TypeError,), r"tools\[\d+\] must be a LlamaIndex tool"),
        ),
        "DTDRObjectRetriever tools as one tool": (
            lambda: obj(tools=tools[0]),
            Err((TypeError,), "tools"),
        ),
        "DTDRObjectRetriever k=0": (lambda: obj(k=0), Err(VALUE, r"\bk\b")),
        "DTDRObjectRetriever k=2.5": (lambda: obj(k=2.5), Err(VALUE, r"\bk\b")),
        "DTDRObjectRetriever k='3'": (lambda: obj(k="3"), Err(VALUE, r"\bk\b")),
        "DTDRObjectRetriever mode='bogus'": (lambda: obj(mode="bogus"), Err(VALUE, "mode")),
        "DTDRObjectRetriever retriever on another catalogue": (
            lambda: obj(retriever=s.other),
            Err((CatalogueMismatchError,), "another tool catalogue"),
        ),
        "DTDRObjectRetriever retriever not fitted": (
            lambda: obj(retriever=make_retriever("dtdr-c", encoder="tfidf")),
            Err((NotFittedError,), "not fitted"),
        ),
        "DTDRObjectRetriever always_include unknown": (
            lambda: obj(policy=SelectionPolicy(k=3, always_include=("teleport",))),
            Err((UnknownToolError,), "teleport"),
        ),
        "DTDRObjectRetriever.retrieve empty query": (
            lambda: r.retrieve(""),
            Err((ValueError,), "query"),
        ),
        "DTDRObjectRetriever.retrieve a tool's name returns that tool": (
            lambda: r.retrieve(tools[2].metadata.name),
            Ok(lambda out: [t.metadata.name for t in out] == [tools[2].metadata.name], "one tool"),
        ),
        "DTDRFunctionAgent.from_tools duplicate names": (
            lambda: DTDRFunctionAgent.from_tools([*tools, tools[0]], s.core, k=3),
            Err((InvalidToolError,), "duplicate tool name"),
        ),
        "DTDRFunctionAgent.from_tools k=-1": (
            lambda: DTDRFunctionAgent.from_tools(tools, s.core, k=-1),
            Err(VALUE, r"\bk\b"),
        ),
        "DTDRObjectRetriever.select history with an unknown tool": (
            lambda: r.select(QUERY, ["teleport"]),
            Err((UnknownToolError,), "history.*teleport"),
        ),
        "DTDRFunctionAgent.run with an empty user message": (
            lambda: asyncio.run(run_agent("")),
            Err((ValueError,), "user_msg"),
        ),
        "DTDRFunctionAgent.run with a blank user message": (
            lambda: asyncio.run(run_agent("   ")),
            Err((ValueError,), "no user message"),
        ),
        "DTDRFunctionAgent without a DTDRObjectRetriever": (
            lambda: DTDRFunctionAgent(tools=tools, llm=MockFunctionCallingLLM()),
            Err((TypeError,), "DTDRObjectRetriever"),
        ),
    }


def _mcp_cases(s: Setup) -> dict[str, Case]:
    def upstream(names: list[str]) -> Upstream:
        import mcp_types as types

        up = Upstream(["server"], 5.0)
        up.session = object()  # type: ignore[assignment]  # build_server only checks it is set
        up.tools = [
            types.Tool(name=n, description=f"{n} tool", input_schema={"type": "object"})
            for n in names
        ]
        return up

    def built_error(up: Upstream, retriever: Any, **config: Any) -> str:
        build_server(up, retriever, ProxyConfig(**config))
        assert up.session is None, "the server would serve a broken session"
        try:
            up.check()
        except Exception as exc:  # the MCPError every tools/list and tools/call gets
            return str(exc)
        return ""

    def retarget(upstream_names: list[str]) -> tuple[str, ...]:
        retriever = load_retriever(s.model_dir)  # a copy of the core: build_server retargets it
        up = upstream(upstream_names)
        build_server(up, retriever, ProxyConfig(k=2))
        assert up.session is not None, up.error
        return tuple(retriever.tools_.names)

    names = list(s.catalogue.names)
    return {
        **{
            f"ProxyConfig k={k!r}": (lambda k=k: ProxyConfig(k=k), Err(VALUE, r"ProxyConfig\.k"))
            for k in (0, -1, 2.5, "3", True)
        },
        "ProxyConfig timeout='x'": (
            lambda: ProxyConfig(timeout="x"),
            Err(VALUE, "timeout"),
        ),
        "ProxyConfig timeout=nan": (
            lambda: ProxyConfig(timeout=math.nan),
            Err(VALUE, "timeout"),
        ),
        "ProxyConfig search_k=1.5": (
            lambda: ProxyConfig(search_k=1.5),
            Err(VALUE, "search_k"),
        ),
        "ProxyConfig cache='bogus'": (
            lambda: ProxyConfig(cache="bogus"),
            Err(VALUE, "cache"),
        ),
        "ProxyConfig always_include as a str": (
            lambda: ProxyConfig(always_include="web_search"),
            Err(VALUE, "always_include"),
        ),
        "run_proxy empty upstream argv": (
            lambda: run_proxy(s.model_dir, []),
            Err((ValueError,), "upstream"),
        ),
        "run_proxy upstream argv as one string": (
            lambda: run_proxy(s.model_dir, "python server.py"),
            Err((TypeError, ValueError), "upstream"),
        ),
        "run_proxy always_include as a str": (
            lambda: run_proxy(s.model_dir, ["server"], always_include="web_search"),
            Err(VALUE, "always_include"),
        ),
        "run_proxy k=0": (lambda: run_proxy(s.model_dir, ["server"], k=0), Err(VALUE, r"\bk\b")),
        "run_proxy model dir that does not exist": (
            lambda: run_proxy(s.tmp / "nosuch", ["server"]),
            Err((ModelLoadError,), "nosuch"),
        ),
        "run_proxy corrupt model dir": (
            lambda: run_proxy(_corrupt_model(s), ["server"]),
            Err((ModelLoadError,), "manifest"),
        ),
        "run_proxy model dir is a file": (
            lambda: run_proxy(s.model_dir / "manifest.json", ["server"]),
            Err((ModelLoadError,), "manifest.json"),
        ),
        "build_server always_include unknown: every request gets the error": (
            lambda: built_error(upstream(names), s.core, always_include=("teleport",)),
            Ok(lambda msg: "teleport" in msg and "always-include" in msg, "MCP error"),
        ),
        "build_server unfitted retriever: every request gets the error": (
            lambda: built_error(upstream(names), make_retriever("dtdr-c", encoder="tfidf")),
            Ok(lambda msg: "not fitted" in msg, "MCP error"),
        ),
        "build_server retriever of another catalogue re-targets to the upstream's tools": (
            lambda: retarget(names[:4]),
            Ok(lambda out: out == tuple(names[:4]), "ranks the upstream's 4 tools"),
        ),
    }


# --------------------------------------------------------------------------------- test
def _classify(fn: Callable[[], Any], expect: Err | Ok) -> tuple[str, str]:
    try:
        result = fn()
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        if isinstance(expect, Err):
            if isinstance(exc, expect.types) and re.search(expect.pattern, str(exc), re.S):
                return "clear error", text
            return "crash", text
        return "crash", text
    if isinstance(expect, Ok):
        try:
            good = bool(expect.check(result))
        except Exception as exc:  # the check itself could not read the result
            return "silently wrong", f"check failed: {type(exc).__name__}: {exc}"
        return ("graceful", "") if good else ("silently wrong", f"not {expect.what}")
    return "silently wrong", f"no error; returned {type(result).__name__}"


def test_integration_bad_inputs(setup: Setup) -> None:
    cases = {
        **_retriever_cases(setup),
        **_factory_cases(setup),
        **_run_cases(setup),
        **_llama_cases(setup),
        **_mcp_cases(setup),
    }
    counts = {"cases": 0, "clear error": 0, "graceful": 0, "crash": 0, "silently wrong": 0}
    problems = []
    for name, (fn, expect) in cases.items():
        counts["cases"] += 1
        outcome, detail = _classify(fn, expect)
        counts[outcome] += 1
        if outcome in ("crash", "silently wrong"):
            problems.append(f"{name}: {outcome}: {detail[:300]}")
    print(f"\nintegration bad inputs: {counts}")
    assert not problems, json.dumps(problems, indent=1)
