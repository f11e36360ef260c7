"""The local model's tool-call adapter (benchmarks/local_model/adapter.py) on loopback."""

from __future__ import annotations

import importlib.util
import json
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest

ADAPTER = Path(__file__).resolve().parents[1] / "benchmarks" / "local_model" / "adapter.py"


def _adapter() -> ModuleType:
    spec = importlib.util.spec_from_file_location("local_model_adapter", ADAPTER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Upstream(BaseHTTPRequestHandler):
    """Stands in for llama-cpp-python's server: records each body, answers one text reply."""

    bodies: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, fmt: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        reply = {"choices": [{"message": {"role": "assistant", "content": '{"tools": []}'}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def adapter_url() -> Iterator[str]:
    module = _adapter()
    _Upstream.bodies = []
    upstream = _serve(_Upstream)
    handler = type(
        "TestAdapter",
        (module.Adapter,),
        {"upstream": f"http://127.0.0.1:{upstream.server_address[1]}/v1", "mode": "on"},
    )
    adapter = _serve(handler)
    yield f"http://127.0.0.1:{adapter.server_address[1]}/v1"
    adapter.shutdown()
    upstream.shutdown()


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        result: dict[str, Any] = json.loads(response.read())
    return result


SCHEMA = {"type": "object", "properties": {"tools": {"type": "array"}}, "required": ["tools"]}


def test_structured_output_reaches_the_server_in_its_own_form(adapter_url: str) -> None:
    """OpenAI's json_schema format (which llama-cpp-python refuses) becomes json_object + schema."""
    fmt = {"type": "json_schema", "json_schema": {"name": "pick", "schema": SCHEMA}}
    messages = [{"role": "user", "content": "which tools?"}]
    answer = _post(adapter_url, {"model": "m", "messages": messages, "response_format": fmt})
    assert answer["choices"][0]["message"]["content"] == '{"tools": []}'
    sent = _Upstream.bodies[-1]
    assert sent["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert sent["messages"] == messages
    assert sent["max_tokens"] == 1024  # no limit in the request: the adapter's cap
    # other formats pass through as they came
    _post(adapter_url, {"model": "m", "messages": messages, "response_format": {"type": "text"}})
    assert _Upstream.bodies[-1]["response_format"] == {"type": "text"}
    _post(adapter_url, {"model": "m", "messages": messages, "max_completion_tokens": 9})
    assert "response_format" not in _Upstream.bodies[-1]
    assert "max_tokens" not in _Upstream.bodies[-1]  # the request's own limit is kept
    _post(adapter_url, {"model": "m", "messages": messages, "max_tokens": 7})
    assert _Upstream.bodies[-1]["max_tokens"] == 7


def test_json_object_format_without_a_schema() -> None:
    convert = _adapter().json_object_format
    assert convert({"type": "json_schema", "json_schema": {"name": "x"}}) == {"type": "json_object"}
    assert convert({"type": "json_object"}) is None
    assert convert("json") is None
