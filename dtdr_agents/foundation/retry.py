"""The package's one retry helper: exponential backoff with jitter, sync and async, on tenacity.

A request is retried when it fails transiently: HTTP 408, 409, 429 or 5xx, a time-out, or a
connection error (the `openai` and `httpx` exception types and Python's `TimeoutError` /
`ConnectionError`). Anything else (a 400, a bad key, a bug) is raised at once. The delay before
retry ``n`` (0-based) is ``min(max_delay, base_delay * 2**n)`` scaled by a random factor in
``[1 - jitter, 1]``; a server's ``Retry-After`` header raises it (never above `max_delay`).

`tenacity` runs the loop; this module only says which errors are retried and how long to wait.
The `openai` clients' own retries stay off (`OpenAIChat` builds them with ``max_retries=0``): they
do not retry an `EndpointFaultError` (an HTTP 200 whose body is not a completion), do not take an
injected sleep, and would multiply the attempts of this layer.

The async helper also bounds each attempt with `RetryPolicy.timeout` (`asyncio.wait_for`); the
sync helper cannot interrupt a blocking call, so callers pass the time-out to their client
(`OpenAIChat` passes it to every request).

Example:
    >>> from dtdr_agents.foundation.retry import RetryPolicy, call_with_retry
    >>> call_with_retry(lambda: 42, RetryPolicy(max_retries=2))
    42
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
)

T = TypeVar("T")

RETRY_STATUS = frozenset({408, 409, 429})
"""HTTP statuses retried besides every 5xx."""

_TRANSIENT_TYPES = frozenset(
    {
        # openai
        "APIConnectionError",
        "APITimeoutError",
        "RateLimitError",
        "InternalServerError",
        # httpx
        "TimeoutException",
        "ConnectError",
        "ReadError",
        "WriteError",
        "RemoteProtocolError",
        "NetworkError",
        "TransportError",
        # an HTTP 200 whose body is not a chat completion (dtdr_agents.foundation.chat)
        "EndpointFaultError",
    }
)


class EndpointFaultError(RuntimeError):
    """The endpoint answered HTTP 200 with a body that is not a model's answer.

    An error object, no choices, or a body cut short: a fault of the endpoint, retried like
    a 5xx and never scored or cached as the model's answer.
    """


OnRetry = Callable[[int, BaseException, float], None]
"""Called before each retry with (attempt number from 1, the error, the delay in seconds)."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a transient failure.

    Attributes:
        max_retries: Retries after the first attempt (0 = try once).
        base_delay: Delay before the first retry, in seconds (doubled each retry).
        max_delay: Upper bound of any delay, in seconds.
        jitter: Fraction of the delay drawn at random (0 = none, 1 = full jitter).
        timeout: Per-attempt time-out in seconds (None = no bound from this helper).
    """

    max_retries: int = 4
    base_delay: float = 0.5
    max_delay: float = 30.0
    jitter: float = 0.5
    timeout: float | None = 60.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("base_delay and max_delay must be >= 0")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be in [0, 1], got {self.jitter}")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError(f"timeout must be > 0 or None, got {self.timeout}")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry `attempt` (0-based), jitter included."""
        raw = min(self.max_delay, self.base_delay * (2.0**attempt))
        draw = (rng or random).random()
        return raw * (1.0 - self.jitter * draw)


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of an API error (``status_code`` or ``response.status_code``), if any."""
    code = getattr(exc, "status_code", None)
    if code is None:
        code = getattr(getattr(exc, "response", None), "status_code", None)
    return code if isinstance(code, int) else None


def is_transient(exc: BaseException) -> bool:
    """Whether `exc` is worth retrying (408/409/429/5xx, time-out, connection error)."""
    code = status_code(exc)
    if code is not None:
        return code in RETRY_STATUS or code >= 500
    if isinstance(exc, TimeoutError | ConnectionError | asyncio.TimeoutError):
        return True
    return any(cls.__name__ in _TRANSIENT_TYPES for cls in type(exc).__mro__)


def retry_after(exc: BaseException) -> float | None:
    """Seconds from a ``Retry-After`` header of the error's response (numeric form only)."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if not isinstance(headers, Mapping) and not hasattr(headers, "get"):
        return None
    try:
        value = headers.get("retry-after")  # type: ignore[union-attr]
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None


