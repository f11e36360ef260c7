"""A minimal OpenAI chat-completions server on 127.0.0.1, for integration tests.

It speaks ``POST /v1/chat/completions`` (JSON and server-sent-event streaming, tool calls
included), records every request body, and answers with a scripted responder. It also speaks
``POST /v1/embeddings`` (float or base64 vectors; deterministic hashed bag-of-words vectors by
default, see `hashed_bow`), recorded apart (`embedding_requests`, `embedded_texts`).
Standard library only; binds to a loopback address on a free port; one daemon thread.

Example:
    >>> def responder(body):
    ...     return {"content": "hi"}
    >>> with OpenAIChatServer(responder) as server:  # doctest: +SKIP
    ...     client = openai.OpenAI(base_url=server.base_url, api_key="test")
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Mapping[str, Any]
"""A scripted reply: ``{"content": str | None, "tool_calls": [{"name", "arguments"}]}``.

Optional keys for bad-server tests: ``"raw"`` (a string sent as the body instead of a
completion, e.g. malformed JSON), ``"status"`` (HTTP status of that body, default 200),
``"delay"`` (seconds to wait before answering).
"""

Responder = Callable[[dict[str, Any]], Reply]

Embedder = Callable[[list[str]], list[list[float]]]
"""Texts of one ``/v1/embeddings`` request -> their vectors (any shape, for bad-server tests)."""

EMBEDDING_DIM = 64
"""Dimension of the default embeddings (`hashed_bow`)."""

EMBEDDING_ROUTES = ("/v1/embeddings", "/embeddings")


def hashed_bow(text: str, dim: int = EMBEDDING_DIM) -> list[float]:
    """A deterministic embedding: each lower-cased word adds +-1 at a hashed position."""
    vec = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        digest = int.from_bytes(hashlib.sha1(word.encode()).digest()[:8], "big")
        vec[digest % dim] += 1.0 if (digest >> 32) & 1 else -1.0
    return vec


MAX_BODY = 8 * 1024 * 1024


PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)
"""Proxy settings that would route loopback requests away (cleared by `clear_proxies`)."""


def clear_proxies(monkeypatch: Any) -> None:
    """Make HTTP clients reach 127.0.0.1 directly (call from a fixture with `monkeypatch`)."""
    for var in PROXY_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def tool_names(body: Mapping[str, Any]) -> list[str]:
    """Names of the tools a chat-completions request carried, in order."""
    return [t["function"]["name"] for t in body.get("tools") or []]


def history_of(body: Mapping[str, Any]) -> tuple[str, list[str]]:
    """(request, tool-call names since it) of a chat-completions request's messages.

    The request is the first user message after the last assistant answer (an assistant
    message without tool calls), as the DTDR integrations define a turn.
    """
    messages = list(body.get("messages") or [])
    last_answer = -1
    for i, m in enumerate(messages):
        if m.get("role") == "assistant" and not m.get("tool_calls"):
            last_answer = i
    start = next(i for i in range(last_answer + 1, len(messages)) if messages[i]["role"] == "user")
    content = messages[start]["content"]
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content)
    calls = [
        c["function"]["name"]
        for m in messages[start + 1 :]
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or []
    ]
    return str(content).strip(), calls


def plan_responder(
    plans: Mapping[str, Sequence[str]],
    args_for: Callable[[str], Mapping[str, Any]] | None = None,
) -> Responder:
    """A responder that plays each request's recorded plan (a scripted model, no LLM).

    It calls the next planned tool when the request offered it, answers that no offered tool
    fits when it did not, and answers ``Done: a -> b.`` once the plan is complete.

    Args:
        plans: Request text -> tool names in call order.
        args_for: Arguments of a call of a tool (default: none).
    """

    def responder(body: dict[str, Any]) -> Reply:
        query, history = history_of(body)
        plan = list(plans[query])
        if len(history) >= len(plan):
            return {"content": f"Done: {' -> '.join(plan)}."}
        name = plan[len(history)]
        if name not in tool_names(body):
            return {"content": f"No offered tool can do {name}."}
        args = dict(args_for(name)) if args_for is not None else {}
        return {"tool_calls": [{"name": name, "arguments": args}]}

    return responder


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # silence the default logging
        return

    def _send_json(self, status: int, payload: Mapping[str, Any]) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def _embeddings(self) -> None:
        """Answer ``POST /v1/embeddings`` with the server's embedder."""
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length)) if 0 < length <= MAX_BODY else None
        except ValueError:
            body = None
        texts = body.get("input") if isinstance(body, dict) else None
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            self._send_json(400, {"error": {"message": "input must be a string or strings"}})
            return
        assert isinstance(body, dict)
        with self.server.lock:
            self.server.embedding_requests.append(body)
        dims = body.get("dimensions")
        vectors = (
            self.server.embedder(texts)
            if self.server.embedder is not None
            else [hashed_bow(t, dims or EMBEDDING_DIM) for t in texts]
        )
        as_b64 = body.get("encoding_format") == "base64"
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode()
                if as_b64
                else list(v),
            }
            for i, v in enumerate(vectors)
        ]
        tokens = sum(len(t.split()) for t in texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        model = body.get("model", "test-embedding")
        self._send_json(200, {"object": "list", "data": data, "model": model, "usage": usage})

    def do_POST(self) -> None:
        if self.path.rstrip("/") in EMBEDDING_ROUTES:
            self._embeddings()
            return
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > MAX_BODY:
            self._send_json(400, {"error": {"message": "missing or oversized body"}})
            return
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError:
            self._send_json(400, {"error": {"message": "body is not JSON"}})
            return
        with self.server.lock:
            fault = self.server.faults.pop(0) if self.server.faults else None
            (self.server.failed if fault else self.server.requests).append(body)
        if fault is not None:
            self._send_fault(fault)
            return
        try:
            reply = self.server.responder(body)
        except Exception as exc:  # surface responder bugs as API errors
            self._send_json(500, {"error": {"message": f"{type(exc).__name__}: {exc}"}})
            return
        if reply.get("delay"):
            time.sleep(float(reply["delay"]))
        if "raw" in reply:
            data = str(reply["raw"]).encode("utf-8")
            self.send_response(int(reply.get("status", 200)))
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif body.get("stream"):
            self._stream(body, reply)
        else:
            self._send_json(200, _completion(body, reply))

    def _send_fault(self, fault: Fault) -> None:
        data = json.dumps({"error": {"message": fault.message, "type": "injected"}}).encode()
        self.send_response(fault.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in fault.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, body: Mapping[str, Any], reply: Reply) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for chunk in _chunks(body, reply):
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


@dataclass(frozen=True)
class Fault:
    """An injected error answer (see `OpenAIChatServer.inject`)."""

    status: int = 500
    message: str = "injected failure"
    headers: Mapping[str, str] = field(default_factory=dict)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, responder: Responder, embedder: Embedder | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.responder = responder
        self.embedder = embedder
        self.embedding_requests: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.failed: list[dict[str, Any]] = []
        self.faults: list[Fault] = []
        self.lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # a client that timed out and left
            return
        super().handle_error(request, client_address)


def _tool_calls(reply: Reply) -> list[dict[str, Any]]:
    out = []
    for call in reply.get("tool_calls") or []:
        args = call.get("arguments", {})
        out.append(
            {
                "id": call.get("id") or f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
        )
    return out


def _usage(body: Mapping[str, Any]) -> dict[str, int]:
    prompt = (
        len(json.dumps(body.get("messages", []))) // 4 + len(json.dumps(body.get("tools", []))) // 4
    )
    return {"prompt_tokens": prompt, "completion_tokens": 5, "total_tokens": prompt + 5}


def _completion(body: Mapping[str, Any], reply: Reply) -> dict[str, Any]:
    calls = _tool_calls(reply)
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "test-model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": _usage(body),
    }


def _chunks(body: Mapping[str, Any], reply: Reply) -> list[dict[str, Any]]:
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model", "test-model"),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    calls = _tool_calls(reply)
    out = [chunk({"role": "assistant", "content": ""})]
    content = reply.get("content")
    if content:
        for start in range(0, len(content), 8):  # a few small content deltas
            out.append(chunk({"content": content[start : start + 8]}))
    for index, call in enumerate(calls):
        args = call["function"]["arguments"]
        half = len(args) // 2
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {
                                "name": call["function"]["name"],
                                "arguments": args[:half],
                            },
                        }
                    ]
                }
            )
        )
        out.append(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": args[half:]}}]})
        )
    out.append(chunk({}, "tool_calls" if calls else "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        out.append({**base, "choices": [], "usage": _usage(body)})
    return out


class OpenAIChatServer:
    """A scripted OpenAI chat-completions server on 127.0.0.1 (a free port).

    Args:
        responder: Called with each chat request body; returns the reply to send.
        embedder: Vectors of the texts of each ``/v1/embeddings`` request (default: 64-dim
            `hashed_bow`, or the request's ``dimensions``).

    Attributes:
        requests: Every chat request body answered by the responder, in order.
        failed: Request bodies answered by an injected fault (see `inject`), in order.
        embedding_requests: Every ``/v1/embeddings`` request body, in order (never faulted).
        embedded_texts: Every text those requests carried, in order.
    """

    def __init__(self, responder: Responder, *, embedder: Embedder | None = None) -> None:
        self._server = _Server(responder, embedder)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Request bodies received so far."""
        with self._server.lock:
            return list(self._server.requests)

    @property
    def embedding_requests(self) -> list[dict[str, Any]]:
        """``/v1/embeddings`` request bodies received so far."""
        with self._server.lock:
            return list(self._server.embedding_requests)

    @property
    def embedded_texts(self) -> list[str]:
        """Every text of the ``/v1/embeddings`` requests so far, in order."""
        return [
            t
            for body in self.embedding_requests
            for t in ([body["input"]] if isinstance(body["input"], str) else body["input"])
        ]

    @property
    def failed(self) -> list[dict[str, Any]]:
        """Request bodies answered by an injected fault so far."""
        with self._server.lock:
            return list(self._server.failed)

    def inject(
        self,
        status: int = 500,
        *,
        times: int = 1,
        message: str = "injected failure",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Answer the next `times` requests with HTTP `status` (then the responder again).

        A faulted request is recorded in `failed`, not in `requests`.
        """
        fault = Fault(status, message, dict(headers or {}))
        with self._server.lock:
            self._server.faults.extend([fault] * times)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> OpenAIChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
