"""Per-step outcomes and their aggregates: FSA, SR, end-of-plan accuracy, tokens, latency.

Pure functions over plain data (one dict per step, as the cache stores it), no rounding.

A step's `kind` says what the model did:

* ``"tool"``: called a bound catalogue tool; ``"end"``: called the end-of-plan function (or,
  with `text_ends_plan`, answered with text where the plan was complete);
* ``"unbound"``: called a catalogue tool that this step did not bind;
* ``"unknown"``: called a function that is not in the catalogue (always wrong, listed);
* ``"text"``: answered with text instead of a tool call (wrong);
* ``"malformed"``: the answer could not be read as a chat completion;
* ``"error"``: no answer (unreachable endpoint, time-out, HTTP error after the retries).

FSA (function selection accuracy, Appendix D) is the share of answered steps (every kind but
``"error"``) whose call is an acceptable next tool; an unbound call of an acceptable tool counts
as right for FSA and is counted apart by the unbound-call rate. SR (success rate, selection
only) is the share of fully answered plans whose every step selects right. ``sr_full`` is the
paper's SR (Appendix D): every step's function *and* arguments right, scored by
`dtdr_agents.evaluation.e2e.arguments` where the dataset records arguments (None elsewhere);
``argument_accuracy`` is the share of right selections whose arguments match.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

ANSWER_KINDS = ("tool", "end", "unbound", "unknown", "text", "malformed")
"""Kinds of a step that got an answer (counted by FSA)."""


def classify_reply(
    response: Any,
    *,
    bound: Sequence[str],
    catalogue: Iterable[str],
    acceptable: Iterable[str],
    end_tool: str,
    text_ends_plan: bool = True,
) -> dict[str, Any]:
    """Read a chat completion and score it against the step.

    Args:
        response: The `openai` ChatCompletion (or any object/mapping of that shape).
        bound: API names the step bound (end-of-plan included).
        catalogue: Every API name of the catalogue (end-of-plan excluded).
        acceptable: Acceptable next calls (the end-of-plan function at the plan's end).
        end_tool: Name of the end-of-plan function.
        text_ends_plan: Count a text answer as end-of-plan where the plan is complete.

    Returns:
        ``{"called", "kind", "correct", "n_calls", "args_ok", "text", "usage_prompt_tokens"}``;
        ``kind`` is ``"malformed"`` when the response has no readable first choice.
    """
    ok = frozenset(acceptable)
    out: dict[str, Any] = {
        "called": None,
        "kind": "malformed",
        "correct": False,
        "n_calls": 0,
        "args_ok": None,
        "text": None,
        "usage_prompt_tokens": _usage_prompt_tokens(response),
    }
    message = _first_message(response)
    if message is None:
        return out
    calls = _get(message, "tool_calls") or []
    if not isinstance(calls, list | tuple):
        return out
    out["n_calls"] = len(calls)
    content = _get(message, "content")
    out["text"] = content[:500] if isinstance(content, str) else None
    if not calls:
        ended = text_ends_plan and end_tool in ok
        out.update(kind="end" if ended else "text", correct=ended)
        return out
    function = _get(calls[0], "function")
    name = _get(function, "name") if function is not None else None
    if not isinstance(name, str):
        return out
    args = _get(function, "arguments")
    out["args_ok"] = _json_object(args)
    out["called"] = name
    if name == end_tool:
        kind = "end"
    elif name not in set(catalogue):
        kind = "unknown"
    elif name not in set(bound):
        kind = "unbound"
    else:
        kind = "tool"
    out.update(kind=kind, correct=kind != "unknown" and name in ok)
    return out


def read_arguments(response: Any, function: str) -> dict[str, Any]:
    """The arguments a parameter-filling answer gives for `function`.

    Returns:
        ``{"arguments", "answer", "usage_prompt_tokens"}``: ``arguments`` is the raw JSON
        text (or object) of the first call of `function` (else of the first call, else the
        text answer, which may hold a JSON object), or None; ``answer`` says which
        (``"call"``, ``"other_call"``, ``"text"``, ``"malformed"``).
    """
    out: dict[str, Any] = {
        "arguments": None,
        "answer": "malformed",
        "usage_prompt_tokens": _usage_prompt_tokens(response),
    }
    message = _first_message(response)
    if message is None:
        return out
    calls = _get(message, "tool_calls") or []
    if isinstance(calls, list | tuple) and calls:
        functions = [_get(c, "function") for c in calls]
        mine = [f for f in functions if f is not None and _get(f, "name") == function]
        chosen = mine[0] if mine else functions[0]
        args = _get(chosen, "arguments") if chosen is not None else None
        if isinstance(args, Mapping):
            args = dict(args)
        out.update(
            arguments=args if isinstance(args, str | dict) else None,
            answer="call" if mine else "other_call",
        )
        return out
    content = _get(message, "content")
    if isinstance(content, str):
        out.update(arguments=content.strip()[:5000], answer="text")
    return out


def _get(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _first_message(response: Any) -> Any:
    choices = _get(response, "choices")
    if not isinstance(choices, list | tuple) or not choices:
        return None
    message = _get(choices[0], "message")
    return message


def _usage_prompt_tokens(response: Any) -> int | None:
    usage = _get(response, "usage")
    value = _get(usage, "prompt_tokens") if usage is not None else None
    return value if isinstance(value, int) else None


def _json_object(args: Any) -> bool:
    if isinstance(args, Mapping):
        return True
    if not isinstance(args, str):
        return False
    try:
        return isinstance(json.loads(args or "{}"), dict)
    except ValueError:
        return False


def percentile(values: Sequence[float], q: float) -> float | None:
    """The `q`-th percentile (linear interpolation), or None for no values."""
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Aggregate the step rows of one (model, retriever, mode) cell.

    Args:
        rows: One dict per step with ``plan``, ``kind``, ``correct``, ``is_end``,
            ``prompt_tokens``, ``latency_ms``, ``called`` (and ``error_type`` for errors).

    Returns:
        ``fsa``, ``sr``, ``end_accuracy`` (None when nothing to score), ``prompt_tokens``
        and ``variable_tokens`` (means over all steps), ``usage_prompt_tokens`` (mean of the
        server's counts, when it reported them), ``latency_ms`` (p50, p99, mean over
        answered steps), ``unbound_rate``, ``no_call_rate`` (answers with no tool call, a text
        end of plan included, over answered steps), counts (``n_steps``, ``n_answered``,
        ``n_plans``, ``n_plans_answered``, ``n_errors``, ``n_endpoint_errors``, ``kinds``,
        ``errors``) and ``unknown_tools`` (name -> calls).
    """
    answered = [r for r in rows if r["kind"] != "error"]
    plans: dict[int, list[Mapping[str, Any]]] = {}
    for row in rows:
        plans.setdefault(int(row["plan"]), []).append(row)
    full = [p for p in plans.values() if all(r["kind"] != "error" for r in p)]
    ends = [r for r in answered if r.get("is_end")]
    latencies = [float(r["latency_ms"]) for r in answered if r.get("latency_ms") is not None]
    usage = [int(r["usage_prompt_tokens"]) for r in answered if r.get("usage_prompt_tokens")]
    tokens = [int(r["prompt_tokens"]) for r in rows]
    variable = [int(r["variable_tokens"]) for r in rows if r.get("variable_tokens") is not None]
    kinds = Counter(str(r["kind"]) for r in rows)
    errors = Counter(str(r.get("error_type") or "other") for r in rows if r["kind"] == "error")
    unknown = Counter(str(r["called"]) for r in rows if r["kind"] == "unknown")
    filled = [r["args"] for r in rows if isinstance(r.get("args"), Mapping)]
    arg_errors = Counter(str(a.get("error_type") or "other") for a in filled if "error" in a)
    scored = [a for a in filled if "error" not in a]
    reasons = Counter(str(a.get("kind")) for a in scored if not a.get("match"))
    return {
        "fsa": _share(sum(bool(r["correct"]) for r in answered), len(answered)),
        "sr": _share(sum(all(bool(r["correct"]) for r in p) for p in full), len(full)),
        "sr_full": _sr_full(full),
        "argument_accuracy": _share(sum(bool(a.get("match")) for a in scored), len(scored)),
        "n_argument_answers": len(scored),
        "n_argument_errors": sum(arg_errors.values()),
        "argument_errors": dict(sorted(arg_errors.items())),
        "argument_failures": dict(reasons.most_common()),
        "end_accuracy": _share(sum(bool(r["correct"]) for r in ends), len(ends)),
        "unbound_rate": _share(kinds["unbound"], len(answered)),
        "no_call_rate": _share(
            sum(r["kind"] != "malformed" and not r.get("n_calls") for r in answered), len(answered)
        ),
        "prompt_tokens": float(np.mean(tokens)) if tokens else None,
        "variable_tokens": float(np.mean(variable)) if variable else None,
        "usage_prompt_tokens": float(np.mean(usage)) if usage else None,
        "latency_ms": {
            "p50": percentile(latencies, 50),
            "p99": percentile(latencies, 99),
            "mean": float(np.mean(latencies)) if latencies else None,
        },
        "n_steps": len(rows),
        "n_answered": len(answered),
        "n_plans": len(plans),
        "n_plans_answered": len(full),
        "n_errors": len(rows) - len(answered),
        "n_endpoint_errors": errors["endpoint"],
        "kinds": dict(sorted(kinds.items())),
        "errors": dict(sorted(errors.items())),
        "unknown_tools": dict(unknown.most_common()),
    }


def _sr_full(plans: Sequence[Sequence[Mapping[str, Any]]]) -> float | None:
    """The paper's SR: every step's function and arguments right (None: nothing to score).

    Counted over the fully answered plans with recorded arguments whose parameter filling
    got an answer wherever it was asked; an end-of-plan step needs no arguments.
    """
    scorable = [
        p
        for p in plans
        if all(r.get("has_arguments") for r in p)
        and not any(isinstance(r.get("args"), Mapping) and "error" in r["args"] for r in p)
    ]
    right = sum(
        all(
            bool(r["correct"])
            and (bool(r.get("is_end")) or bool((r.get("args") or {}).get("match")))
            for r in p
        )
        for p in scorable
    )
    return _share(right, len(scorable))


def _share(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


__all__ = ["ANSWER_KINDS", "classify_reply", "percentile", "read_arguments", "summarize"]
