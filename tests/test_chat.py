"""OpenAIChat through the real `openai` client against the loopback server: sync and async
paths, retries on injected 500/429, per-request time-out, and `ainvoke_text`."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from openai_server import OpenAIChatServer, clear_proxies

from dtdr_agents.foundation.chat import OpenAIChat, ainvoke_text, invoke_text
from dtdr_agents.foundation.errors import ChatModelError
from dtdr_agents.foundation.retry import RetryPolicy

FAST = RetryPolicy(max_retries=3, base_delay=0.0, jitter=0.0, timeout=5.0)


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_proxies(monkeypatch)


def echo(body: dict[str, Any]) -> dict[str, Any]:
    last = body["messages"][-1]["content"]
    if last == "slow":
        return {"content": "late", "delay": 1.0}
    return {"content": f"echo: {last}"}


@pytest.fixture
def server() -> Iterator[OpenAIChatServer]:
    with OpenAIChatServer(echo) as srv:
        yield srv


def test_invoke_sends_messages_and_reads_text(server: OpenAIChatServer) -> None:
    llm = OpenAIChat("tiny", base_url=server.base_url, retry=FAST)
    assert llm.invoke([("system", "be brief"), ("human", "hi")]) == "echo: hi"
    (body,) = server.requests
    assert body["model"] == "tiny"
    assert body["temperature"] == 0.0
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]


@pytest.mark.parametrize("status", [500, 429, 503])
def test_retries_an_injected_error(server: OpenAIChatServer, status: int) -> None:
    server.inject(status, times=2)
    llm = OpenAIChat("tiny", base_url=server.base_url, retry=FAST)
    assert llm.invoke([("human", "again")]) == "echo: again"
    assert len(server.failed) == 2  # the server saw the failed attempts
    assert len(server.requests) == 1


def test_sleeps_between_retries_with_backoff(server: OpenAIChatServer) -> None:
    server.inject(500, times=2)
    slept: list[float] = []
    llm = OpenAIChat("tiny", base_url=server.base_url, retry=RetryPolicy(base_delay=0.25, jitter=0))
    response = llm.create([{"role": "user", "content": "x"}], sleep=slept.append)
    assert response.choices[0].message.content == "echo: x"
    assert slept == [0.25, 0.5]


def test_gives_up_and_does_not_retry_client_errors(server: OpenAIChatServer) -> None:
    server.inject(500, times=10)
    llm = OpenAIChat("tiny", base_url=server.base_url, retry=FAST)
    with pytest.raises(ChatModelError, match="InternalServerError"):
        llm.invoke([("human", "x")])
    assert len(server.failed) == 4  # 1 + 3 retries
    server2_failed = len(server.failed)
    server._server.faults.clear()
    server.inject(400)
    with pytest.raises(ChatModelError, match="BadRequest"):
        llm.invoke([("human", "x")])
    assert len(server.failed) == server2_failed + 1  # no retry on 400


def test_per_request_timeout(server: OpenAIChatServer) -> None:
    llm = OpenAIChat(
        "tiny",
        base_url=server.base_url,
        retry=RetryPolicy(max_retries=1, base_delay=0.0, timeout=0.2),
    )
    with pytest.raises(ChatModelError, match="Timeout"):
        llm.invoke([("human", "slow")])
    assert len(server.requests) == 2  # first attempt + one retry, each timed out


def test_unreachable_endpoint_is_a_chat_model_error() -> None:
    llm = OpenAIChat(
        "tiny",
        base_url="http://127.0.0.1:9/v1",
        retry=RetryPolicy(max_retries=1, base_delay=0.0, timeout=2.0),
    )
    with pytest.raises(ChatModelError, match="Connection"):
        llm.invoke([("human", "x")])


def test_timeout_parameter_builds_the_policy() -> None:
    llm = OpenAIChat("tiny", base_url="http://127.0.0.1:9/v1", timeout=7.5, max_retries=1)
    assert llm.retry_policy.timeout == 7.5
    assert llm.retry_policy.max_retries == 1
    assert llm.client.max_retries == 0  # dtdr_agents.foundation.retry is the one retry layer
    assert llm.request_kwargs([])["timeout"] == 7.5


async def test_ainvoke_and_async_retry(server: OpenAIChatServer) -> None:
    llm = OpenAIChat("tiny", base_url=server.base_url, retry=FAST)
    server.inject(429, headers={"Retry-After": "0"})
    answers = await asyncio.gather(*(llm.ainvoke([("human", f"q{i}")]) for i in range(5)))
    assert answers == [f"echo: q{i}" for i in range(5)]
    assert len(server.requests) == 5
    assert len(server.failed) == 1
    await llm.aclose()


async def test_async_timeout(server: OpenAIChatServer) -> None:
    llm = OpenAIChat(
        "tiny", base_url=server.base_url, retry=RetryPolicy(max_retries=0, timeout=0.2)
    )
    with pytest.raises(ChatModelError):
        await llm.ainvoke([("human", "slow")])
    await llm.aclose()


async def test_ainvoke_text_uses_ainvoke_or_a_thread(server: OpenAIChatServer) -> None:
    llm = OpenAIChat("tiny", base_url=server.base_url, retry=FAST)
    assert await ainvoke_text(llm, [("human", "a")]) == "echo: a"
    await llm.aclose()

    class SyncOnly:
        def __init__(self) -> None:
            self.threads: list[str] = []

        def invoke(self, messages: list[tuple[str, str]]) -> str:
            self.threads.append(threading.current_thread().name)
            return "sync " + messages[-1][1]

    model = SyncOnly()
    assert await ainvoke_text(model, [("human", "b")]) == "sync b"
    assert model.threads and model.threads[0] != threading.main_thread().name
    assert invoke_text(model, [("human", "c")]) == "sync c"

    class Broken:
        def invoke(self, messages: list[tuple[str, str]]) -> str:
            raise RuntimeError("boom")

    with pytest.raises(ChatModelError, match="boom"):
        await ainvoke_text(Broken(), [("human", "x")])


def test_async_clients_are_per_event_loop(server: OpenAIChatServer) -> None:
    llm = OpenAIChat("tiny", base_url=server.base_url, retry=FAST)
    # two separate asyncio.run calls: each loop gets its own client, both work
    assert asyncio.run(llm.ainvoke([("human", "1")])) == "echo: 1"
    assert asyncio.run(llm.ainvoke([("human", "2")])) == "echo: 2"
