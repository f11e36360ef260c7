"""Tool-search backends: the retriever answers the model's searches in the platforms' shapes.

The loops run against loopback servers that check the documented wire formats (see
tests/tool_search_server.py); nothing here reaches the real APIs.
"""

from __future__ import annotations

import warnings
from typing import Any

import httpx
import pytest
from tool_search_server import AnthropicToolSearchServer, ResponsesToolSearchServer

from dtdr_agents.runtime import StepSelector
from dtdr_agents.runtime.tool_search import (
    NO_MATCH_TEXT,
    ToolSearchBackend,
    ToolSearchWarning,
    anthropic_calls,
    anthropic_deferred_tools,
    anthropic_search_tool,
    anthropic_tool_result,
    openai_calls,
    openai_deferred_tools,
    openai_search_tool,
)
from langchain_dtdr.testing import DemoSetup, demo_setup


@pytest.fixture(scope="module")
def demo() -> DemoSetup:
    return demo_setup("dtdr-c", encoder="tfidf")


@pytest.fixture
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def test_search_is_the_step_selectors_selection(demo: DemoSetup) -> None:
    backend = ToolSearchBackend(demo.retriever)
    selector = StepSelector(demo.tools, demo.retriever)
    for d in demo.test[:5]:
        for i in range(len(d.calls)):
            expected = list(selector.select(d.query, d.calls[:i]).selection.names)
            assert backend.search(d.query, d.calls[:i]) == expected


def test_the_calls_so_far_change_the_answer(demo: DemoSetup) -> None:
    backend = ToolSearchBackend(demo.retriever)
    changed = [
        d
        for d in demo.test
        if len(d.calls) > 1 and backend.search(d.query) != backend.search(d.query, d.calls[:1])
    ]
    assert changed, "the history never changed a search: it is not passed to the retriever"


def test_names_outside_the_catalogue_are_ignored_with_a_warning(demo: DemoSetup) -> None:
    backend = ToolSearchBackend(demo.retriever)
    d = demo.test[0]
    with pytest.warns(ToolSearchWarning, match="not_a_tool"):
        found = backend.search(d.query, candidates=[*demo.tools.names, "not_a_tool"])
    assert "not_a_tool" not in found and found == backend.search(d.query)
    with pytest.warns(ToolSearchWarning, match="ghost"):
        assert backend.search(d.query, ["ghost", *d.calls[:1]]) == backend.search(
            d.query, d.calls[:1]
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        backend.search(d.query, d.calls[:1], candidates=demo.tools.names)  # no warning


def test_candidates_limit_and_bad_queries(demo: DemoSetup) -> None:
    backend = ToolSearchBackend(demo.retriever, limit=2)
    d = demo.test[0]
    full = ToolSearchBackend(demo.retriever).search(d.query)
    assert backend.search(d.query) == full[:2]
    assert backend.search(d.query, candidates=full[1:2]) == full[1:2]
    with pytest.raises(ValueError, match="non-empty"):
        backend.search("  ")
    with pytest.raises(ValueError, match="limit"):
        ToolSearchBackend(demo.retriever, limit=0)


def test_wire_shapes() -> None:
    assert anthropic_tool_result("toolu_1", ["a", "b"]) == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [
            {"type": "tool_reference", "tool_name": "a"},
            {"type": "tool_reference", "tool_name": "b"},
        ],
    }
    empty = anthropic_tool_result("toolu_2", [])
    assert empty["content"] == [{"type": "text", "text": NO_MATCH_TEXT}]
    assert openai_search_tool()["execution"] == "client"
    messages = [
        {"role": "user", "content": "old"},
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
        {"role": "user", "content": "new"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "1", "name": "tool_search"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "1", "content": []}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "2", "name": "a"}]},
    ]
    assert anthropic_calls(messages, skip=["tool_search"]) == ["a"]
    items = [{"role": "user", "content": "q"}, {"type": "function_call", "name": "a"}]
    assert openai_calls(items) == ["a"]


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(url, json=body, timeout=30)
    assert response.status_code == 200, response.text
    out: dict[str, Any] = response.json()
    return out


