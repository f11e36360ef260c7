#!/usr/bin/env python3
"""Thin OpenAI-compatible tool-call adapter in front of llama-cpp-python's server (issue 23).

For benchmarks only; not part of the dtdr_agents package. Standard library only (it uses
`llama_cpp.llama_grammar`, when importable, to turn each tool's JSON schema into a grammar).

llama-cpp-python's server renders Qwen2.5's own chat template (the GGUF's), which lists the
bound tools in <tools></tools> and asks for answers of the form

    <tool_call>
    {"name": <function-name>, "arguments": <args-json-object>}
    </tool_call>

but the server hands that text back as `content`: it has no parser for it. This proxy, on
127.0.0.1, forwards every request to the server and, for chat completions that bind tools:

* rewrites the history's assistant `tool_calls` into Qwen's own <tool_call> text (the server
  would render their `arguments` strings JSON-quoted a second time);
* in constrained mode, adds a GBNF `grammar` (a field llama-cpp-python's server accepts) that
  restricts the answer to one <tool_call> of a bound tool, with arguments that follow the tool's
  JSON schema (a plain JSON object where the schema cannot be converted);
* parses <tool_call> blocks of the answer into OpenAI `tool_calls` (finish_reason "tool_calls"),
  and also an answer that is nothing but one {"name": ..., "arguments": ...} JSON object, bare or
  in a code fence (how the 1.5B model often answers without a grammar).

Decoding modes (--constrain):
  off    no grammar from the adapter: the model answers freely; a named `tool_choice` is left to
         llama-cpp-python (whose own grammar forces that function's arguments).
  on     tool_choice "required" -> one call of a bound tool; named -> one call of that tool;
         "auto"/unset -> either prose (with no '<', not opening with '`', '{' or a blank) or one
         call of a bound tool. (vLLM's guided
         decoding constrains "required" and named choices the same way.)
  force  as "on", but "auto"/unset is treated as "required": always one tool call.

Every response says what was applied: header `X-Dtdr-Constrained: on|off` (on: a grammar was
added to this request), and `system_fingerprint` "dtdr-adapter constrain=<mode> grammar=<on|off>".
A request without tools whose `response_format` is OpenAI's structured output
(`{"type": "json_schema", "json_schema": {"schema": S}}`, as LangChain's structured output and
its LLMToolSelectorMiddleware send) is passed on as llama-cpp-python's own form,
`{"type": "json_object", "schema": S}`, which constrains the answer to S by a grammar (the
server refuses `json_schema` with HTTP 500 otherwise).

A chat request that sets neither `max_tokens` nor `max_completion_tokens` gets `max_tokens`
1024 (--max-tokens; 0 leaves it unset): a small model in prose can otherwise run on to the end
of its context (one answer of 7,469 tokens took 712 s on 2 cores). The cap is the server's,
like the grammar: request bodies, and so the benchmarks' cache keys, are unchanged.

An unreachable server gives HTTP 502 with an OpenAI-style error naming its address.

    python adapter.py --port 8089 --upstream http://127.0.0.1:8088/v1 --constrain on
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import time
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODES = ("off", "on", "force")

# Generic JSON (from llama.cpp's json.gbnf), with rule names prefixed to avoid clashes.
_JSON_RULES = r"""
j-value  ::= j-object | j-array | j-string | j-number | ("true" | "false" | "null") j-ws
j-object ::= "{" j-ws ( j-string ":" j-ws j-value ("," j-ws j-string ":" j-ws j-value)* )? "}" j-ws
j-array  ::= "[" j-ws ( j-value ("," j-ws j-value)* )? "]" j-ws
j-string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" j-ws
j-number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? j-ws
j-ws ::= | " " | "\n" [ \t]{0,20}
"""

# A whole answer that is one {"name": ..., "arguments": ...} object, bare or in a code fence.
_BARE_RE = re.compile(r"(?:```(?:json)?\s*)?(\{.*\})(?:\s*```)?", re.S)
_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)


def _lit(text: str) -> str:
    """A GBNF string literal for `text`."""
    out = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{out}"'


def _schema_rules(tools: list[dict[str, Any]]) -> tuple[list[str], str]:
    """One argument rule per tool, and the grammar text defining them."""
    try:
        from llama_cpp.llama_grammar import SchemaConverter  # type: ignore
    except Exception:
        return ["j-object"] * len(tools), ""
    names: list[str] = []
    conv = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    for i, tool in enumerate(tools):
        params = tool.get("function", {}).get("parameters") or {"type": "object"}
        try:
            trial = SchemaConverter(
                prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False
            )
            trial.visit(trial.resolve_refs(json.loads(json.dumps(params)), "tool"), f"args-{i}")
            names.append(
                conv.visit(conv.resolve_refs(json.loads(json.dumps(params)), "tool"), f"args-{i}")
            )
        except Exception:
            names.append("j-object")
    return names, conv.format_grammar()


def tool_grammar(tools: list[dict[str, Any]], allow_text: bool) -> str:
    """GBNF for one Qwen <tool_call> of one of `tools` (or, with `allow_text`, prose)."""
    arg_rules, defs = _schema_rules(tools)
    alts = []
    for tool, rule in zip(tools, arg_rules, strict=True):
        name = tool["function"]["name"]
        head = '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": '
        alts.append(f'{_lit(head)} {rule} "}}"')
    lines = ['call ::= "<tool_call>\\n" call-body "\\n</tool_call>"']
    lines.append("call-body ::= " + " | ".join(f"( {a} )" for a in alts))
    if allow_text:
        lines.insert(0, "root ::= call | text")
        # Prose may not open like a call: the model otherwise writes its call as a fenced or
        # bare JSON object (seen with the 1.5B model under "auto").
        lines.append("text ::= [^<`{ \\t\\n] [^<]*")
    else:
        lines.insert(0, "root ::= call")
    return "\n".join(lines) + "\n" + defs + "\n" + _JSON_RULES


def capped_body(body: Any, max_tokens: int) -> dict[str, Any] | None:
    """`body` with `max_tokens` set when it sets no limit itself (None: leave as is)."""
    if not isinstance(body, dict) or max_tokens <= 0:
        return None
    if body.get("max_tokens") is not None or body.get("max_completion_tokens") is not None:
        return None
    return {**body, "max_tokens": max_tokens}


def json_object_format(fmt: Any) -> dict[str, Any] | None:
    """llama-cpp-python's form of an OpenAI `json_schema` response format (None: leave as is)."""
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None
    spec = fmt.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    return {"type": "json_object", **({"schema": schema} if isinstance(schema, dict) else {})}


