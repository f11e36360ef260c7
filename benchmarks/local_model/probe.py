#!/usr/bin/env python3
"""Send one chat completion with two tools to a local endpoint and print what comes back.

For benchmarks only (issue 23). Standard library only.

    python benchmarks/local_model/probe.py --base-url http://127.0.0.1:8089/v1 --tool-choice auto
    python benchmarks/local_model/probe.py --tool-choice required
    python benchmarks/local_model/probe.py --tool-choice get_weather     # named
    python benchmarks/local_model/probe.py --tool-choice none --pad 1500 # prompt-speed check

Prints the message (content / tool_calls), finish_reason, usage, the adapter's constrained flag
and the wall time. An unreachable endpoint exits 1 with a clear message.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "convert_currency",
            "description": "Convert an amount between two currencies.",
            "parameters": {
                "type": "object",
                "properties": {
                    "amount": {"type": "number"},
                    "from_currency": {"type": "string"},
                    "to_currency": {"type": "string"},
                },
                "required": ["amount", "from_currency", "to_currency"],
            },
        },
    },
]


def main(argv: list[str] | None = None) -> int:
    """Send the request, print the answer."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8089/v1")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    ap.add_argument(
        "--tool-choice", default="auto", help="auto, required, none, unset, or a tool name"
    )
    ap.add_argument("--prompt", default="What's the weather like in Paris right now?")
    ap.add_argument(
        "--pad", type=int, default=0, help="add about N words of filler to the system message"
    )
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args(argv)

    system = "You are a helpful assistant. Use the tools when they help."
    if args.pad:
        system += "\n\nBackground notes: " + " ".join(
            f"note{i} the catalogue lists many tools for weather money travel and maps."
            for i in range(args.pad // 10)
        )
    body: dict = {
        "model": args.model,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": args.prompt},
        ],
        "temperature": 0,
        "max_tokens": args.max_tokens,
    }
    if args.tool_choice != "none":
        body["tools"] = TOOLS
    if args.tool_choice in ("auto", "required"):
        body["tool_choice"] = args.tool_choice
    elif args.tool_choice not in ("unset", "none"):
        body["tool_choice"] = {"type": "function", "function": {"name": args.tool_choice}}
    req = urllib.request.Request(
        args.base_url.rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=args.timeout) as resp:
            flag = resp.headers.get("X-Dtdr-Constrained", "n/a (no adapter)")
            out = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        print(f"HTTP {exc.code}: {exc.read().decode(errors='replace')[:2000]}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        print(
            f"error: the endpoint {args.base_url} is unreachable: {getattr(exc, 'reason', exc)}",
            file=sys.stderr,
        )
        return 1
    wall = time.perf_counter() - start
    choice = out["choices"][0]
    print(
        json.dumps(
            {"message": choice["message"], "finish_reason": choice.get("finish_reason")}, indent=2
        )
    )
    usage = out.get("usage") or {}
    print(
        f"tool_choice={args.tool_choice} constrained={flag} "
        f"prompt_tokens={usage.get('prompt_tokens')} "
        f"completion_tokens={usage.get('completion_tokens')} wall_s={wall:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