def test_anthropic_client_side_search_on_loopback(demo: DemoSetup, no_proxies: None) -> None:
    backend = ToolSearchBackend(demo.retriever)
    tools = [anthropic_search_tool(), *anthropic_deferred_tools(demo.tools)]
    done = 0
    with AnthropicToolSearchServer(demo.plans()) as server:
        for d in demo.test[:6]:
            messages: list[dict[str, Any]] = [{"role": "user", "content": d.query}]
            for _ in range(3 * len(d.calls) + 3):
                reply = _post(
                    server.url,
                    {"model": "m", "max_tokens": 64, "tools": tools, "messages": messages},
                )
                messages.append({"role": "assistant", "content": reply["content"]})
                uses = [b for b in reply["content"] if b["type"] == "tool_use"]
                if not uses:
                    done += reply["content"][0]["text"].startswith("Done:")
                    break
                use = uses[0]
                if use["name"] == "tool_search":
                    history = anthropic_calls(messages, skip=["tool_search"])
                    result = backend.anthropic_result(use, history)
                    names = [b["tool_name"] for b in result["content"] if "tool_name" in b]
                    assert names == backend.search(d.query, history)
                else:
                    result = {"type": "tool_result", "tool_use_id": use["id"], "content": "ok"}
                messages.append({"role": "user", "content": [result]})
    assert done >= 3, f"only {done} of 6 plans completed through the search"


def test_openai_client_side_search_on_loopback(demo: DemoSetup, no_proxies: None) -> None:
    backend = ToolSearchBackend(demo.retriever)
    tools = [openai_search_tool(), *openai_deferred_tools(demo.tools)]
    done = 0
    with ResponsesToolSearchServer(demo.plans()) as server:
        for d in demo.test[:6]:
            items: list[dict[str, Any]] = [{"role": "user", "content": d.query}]
            for _ in range(3 * len(d.calls) + 3):
                out = _post(server.url, {"model": "m", "input": items, "tools": tools})["output"]
                item = out[0]
                items.append(item)
                if item["type"] == "message":
                    done += item["content"][0]["text"].startswith("Done:")
                    break
                if item["type"] == "tool_search_call":
                    history = openai_calls(items)
                    answer = backend.openai_output(item, history)
                    assert [t["name"] for t in answer["tools"]] == backend.search(d.query, history)
                    assert all("defer_loading" not in t for t in answer["tools"])
                    items.append(answer)
                else:
                    items.append(
                        {"type": "function_call_output", "call_id": item["call_id"], "output": "ok"}
                    )
    assert done >= 3, f"only {done} of 6 plans completed through the search"


def test_the_loopback_servers_refuse_what_the_apis_refuse(
    demo: DemoSetup, no_proxies: None
) -> None:
    tools = [anthropic_search_tool(), *anthropic_deferred_tools(demo.tools)]
    d = demo.test[0]
    with AnthropicToolSearchServer(demo.plans()) as server:
        first = _post(
            server.url,
            {"model": "m", "tools": tools, "messages": [{"role": "user", "content": d.query}]},
        )
        use = first["content"][0]
        bad = {
            "type": "tool_result",
            "tool_use_id": use["id"],
            "content": [{"type": "tool_reference", "tool_name": "ghost"}],
        }
        messages = [
            {"role": "user", "content": d.query},
            {"role": "assistant", "content": first["content"]},
            {"role": "user", "content": [bad]},
        ]
        response = httpx.post(
            server.url, json={"model": "m", "tools": tools, "messages": messages}, timeout=30
        )
        assert response.status_code == 400 and "ghost" in response.text


def test_a_reloader_serves_the_search(demo: DemoSetup, tmp_path: Any) -> None:
    from dtdr_agents.retrievers import load_retriever, make_retriever
    from dtdr_agents.runtime.tool_search import catalogue_of
    from dtdr_agents.store import Reloader, publish

    model = make_retriever("bm25").fit(demo.train, demo.tools)
    publish(tmp_path, model.save, check=load_retriever)
    reloader = Reloader(tmp_path, load_retriever, poll_interval=None)
    assert catalogue_of(reloader).names == demo.tools.names
    d = demo.test[0]
    assert ToolSearchBackend(reloader).search(d.query) == ToolSearchBackend(model).search(d.query)
    with pytest.raises(TypeError):
        catalogue_of(object())
