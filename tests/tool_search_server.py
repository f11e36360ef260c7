"""Loopback servers speaking the platforms' client-side tool-search wire formats (tests only).

`AnthropicToolSearchServer` answers ``POST /v1/messages`` and `ResponsesToolSearchServer`
answers ``POST /v1/responses`` with a scripted model that plays each request's recorded plan.
Both check what the platforms document for a client-side tool search and answer HTTP 400 (as
the real APIs do) when a request breaks it:

* Anthropic: deferred tools carry ``"defer_loading": true``; a search is answered with a
  ``tool_result`` whose ``content`` is a non-empty list; a ``tool_reference`` block must name a
  tool of the request's ``tools``; a ``tool_result`` must answer a ``tool_use`` id of the
  previous assistant message. A deferred tool can be called once a ``tool_reference`` named it.
* OpenAI Responses: a ``tool_search`` tool with ``"execution": "client"``; a
  ``tool_search_output`` item answers a ``tool_search_call``'s ``call_id`` and carries function
  definitions of deferred tools of the request; a deferred tool can be called once loaded.

The scripted model calls the next planned tool when it is loaded (or not deferred), otherwise
searches once with the request text, otherwise answers that no tool fits.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class WireError(ValueError):
    """The request breaks the documented wire format (answered with HTTP 400)."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(b.get("text", "")) for b in content or [] if isinstance(b, Mapping))


class _Base:
    path = ""
    search_name = ""

    def __init__(self, plans: Mapping[str, Sequence[str]]) -> None:
        self.plans = {q: tuple(p) for q, p in plans.items()}
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                if self.path.rstrip("/") != server.path:
                    status, reply = 404, {"error": {"message": f"no route {self.path}"}}
                else:
                    with server.lock:
                        server.requests.append(body)
                    try:
                        status, reply = 200, server.respond(body)
                    except WireError as exc:
                        status, reply = (
                            400,
                            {"error": {"type": "invalid_request_error", "message": str(exc)}},
                        )
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The endpoint URL."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}{self.path}"

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def decide(
        self,
        request: str,
        calls: list[str],
        loaded: set[str],
        deferred: set[str],
        searched_last: bool,
    ) -> tuple[str, str]:
        """("call", name) | ("search", request) | ("text", answer)."""
        plan = self.plans[request]
        if len(calls) >= len(plan):
            return "text", f"Done: {' -> '.join(plan)}."
        name = plan[len(calls)]
        if name in loaded or name not in deferred:
            return "call", name
        if not searched_last:
            return "search", request
        return "text", f"No loaded tool can do {name}."


class AnthropicToolSearchServer(_Base):
    """``POST /v1/messages`` with a client-side tool search tool (`search_name`)."""

    path = "/v1/messages"

    def __init__(self, plans: Mapping[str, Sequence[str]], search_name: str = "tool_search"):
        super().__init__(plans)
        self.search_name = search_name

    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        tools = {str(t["name"]): t for t in body.get("tools") or []}
        deferred = {n for n, t in tools.items() if t.get("defer_loading") is True}
        if self.search_name not in tools or self.search_name in deferred:
            raise WireError(f"the search tool {self.search_name!r} must be sent, not deferred")
        if not deferred or len(deferred) == len(tools):
            raise WireError("some tools, not all, must have defer_loading: true")
        messages = list(body["messages"])
        loaded: set[str] = set()
        calls: list[str] = []
        previous_ids: set[str] = set()
        for m in messages:
            content = m["content"] if isinstance(m["content"], list) else []
            if m["role"] == "assistant":
                previous_ids = {b["id"] for b in content if b.get("type") == "tool_use"}
                calls += [
                    b["name"]
                    for b in content
                    if b.get("type") == "tool_use" and b["name"] != self.search_name
                ]
                continue
            for block in content:
                if block.get("type") != "tool_result":
                    continue
                if block.get("tool_use_id") not in previous_ids:
                    raise WireError(
                        f"tool_result for unknown tool_use_id {block.get('tool_use_id')}"
                    )
                inner = block.get("content")
                if isinstance(inner, list):
                    if not inner:
                        raise WireError("tool_result content must not be an empty list")
                    for ref in inner:
                        if ref.get("type") == "tool_reference":
                            if ref.get("tool_name") not in tools:
                                raise WireError(
                                    f"tool_reference names unknown tool {ref.get('tool_name')!r}"
                                )
                            loaded.add(str(ref["tool_name"]))
        request = _text(messages[0]["content"]).strip()
        last = messages[-2]["content"] if len(messages) > 1 else []
        searched_last = any(
            isinstance(b, Mapping) and b.get("type") == "tool_use" and b["name"] == self.search_name
            for b in (last if isinstance(last, list) else [])
        )
        kind, value = self.decide(request, calls, loaded, deferred, searched_last)
        n = len(self.requests)
        if kind == "text":
            content: list[dict[str, Any]] = [{"type": "text", "text": value}]
            stop = "end_turn"
        else:
            name = value if kind == "call" else self.search_name
            args = {} if kind == "call" else {"query": value}
            content = [{"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": args}]
            stop = "tool_use"
        return {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }


class ResponsesToolSearchServer(_Base):
    """``POST /v1/responses`` with a client-executed ``tool_search`` tool."""

    path = "/v1/responses"

    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        tools = list(body.get("tools") or [])
        search = [t for t in tools if t.get("type") == "tool_search"]
        if len(search) != 1 or search[0].get("execution") != "client":
            raise WireError("one tool_search tool with execution='client' is expected")
        functions = {str(t["name"]): t for t in tools if t.get("type") == "function"}
        deferred = {n for n, t in functions.items() if t.get("defer_loading") is True}
        items = list(body["input"])
        loaded: set[str] = set()
        calls: list[str] = []
        search_ids: set[str] = set()
        for item in items:
            kind = item.get("type")
            if kind == "tool_search_call":
                search_ids.add(str(item.get("call_id")))
            elif kind == "tool_search_output":
                if item.get("call_id") not in search_ids or item.get("execution") != "client":
                    raise WireError("tool_search_output must answer a client tool_search_call")
                for t in item.get("tools") or []:
                    if t.get("type") != "function" or t.get("name") not in deferred:
                        raise WireError(f"tool_search_output loads unknown tool {t.get('name')!r}")
                    loaded.add(str(t["name"]))
            elif kind == "function_call":
                calls.append(str(item["name"]))
        request = _text(items[0]["content"]).strip()
        searched_last = len(items) > 1 and items[-2].get("type") == "tool_search_call"
        decision, value = self.decide(request, calls, loaded, deferred, searched_last)
        n = len(self.requests)
        if decision == "text":
            out: dict[str, Any] = {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": value, "annotations": []}],
            }
        elif decision == "call":
            out = {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": value,
                "arguments": "{}",
                "status": "completed",
            }
        else:
            out = {
                "type": "tool_search_call",
                "id": f"ts_{n}",
                "call_id": f"call_{n}",
                "execution": "client",
                "arguments": {"query": value},
                "status": "completed",
            }
        return {
            "id": f"resp_{n}",
            "object": "response",
            "model": body["model"],
            "status": "completed",
            "output": [out],
        }
