"""The e2e metrics as pure functions: reading replies, and FSA/SR/latency on hand-made rows."""

from __future__ import annotations

from typing import Any

import pytest

from dtdr_agents.evaluation.e2e.harness import error_type
from dtdr_agents.evaluation.e2e.metrics import classify_reply, percentile, summarize
from dtdr_agents.foundation.errors import ChatModelError

CATALOGUE = ["a", "b", "c"]


def reply(*names: str, content: str | None = None, args: str = "{}") -> dict[str, Any]:
    calls = [
        {"id": f"c{i}", "function": {"name": n, "arguments": args}} for i, n in enumerate(names)
    ]
    return {
        "choices": [{"message": {"content": content, "tool_calls": calls or None}}],
        "usage": {"prompt_tokens": 42},
    }


def score(
    response: Any, acceptable: set[str], bound: tuple[str, ...] = ("a", "b", "end_plan")
) -> dict[str, Any]:
    return classify_reply(
        response, bound=bound, catalogue=CATALOGUE, acceptable=acceptable, end_tool="end_plan"
    )


def test_classify_reply_kinds() -> None:
    right = score(reply("a"), {"a"})
    assert (right["kind"], right["correct"], right["called"], right["args_ok"]) == (
        "tool",
        True,
        "a",
        True,
    )
    assert right["usage_prompt_tokens"] == 42
    assert score(reply("b"), {"a"})["correct"] is False
    unbound = score(reply("c"), {"c"})
    assert (unbound["kind"], unbound["correct"]) == ("unbound", True)
    unknown = score(reply("zzz"), {"a"})
    assert (unknown["kind"], unknown["correct"], unknown["called"]) == ("unknown", False, "zzz")
    assert score(reply("end_plan"), {"end_plan"})["kind"] == "end"
    assert score(reply("end_plan"), {"a"})["correct"] is False  # ended too early
    text = score(reply(content="I think a"), {"a"})
    assert (text["kind"], text["correct"], text["text"]) == ("text", False, "I think a")
    end_by_text = score(reply(content="All done."), {"end_plan"})
    assert (end_by_text["kind"], end_by_text["correct"]) == ("end", True)
    strict = classify_reply(
        reply(content="All done."),
        bound=("a",),
        catalogue=CATALOGUE,
        acceptable={"end_plan"},
        end_tool="end_plan",
        text_ends_plan=False,
    )
    assert strict["kind"] == "text" and strict["correct"] is False
    two = score(reply("a", "b"), {"a"})
    assert two["n_calls"] == 2 and two["called"] == "a"
    assert score(reply("a", args="{oops"), {"a"})["args_ok"] is False


@pytest.mark.parametrize(
    "response",
    [
        None,
        {},
        {"choices": 5},
        {"choices": []},
        {"choices": [{"message": {"tool_calls": [{"function": {}}]}}]},
    ],
)
def test_unreadable_replies_are_malformed(response: Any) -> None:
    out = score(response, {"a"})
    assert out["kind"] == "malformed" and out["correct"] is False


def row(
    plan: int,
    kind: str,
    correct: bool,
    *,
    end: bool = False,
    ms: float = 10.0,
    called: str | None = None,
    tokens: int = 100,
) -> dict[str, Any]:
    return {
        "plan": plan,
        "kind": kind,
        "correct": correct,
        "is_end": end,
        "latency_ms": ms,
        "called": called,
        "prompt_tokens": tokens,
        "error_type": "timeout" if kind == "error" else None,
    }


def test_summarize_hand_counts() -> None:
    rows = [
        # plan 0: all right -> success
        row(0, "tool", True, ms=10),
        row(0, "end", True, end=True, ms=20),
        # plan 1: one wrong step (an unknown tool) -> failure
        row(1, "tool", True, ms=30),
        row(1, "unknown", False, called="ghost", ms=40),
        row(1, "end", True, end=True, ms=50),
        # plan 2: an unbound but acceptable call, then a text answer at the end (wrong)
        row(2, "unbound", True, ms=60),
        row(2, "text", False, end=True, ms=70),
        # plan 3: a request that failed -> not answered, plan left out of SR
        row(3, "tool", True, ms=80),
        row(3, "error", False, ms=5000),
    ]
    s = summarize(rows)
    assert s["n_steps"] == 9 and s["n_answered"] == 8 and s["n_errors"] == 1
    assert s["fsa"] == 6 / 8
    assert s["n_plans"] == 4 and s["n_plans_answered"] == 3
    assert s["sr"] == 1 / 3
    assert s["end_accuracy"] == 2 / 3
    assert s["unbound_rate"] == 1 / 8
    assert s["unknown_tools"] == {"ghost": 1}
    assert s["errors"] == {"timeout": 1}
    assert s["kinds"] == {"end": 2, "error": 1, "text": 1, "tool": 3, "unbound": 1, "unknown": 1}
    assert s["latency_ms"]["p50"] == 45.0  # answered latencies 10..80
    assert s["latency_ms"]["p99"] == pytest.approx(79.3)
    assert s["prompt_tokens"] == 100.0


def test_summarize_empty_and_percentile() -> None:
    s = summarize([])
    assert s["fsa"] is None and s["sr"] is None and s["latency_ms"]["p50"] is None
    assert percentile([], 50) is None
    assert percentile([1.0, 3.0], 50) == 2.0


def test_error_type() -> None:
    openai = pytest.importorskip("openai")
    httpx = pytest.importorskip("httpx")
    request = httpx.Request("POST", "http://x/v1/chat/completions")

    def wrapped(exc: BaseException) -> ChatModelError:
        err = ChatModelError("failed")
        err.__cause__ = exc
        return err

    assert error_type(wrapped(openai.APIConnectionError(request=request))) == "unreachable"
    assert error_type(wrapped(openai.APITimeoutError(request=request))) == "timeout"
    assert error_type(wrapped(TimeoutError())) == "timeout"
    response = httpx.Response(503, request=request)
    assert (
        error_type(wrapped(openai.APIStatusError("x", response=response, body=None))) == "http_503"
    )
    assert error_type(wrapped(ValueError("Expecting value"))) == "malformed"
    assert error_type(RuntimeError("?")) == "other"
