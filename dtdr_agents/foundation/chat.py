"""A minimal chat-model protocol, so LLM-based retrievers take any chat model.

The core never imports LangChain: a chat model is anything with `invoke(messages)` where
`messages` is a list of `(role, content)` tuples, which is one of the inputs LangChain chat
models accept, so every LangChain `BaseChatModel` works as is. `OpenAIChat` adapts the `openai`
client (OpenAI or any OpenAI-compatible server: vLLM, llama.cpp, Ollama, ...).

Example:
    >>> from dtdr_agents.foundation.chat import OpenAIChat, message_text
    >>> llm = OpenAIChat("qwen3-0.6b", base_url="http://localhost:8000/v1")  # doctest: +SKIP
    >>> message_text(llm.invoke([("human", "Say hi")]))  # doctest: +SKIP
    'hi'
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from dtdr_agents.foundation.errors import ChatModelError
from dtdr_agents.foundation.retry import (
    EndpointFaultError,
    RetryPolicy,
    acall_with_retry,
    call_with_retry,
)

Message = tuple[str, str]
"""A chat message as `(role, content)`; roles "system", "human"/"user", "ai"/"assistant"."""

OPENAI_INSTALL_HINT = "pip install 'dtdr-agents[openai]'"

_OPENAI_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "developer": "developer",
}


@runtime_checkable
class ChatModel(Protocol):
    """Anything that answers a list of `(role, content)` messages.

    LangChain chat models satisfy it (`BaseChatModel.invoke` accepts such a list); so does
    `OpenAIChat`. The result may be a message object with a `content` attribute (a string or
    a list of content blocks) or a plain string; read it with `message_text`.
    """

    def invoke(self, messages: list[Message], /) -> Any:
        """Answer the conversation `messages`."""
        ...


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if isinstance(block, Mapping):
        if block.get("type", "text") == "text" and isinstance(block.get("text"), str):
            return str(block["text"])
        return ""
    text = getattr(block, "text", None)
    return text if isinstance(text, str) else ""


def message_text(result: Any) -> str:
    """The text of a chat model's answer.

    Args:
        result: A plain string, an object with a `content` attribute (LangChain `AIMessage`),
            or a mapping with a "content" key. `content` may be a string or a list of content
            blocks (strings or `{"type": "text", "text": ...}`; other block types, such as
            reasoning or tool calls, are skipped).

    Returns:
        The answer's text (possibly empty).

    Raises:
        ChatModelError: If no text can be read from `result`.
    """
    if isinstance(result, str):
        return result
    if isinstance(result, Mapping):
        if "content" not in result:
            raise ChatModelError(
                f"cannot read text from the chat model's answer: a mapping without 'content' "
                f"(keys {sorted(map(str, result))})"
            )
        content = result["content"]
    else:
        if not hasattr(result, "content"):
            raise ChatModelError(
                "cannot read text from the chat model's answer: expected a string or an object "
                f"with a 'content' attribute, got {type(result).__name__}"
            )
        content = result.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(_block_text(b) for b in content)
    raise ChatModelError(
        f"cannot read text from the chat model's answer: 'content' is a {type(content).__name__}"
    )


def invoke_text(model: ChatModel, messages: list[Message]) -> str:
    """Call `model.invoke(messages)` and return the answer's text.

    Raises:
        ChatModelError: If the call fails (the original exception is chained) or its result
            has no readable text.
    """
    try:
        result = model.invoke(messages)
    except ChatModelError:
        raise
    except Exception as exc:
        raise _model_failed(model, exc) from exc
    return message_text(result)


def _model_failed(model: object, exc: Exception) -> ChatModelError:
    return ChatModelError(
        f"the chat model ({type(model).__name__}) failed: {type(exc).__name__}: {exc}"
    )


async def ainvoke_text(model: ChatModel, messages: list[Message]) -> str:
    """Async `invoke_text`: the answer's text of a chat model, without blocking the loop.

    Awaits `model.ainvoke(messages)` when the model has `ainvoke` (`OpenAIChat`, LangChain
    chat models); otherwise runs `model.invoke(messages)` in a worker thread.

    Raises:
        ChatModelError: If the call fails (the original exception is chained) or its result
            has no readable text.
    """
    try:
        ainvoke = getattr(model, "ainvoke", None)
        if callable(ainvoke):
            result = await ainvoke(messages)
        else:
            result = await asyncio.to_thread(model.invoke, messages)
    except ChatModelError:
        raise
    except Exception as exc:
        raise _model_failed(model, exc) from exc
    return message_text(result)


def check_completion(response: Any) -> Any:
    """`response` if it is a chat completion with a first choice holding a message.

    Raises:
        EndpointFaultError: The body is not JSON (the `openai` client returns such a body, an
            HTML error page for example, as text), is an error object, has no choices, or its
            first choice has no message (an HTTP 200 that is the endpoint's fault, not the
            model's answer).
    """

    def get(obj: Any, key: str) -> Any:
        return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)

    if isinstance(response, str | bytes):  # the SDK hands back a body it could not parse
        text = response.decode("utf-8", "replace") if isinstance(response, bytes) else response
        start = " ".join(text.split())[:80]
        raise EndpointFaultError(
            f"HTTP 200 with a body that is not JSON (an HTML error page?): {start!r}"
        )
    error = get(response, "error")
    if error:
        raise EndpointFaultError(f"HTTP 200 with an error body: {str(error)[:200]}")
    choices = get(response, "choices")
    if not choices:
        raise EndpointFaultError("HTTP 200 with no choices")
    if get(choices[0], "message") is None:
        raise EndpointFaultError("HTTP 200 whose first choice has no message")
    return response


def _cut_short(exc: json.JSONDecodeError) -> EndpointFaultError:
    fault = EndpointFaultError(f"HTTP 200 with a body that is not JSON (cut short?): {exc}")
    fault.__cause__ = exc
    return fault


class OpenAIChat:
    """A `ChatModel` over the `openai` client's chat-completions API, sync and async.

    Works with OpenAI and any OpenAI-compatible server. The `openai` package is imported on
    first use (install it with `pip install 'dtdr-agents[openai]'`). Every request goes through
    `dtdr_agents.foundation.retry` (tenacity: exponential backoff with jitter on 408/409/429, 5xx,
    time-outs, connection errors and `EndpointFaultError`) with a per-request time-out; the clients
    it builds do not retry on their own (``max_retries=0``: the SDK's retries do not cover an HTTP
    200 that is not a completion, and two retry layers would multiply the attempts).

    Args:
        model: The model name sent with every request.
        base_url: The API base URL (e.g. "http://localhost:8000/v1"); None uses the client's
            default (`OPENAI_BASE_URL` or api.openai.com).
        api_key: The API key. None uses `OPENAI_API_KEY`; when that is unset and `base_url` is
            given (a local server), a placeholder key is sent.
        temperature: Sampling temperature (0 = greedy, as the DTDR paper decodes).
        max_tokens: Maximum tokens of the answer; None leaves it to the server.
        timeout: Per-request time-out in seconds (None: no bound).
        max_retries: Retries of a transiently failed request.
        extra: Further keyword arguments for `chat.completions.create`.
        client: An existing `openai.OpenAI` client to use instead of building one.
        async_client: An existing `openai.AsyncOpenAI` client for `ainvoke`/`acreate`; by
            default one is built per event loop.
        retry: Full retry settings; overrides `timeout` and `max_retries` when given.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
        timeout: float | None = 60.0,
        max_retries: int = 2,
        extra: Mapping[str, Any] | None = None,
        client: Any = None,
        async_client: Any = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError("model must be a non-empty model name")
        self.model = model
        self.base_url = base_url
        self.api_key = api_key
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.max_retries = max_retries
        self.extra = dict(extra or {})
        self.retry = retry
        self._client = client
        self._async_client = async_client
        self._async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )
        self.retry_policy  # validate now  # noqa: B018

    def __repr__(self) -> str:
        where = f", base_url={self.base_url!r}" if self.base_url else ""
        return f"OpenAIChat({self.model!r}{where})"

    @property
    def retry_policy(self) -> RetryPolicy:
        """The retry settings every request uses."""
        if self.retry is not None:
            return self.retry
        return RetryPolicy(max_retries=self.max_retries, timeout=self.timeout)

    def _client_kwargs(self) -> dict[str, Any]:
        api_key = self.api_key
        if api_key is None and self.base_url is not None and not os.environ.get("OPENAI_API_KEY"):
            api_key = "not-needed"  # local OpenAI-compatible servers ignore the key
        kwargs: dict[str, Any] = {"max_retries": 0}  # dtdr_agents.foundation.retry retries
        if api_key is not None:
            kwargs["api_key"] = api_key
        if self.base_url is not None:
            kwargs["base_url"] = self.base_url
        timeout = self.retry_policy.timeout
        if timeout is not None:
            kwargs["timeout"] = timeout
        return kwargs

    @staticmethod
    def _openai() -> Any:
        try:
            import openai
        except ImportError as exc:
            raise ImportError(
                f"OpenAIChat needs the openai package: {OPENAI_INSTALL_HINT}"
            ) from exc
        return openai

    @property
    def client(self) -> Any:
        """The `openai.OpenAI` client (built on first use)."""
        if self._client is None:
            self._client = self._openai().OpenAI(**self._client_kwargs())
        return self._client

    @property
    def async_client(self) -> Any:
        """The `openai.AsyncOpenAI` client of the running event loop (built on first use).

        An async HTTP connection pool belongs to one event loop, so each loop gets its own
        client (unless one was passed to the constructor).
        """
        if self._async_client is not None:
            return self._async_client
        loop = asyncio.get_running_loop()
        client = self._async_clients.get(loop)
        if client is None:
            client = self._openai().AsyncOpenAI(**self._client_kwargs())
            self._async_clients[loop] = client
        return client

    @staticmethod
    def to_openai_messages(messages: Sequence[Message]) -> list[dict[str, str]]:
        """`(role, content)` tuples as OpenAI chat messages (LangChain role names mapped)."""
        out = []
        for pos, message in enumerate(messages):
            if not (isinstance(message, tuple | list) and len(message) == 2):
                raise ChatModelError(f"messages[{pos}] must be a (role, content) pair")
            role, content = message
            mapped = _OPENAI_ROLES.get(str(role).lower())
            if mapped is None:
                raise ChatModelError(
                    f"messages[{pos}] has role {role!r}; use one of {sorted(_OPENAI_ROLES)}"
                )
            out.append({"role": mapped, "content": str(content)})
        return out

    def request_kwargs(
        self, messages: Sequence[Mapping[str, Any]], **kwargs: Any
    ) -> dict[str, Any]:
        """Keyword arguments of `chat.completions.create` for OpenAI-format `messages`.

        Adds the model, temperature, max_tokens, `extra` and the per-request time-out; `kwargs`
        (e.g. `tools`, `tool_choice`) override them.
        """
        out: dict[str, Any] = {"model": self.model, "messages": list(messages), **self.extra}
        if self.temperature is not None:
            out["temperature"] = self.temperature
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        timeout = self.retry_policy.timeout
        if timeout is not None:
            out["timeout"] = timeout
        out.update(kwargs)
        return out

    def _failed(self, exc: Exception) -> ChatModelError:
        return ChatModelError(
            f"OpenAI chat request to {self.base_url or 'the default endpoint'} "
            f"(model {self.model!r}) failed: {type(exc).__name__}: {exc}"
        )

    def create(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        sleep: Callable[[float], Any] = time.sleep,
        **kwargs: Any,
    ) -> Any:
        """One chat completion (with retries) for OpenAI-format `messages`; the raw response.

        An HTTP 200 that is not a completion (`check_completion`: an error body, no choices,
        a body cut short) is an `EndpointFaultError`, retried like a 5xx.

        Args:
            messages: OpenAI chat messages (dicts; tool-call messages allowed).
            sleep: Waits between retries (inject a recorder in tests).
            **kwargs: Further arguments of `chat.completions.create` (`tools`, ...).

        Raises:
            ChatModelError: If the request still fails after the retries (the last error is
                chained as `__cause__`).
        """
        request = self.request_kwargs(messages, **kwargs)
        client = self.client

        def once() -> Any:
            try:
                return check_completion(client.chat.completions.create(**request))
            except json.JSONDecodeError as exc:
                raise _cut_short(exc) from exc

        try:
            return call_with_retry(once, self.retry_policy, sleep=sleep)
        except Exception as exc:
            raise self._failed(exc) from exc

    async def acreate(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        **kwargs: Any,
    ) -> Any:
        """Async `create`: one chat completion through `openai.AsyncOpenAI`, with retries.

        Raises:
            ChatModelError: If the request still fails after the retries.
        """
        request = self.request_kwargs(messages, **kwargs)
        client = self.async_client

        async def once() -> Any:
            try:
                return check_completion(await client.chat.completions.create(**request))
            except json.JSONDecodeError as exc:
                raise _cut_short(exc) from exc

        try:
            return await acall_with_retry(once, self.retry_policy, sleep=sleep)
        except Exception as exc:
            raise self._failed(exc) from exc

    def _text(self, response: Any) -> str:
        choices = getattr(response, "choices", None)
        if not choices:
            raise ChatModelError(f"the chat model {self.model!r} returned no choices")
        content = getattr(choices[0].message, "content", None)
        return content if isinstance(content, str) else ""

    def invoke(self, messages: list[Message], /) -> str:
        """Send `messages` and return the answer's text.

        Raises:
            ChatModelError: If the request fails or the answer has no choices.
        """
        return self._text(self.create(self.to_openai_messages(messages)))

    async def ainvoke(self, messages: list[Message], /) -> str:
        """Async `invoke`: send `messages` and return the answer's text.

        Raises:
            ChatModelError: If the request fails or the answer has no choices.
        """
        return self._text(await self.acreate(self.to_openai_messages(messages)))

    async def aclose(self) -> None:
        """Close the async client of the running event loop (if this object built one)."""
        if self._async_client is not None:
            return
        client = self._async_clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()


__all__ = [
    "ChatModel",
    "Message",
    "OpenAIChat",
    "ainvoke_text",
    "check_completion",
    "invoke_text",
    "message_text",
]
