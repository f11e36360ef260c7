"""The retry helper: which errors are retried, backoff with jitter, time-outs, injected sleep."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from dtdr_agents.foundation.retry import (
    RetryPolicy,
    acall_with_retry,
    call_with_retry,
    is_transient,
    retry_after,
)


class HTTPError(Exception):
    """An API error with a status code (like openai.APIStatusError)."""

    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code = status
        self.response = type("R", (), {"headers": headers or {}, "status_code": status})()


class APIConnectionError(Exception):
    """Named like openai's connection error (classified by type name)."""


def flaky(errors: list[BaseException], value: Any = "ok") -> tuple[Any, list[int]]:
    calls: list[int] = []

    def fn() -> Any:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return value

    return fn, calls


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (HTTPError(429), True),
        (HTTPError(500), True),
        (HTTPError(503), True),
        (HTTPError(408), True),
        (HTTPError(400), False),
        (HTTPError(401), False),
        (HTTPError(404), False),
        (TimeoutError(), True),
        (ConnectionRefusedError(), True),
        (APIConnectionError(), True),
        (ValueError("bug"), False),
        (KeyError("x"), False),
    ],
)
def test_is_transient(exc: BaseException, expected: bool) -> None:
    assert is_transient(exc) is expected


def test_openai_exception_types_are_transient() -> None:
    openai = pytest.importorskip("openai")
    httpx = pytest.importorskip("httpx")
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    assert is_transient(openai.APIConnectionError(request=request))
    assert is_transient(openai.APITimeoutError(request=request))
    for status, expected in ((429, True), (500, True), (400, False)):
        response = httpx.Response(status, request=request)
        assert is_transient(openai.APIStatusError("x", response=response, body=None)) is expected


def test_retries_until_success_with_backoff() -> None:
    fn, calls = flaky([HTTPError(500), HTTPError(429), TimeoutError()])
    slept: list[float] = []
    policy = RetryPolicy(max_retries=4, base_delay=1.0, max_delay=100.0, jitter=0.0)
    assert call_with_retry(fn, policy, sleep=slept.append) == "ok"
    assert len(calls) == 4
    assert slept == [1.0, 2.0, 4.0]  # exponential, no jitter


def test_gives_up_after_max_retries_and_raises_last_error() -> None:
    fn, calls = flaky([HTTPError(500), HTTPError(502), HTTPError(503)])
    slept: list[float] = []
    with pytest.raises(HTTPError, match="502"):
        call_with_retry(fn, RetryPolicy(max_retries=1, base_delay=0.0), sleep=slept.append)
    assert len(calls) == 2
    assert len(slept) == 1


def test_permanent_error_is_not_retried() -> None:
    fn, calls = flaky([HTTPError(400)])
    slept: list[float] = []
    with pytest.raises(HTTPError):
        call_with_retry(fn, RetryPolicy(max_retries=5), sleep=slept.append)
    assert len(calls) == 1
    assert slept == []


def test_jitter_bounds_and_cap() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=5.0, jitter=0.5)
    rng = random.Random(0)
    delays = [policy.delay(a, rng) for a in range(8) for _ in range(20)]
    assert all(0.5 <= d <= 5.0 for d in delays)
    assert len({round(d, 6) for d in delays}) > 10  # randomised
    assert max(policy.delay(10, random.Random(1)) for _ in range(5)) <= 5.0
    assert RetryPolicy(base_delay=1.0, jitter=1.0).delay(0, random.Random(0)) < 1.0


def test_retry_after_header_raises_the_delay_up_to_the_cap() -> None:
    assert retry_after(HTTPError(429, {"retry-after": "3"})) == 3.0
    assert retry_after(HTTPError(429, {"retry-after": "soon"})) is None
    assert retry_after(ValueError()) is None
    slept: list[float] = []
    fn, _ = flaky([HTTPError(429, {"retry-after": "3"}), HTTPError(429, {"retry-after": "99"})])
    policy = RetryPolicy(base_delay=0.01, max_delay=10.0, jitter=0.0)
    call_with_retry(fn, policy, sleep=slept.append)
    assert slept == [3.0, 10.0]


def test_on_retry_callback() -> None:
    seen: list[tuple[int, str]] = []
    fn, _ = flaky([HTTPError(503), HTTPError(503)])
    call_with_retry(
        fn,
        RetryPolicy(base_delay=0.0),
        sleep=lambda s: None,
        on_retry=lambda n, e, d: seen.append((n, str(e))),
    )
    assert seen == [(1, "HTTP 503"), (2, "HTTP 503")]


def test_policy_validation() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        RetryPolicy(max_retries=-1)
    with pytest.raises(ValueError, match="jitter"):
        RetryPolicy(jitter=2.0)
    with pytest.raises(ValueError, match="timeout"):
        RetryPolicy(timeout=0)


async def test_async_retries_and_injected_sleep() -> None:
    errors: list[BaseException] = [HTTPError(500), HTTPError(429)]
    slept: list[float] = []

    async def fn() -> str:
        if errors:
            raise errors.pop(0)
        return "done"

    async def sleep(s: float) -> None:
        slept.append(s)

    policy = RetryPolicy(base_delay=0.5, jitter=0.0)
    assert await acall_with_retry(fn, policy, sleep=sleep) == "done"
    assert slept == [0.5, 1.0]


async def test_async_per_attempt_timeout_is_retried_then_raised() -> None:
    attempts: list[int] = []

    async def slow() -> str:
        attempts.append(1)
        await asyncio.sleep(10)
        return "never"

    async def sleep(s: float) -> None:
        return None

    policy = RetryPolicy(max_retries=2, base_delay=0.0, timeout=0.02)
    with pytest.raises(TimeoutError):
        await acall_with_retry(slow, policy, sleep=sleep)
    assert len(attempts) == 3


def test_endpoint_fault_is_retried_and_the_delay_reaches_on_retry() -> None:
    from dtdr_agents.foundation.retry import EndpointFaultError

    seen: list[tuple[int, str, float]] = []
    fn, calls = flaky(
        [EndpointFaultError("HTTP 200 with no choices"), HTTPError(429, {"retry-after": "2"})]
    )
    policy = RetryPolicy(max_retries=2, base_delay=0.5, max_delay=10.0, jitter=0.0)
    out = call_with_retry(
        fn,
        policy,
        sleep=lambda s: None,
        on_retry=lambda n, e, d: seen.append((n, type(e).__name__, d)),
    )
    assert out == "ok" and len(calls) == 3
    assert seen == [(1, "EndpointFaultError", 0.5), (2, "HTTPError", 2.0)]


def test_an_interrupt_is_never_retried() -> None:
    fn, calls = flaky([KeyboardInterrupt()])
    with pytest.raises(KeyboardInterrupt):
        call_with_retry(fn, RetryPolicy(max_retries=3, base_delay=0.0), sleep=lambda s: None)
    assert len(calls) == 1