def _call_text(call: dict[str, Any]) -> str:
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if isinstance(args, str):
        with contextlib.suppress(ValueError):  # else kept as the string the client sent
            args = json.loads(args) if args.strip() else {}
    body = json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


def rewrite_history(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Assistant `tool_calls` as Qwen's <tool_call> text (what its template would render)."""
    out = []
    for msg in messages:
        if msg.get("role") == "assistant" and msg.get("tool_calls"):
            parts = [msg["content"]] if msg.get("content") else []
            parts += [_call_text(c) for c in msg["tool_calls"]]
            msg = {"role": "assistant", "content": "\n".join(parts)}
        elif msg.get("role") == "tool":
            msg = {**msg, "content": msg.get("content") or ""}
        out.append(msg)
    return out


def parse_tool_calls(text: str | None) -> tuple[str | None, list[dict[str, Any]]]:
    """(remaining content, OpenAI tool_calls) from a Qwen answer."""
    if not text:
        return text, []
    calls = []
    for m in _CALL_RE.finditer(text):
        try:
            obj = json.loads(m.group(1))
        except ValueError:
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            continue
        args = obj.get("arguments", obj.get("parameters", {}))
        calls.append(
            {
                "id": "call_" + uuid.uuid4().hex[:24],
                "type": "function",
                "function": {
                    "name": obj["name"],
                    "arguments": args
                    if isinstance(args, str)
                    else json.dumps(args, ensure_ascii=False),
                },
            }
        )
    if not calls:
        bare = _BARE_RE.fullmatch(text.strip())
        if bare is None:
            return text, []
        try:
            obj = json.loads(bare.group(1))
        except ValueError:
            return text, []
        if not (isinstance(obj, dict) and isinstance(obj.get("name"), str) and "arguments" in obj):
            return text, []
        args = obj["arguments"]
        call = {
            "id": "call_" + uuid.uuid4().hex[:24],
            "type": "function",
            "function": {
                "name": obj["name"],
                "arguments": args
                if isinstance(args, str)
                else json.dumps(args, ensure_ascii=False),
            },
        }
        return None, [call]
    rest = _CALL_RE.sub("", text).strip()
    return (rest or None), calls


class Adapter(BaseHTTPRequestHandler):
    """The request handler: forwards to `upstream`, reshapes tool-call answers."""

    upstream = "http://127.0.0.1:8088/v1"
    mode = "on"
    timeout = 900.0
    max_tokens = 1024
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:
        """One line per request, on stderr."""
        sys.stderr.write("[adapter] " + (fmt % args) + "\n")

    # ---------------------------------------------------------------- plumbing
    def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _error(self, code: int, message: str, kind: str) -> None:
        body = json.dumps({"error": {"message": message, "type": kind, "code": code}})
        self._send(code, body.encode())

    def _path(self) -> str:
        path = self.path
        return path[3:] if path.startswith("/v1/") else path

    def _forward(self, method: str, body: bytes | None) -> tuple[int, bytes, str] | None:
        url = self.upstream.rstrip("/") + self._path()
        req = urllib.request.Request(url, data=body, method=method)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), exc.headers.get("Content-Type", "")
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            self._error(
                502,
                f"the model server is unreachable at {self.upstream}: {reason}",
                "upstream_unreachable",
            )
            return None

    def do_GET(self) -> None:
        """Forward (e.g. /v1/models)."""
        got = self._forward("GET", None)
        if got is not None:
            self._send(got[0], got[1])

    def do_POST(self) -> None:
        """Forward; chat completions with tools are rewritten as the module says."""
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self._path() != "/chat/completions":
            got = self._forward("POST", raw)
            if got is not None:
                self._send(got[0], got[1])
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._error(400, "request body is not JSON", "invalid_request_error")
            return
        capped = capped_body(body, self.max_tokens)
        if capped is not None:
            body = capped
            raw = json.dumps(body).encode()
        tools = body.get("tools") or []
        choice = body.get("tool_choice")
        if not tools or choice == "none":
            fmt = json_object_format(body.get("response_format"))
            if fmt is not None:
                raw = json.dumps({**body, "response_format": fmt}).encode()
            got = self._forward("POST", raw)
            if got is not None:
                self._send(got[0], got[1], {"X-Dtdr-Constrained": "off"})
            return
        if body.get("stream"):
            self._error(
                400, "the adapter does not stream answers with tools", "invalid_request_error"
            )
            return
        body["messages"] = rewrite_history(body.get("messages") or [])
        grammar = None
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            chosen = [t for t in tools if t.get("function", {}).get("name") == name]
            if not chosen:
                self._error(
                    400,
                    f"tool_choice names '{name}', which is not among the tools",
                    "invalid_request_error",
                )
                return
            if self.mode != "off":
                grammar = tool_grammar(chosen, allow_text=False)
                body.pop("tool_choice", None)  # the grammar replaces llama-cpp-python's own
        elif self.mode != "off":
            forced = choice == "required" or self.mode == "force"
            grammar = tool_grammar(tools, allow_text=not forced)
            body.pop("tool_choice", None)
        if grammar is not None:
            body["grammar"] = grammar
        start = time.perf_counter()
        got = self._forward("POST", json.dumps(body).encode())
        if got is None:
            return
        status, data, _ = got
        flag = "on" if grammar is not None else "off"
        if status != 200:
            self._send(status, data, {"X-Dtdr-Constrained": flag})
            return
        try:
            resp = json.loads(data)
            for choice_out in resp.get("choices", []):
                msg = choice_out.get("message") or {}
                if msg.get("tool_calls"):
                    continue  # llama-cpp-python's own named-tool path already made them
                content, calls = parse_tool_calls(msg.get("content"))
                if calls:
                    msg["content"] = content
                    msg["tool_calls"] = calls
                    choice_out["finish_reason"] = "tool_calls"
            resp["system_fingerprint"] = f"dtdr-adapter constrain={self.mode} grammar={flag}"
            usage = resp.get("usage") or {}
            sys.stderr.write(
                f"[adapter] chat tool_choice={json.dumps(choice)} grammar={flag} "
                f"prompt_tokens={usage.get('prompt_tokens')} "
                f"completion_tokens={usage.get('completion_tokens')} "
                f"seconds={time.perf_counter() - start:.2f}\n"
            )
            data = json.dumps(resp).encode()
        except (ValueError, AttributeError, TypeError):
            pass  # not an answer we understand: handed back as it came
        self._send(status, data, {"X-Dtdr-Constrained": flag})


def main(argv: list[str] | None = None) -> int:
    """Serve until interrupted."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8089)
    ap.add_argument(
        "--upstream", default="http://127.0.0.1:8088/v1", help="llama-cpp-python server base URL"
    )
    ap.add_argument("--constrain", choices=MODES, default="on")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per upstream request")
    ap.add_argument(
        "--max-tokens",
        type=int,
        default=1024,
        help="max_tokens of a chat request that sets no limit (0: none)",
    )
    args = ap.parse_args(argv)
    Adapter.upstream, Adapter.mode, Adapter.timeout = args.upstream, args.constrain, args.timeout
    Adapter.max_tokens = args.max_tokens
    server = ThreadingHTTPServer((args.host, args.port), Adapter)
    sys.stderr.write(
        f"[adapter] http://{args.host}:{args.port}/v1 -> {args.upstream} "
        f"(constrain={args.constrain})\n"
    )
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
