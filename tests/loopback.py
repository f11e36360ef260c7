"""Shared fixtures of the loopback-HTTP integration tests (import them into a test module).

`demo` is DTDR-C fitted on the demo data (cached per process); `server` is the loopback OpenAI
chat-completions server playing each request's recorded plan; `no_proxies` keeps HTTP clients
off any proxy configured in the environment.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai_server import OpenAIChatServer, plan_responder

from langchain_dtdr.testing import DemoSetup, demo_setup

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture(scope="module")
def demo() -> DemoSetup:
    """DTDR-C fitted on 300 demo demonstrations (shared per process)."""
    return demo_setup("dtdr-c")


@pytest.fixture
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Talk to 127.0.0.1 directly."""
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def server(demo: DemoSetup, no_proxies: None) -> Iterator[OpenAIChatServer]:
    """The loopback server, playing each request's recorded plan."""
    with OpenAIChatServer(plan_responder(demo.plans(), demo.args_for)) as srv:
        yield srv