def _retrying(
    policy: RetryPolicy | None,
    retry_if: Callable[[BaseException], bool],
    on_retry: OnRetry | None,
    rng: random.Random | None,
) -> dict[str, Any]:
    """The tenacity settings of `policy`, shared by the sync and async helpers.

    The wait is `RetryPolicy.delay` raised by a ``Retry-After`` hint (capped at `max_delay`);
    the last error is re-raised as is once the retries are used up or it is not transient.
    """
    policy = policy or RetryPolicy()

    def failure(state: RetryCallState) -> BaseException:
        exc = state.outcome.exception() if state.outcome is not None else None
        assert exc is not None  # tenacity waits only after a failed attempt
        return exc

    def wait(state: RetryCallState) -> float:
        delay = policy.delay(state.attempt_number - 1, rng)
        hint = retry_after(failure(state))
        return delay if hint is None else max(delay, min(hint, policy.max_delay))

    def before_sleep(state: RetryCallState) -> None:
        if on_retry is not None and state.next_action is not None:
            on_retry(state.attempt_number, failure(state), state.next_action.sleep)

    return {
        "stop": stop_after_attempt(policy.max_retries + 1),
        "wait": wait,
        "retry": retry_if_exception(retry_if),
        "before_sleep": before_sleep,
        "reraise": True,
    }


def call_with_retry(
    fn: Callable[[], T],
    policy: RetryPolicy | None = None,
    *,
    sleep: Callable[[float], Any] = time.sleep,
    on_retry: OnRetry | None = None,
    rng: random.Random | None = None,
    retry_if: Callable[[BaseException], bool] = is_transient,
) -> T:
    """Call `fn()` and retry it on transient errors (through `tenacity.Retrying`).

    Args:
        fn: The request (no arguments); it should apply `policy.timeout` itself.
        policy: Retry settings (default `RetryPolicy()`).
        sleep: Waits a number of seconds (inject a recorder in tests).
        on_retry: Called before each retry.
        rng: Random source of the jitter.
        retry_if: Which errors to retry (default `is_transient`).

    Returns:
        What `fn` returned.

    Raises:
        Exception: The last error, when it is not transient or the retries are used up.
    """
    retrying = Retrying(sleep=sleep, **_retrying(policy, retry_if, on_retry, rng))
    return retrying(fn)


async def acall_with_retry(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy | None = None,
    *,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    on_retry: OnRetry | None = None,
    rng: random.Random | None = None,
    retry_if: Callable[[BaseException], bool] = is_transient,
) -> T:
    """Await `fn()` with a per-attempt time-out and retry it on transient errors.

    Args:
        fn: Makes a fresh awaitable for each attempt.
        policy: Retry settings (default `RetryPolicy()`); `policy.timeout` bounds each attempt
            (an attempt that exceeds it raises `TimeoutError`, which is retried).
        sleep: Awaits a number of seconds (inject a recorder in tests).
        on_retry: Called before each retry.
        rng: Random source of the jitter.
        retry_if: Which errors to retry (default `is_transient`).

    Returns:
        What the awaitable returned.

    Raises:
        Exception: The last error, when it is not transient or the retries are used up.
    """
    timeout = (policy or RetryPolicy()).timeout

    async def attempt() -> T:
        return await (fn() if timeout is None else asyncio.wait_for(fn(), timeout=timeout))

    retrying = AsyncRetrying(sleep=sleep, **_retrying(policy, retry_if, on_retry, rng))
    return await retrying(attempt)


__all__ = [
    "RETRY_STATUS",
    "OnRetry",
    "RetryPolicy",
    "acall_with_retry",
    "call_with_retry",
    "is_transient",
    "retry_after",
    "status_code",
]
