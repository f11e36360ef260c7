"""What a step bound and why (`StepRecord`), its plain-JSON record, and a run's figures."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dtdr_agents.foundation.selection import Selection
from dtdr_agents.runtime.prompting import ToolPrompt, check_mode

__all__ = [
    "RunReport",
    "StepRecord",
    "merge_selection_records",
    "record_metadata",
    "run_report",
]


def _jsonable(value: Any) -> Any:
    """Plain-JSON form of explanation values (tuples, numpy scalars, nested mappings)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _end_in_cut(end_rank: int | None, n_selected: int) -> bool:
    """End-of-plan ranks within the selection (or first, when nothing was selected)."""
    return end_rank is not None and end_rank <= max(n_selected, 1)


# ---------------------------------------------------------------------------------- record
@dataclass(frozen=True)
class StepRecord:
    """The tools chosen for one model call, and why.

    Attributes:
        query: The request the retriever ranked for.
        history: The tool calls made so far in the turn (unknown names dropped if allowed).
        selection: The core selection (names best first, probabilities, fallback, why).
        prompt: What the policy chose: the selected tools (catalogue order) and the
            system-message text.
        bound: The tools actually bound, in the order they are sent (catalogue order, or
            first-bound order with ``cache="append"``).
        explanation: The ranking's explanation (method, cluster, Markov key, ...).
        end_rank: Rank of the end-of-plan token in the ranking (1 = the retriever expects the
            plan to be complete).
        k: The `k` of the policy used.
        widened: True for the one re-selection with a wider `k`.
        widen_reason: Why the selection was widened.
        cache: The binding strategy (`SelectionPolicy.cache`).
        prefix_kept: Whether `bound` starts with the previous step's bound list of the turn
            (None at the first step of a turn).
        bound_tokens: Tokens of the bound tools' schemas.
    """

    query: str
    history: tuple[str, ...]
    selection: Selection
    prompt: ToolPrompt
    bound: tuple[str, ...]
    explanation: Mapping[str, Any]
    end_rank: int | None
    k: int | None
    widened: bool = False
    widen_reason: str | None = None
    cache: str = "off"
    prefix_kept: bool | None = None
    bound_tokens: int = 0

    @property
    def names(self) -> tuple[str, ...]:
        """The tools selected for this step, best first (`selection.names`, then `always_include`).

        `bound` is what reaches the model: the same tools in send order (catalogue order,
        or first-bound order with ``cache="append"``, which may keep earlier steps' tools).
        """
        return self.selection.names

    @property
    def system_text(self) -> str:
        """Text to add to the system message ("" for the plain hard mask)."""
        return self.prompt.text

    @property
    def end_in_cut(self) -> bool:
        """Whether the retriever ranks end-of-plan among the selected tools' ranks."""
        return _end_in_cut(self.end_rank, len(self.selection.names))

    @property
    def saved_tokens(self) -> int:
        """Prompt tokens saved against binding every tool with no guidance text."""
        return self.prompt.all_tool_tokens - self.bound_tokens - self.prompt.text_tokens

    def to_record(self) -> dict[str, Any]:
        """A JSON-serializable description of the step (kept in graph state and traces)."""
        sel = self.selection
        return {
            "step": len(self.history),
            "query": self.query,
            "history": list(self.history),
            "mode": self.prompt.mode,
            "k": self.k,
            "selected": list(sel.names),
            "bound": list(self.bound),
            "probabilities": {
                n: float(p) for n, p in zip(sel.names, sel.probabilities, strict=True)
            },
            "why": dict(sel.why),
            "fallback": sel.fallback,
            "fallback_reason": sel.reason,
            "end_probability": float(sel.end_probability),
            "end_rank": self.end_rank,
            "explanation": _jsonable(self.explanation),
            "system_text": self.prompt.text,
            "tokens": {
                "guidance": self.prompt.text_tokens,
                "bound_tools": self.bound_tokens,
                "all_tools": self.prompt.all_tool_tokens,
                "saved": self.saved_tokens,
                "counter": self.prompt.counter,
            },
            "widened": self.widened,
            "widen_reason": self.widen_reason,
            "cache": {"mode": self.cache, "prefix_kept": self.prefix_kept},
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> StepRecord:
        """Rebuild a step from `to_record`'s dict (e.g. read back from graph state).

        Raises:
            ValueError: A required key is missing or malformed (names the key).
        """
        try:
            names = tuple(str(n) for n in record["selected"])
            probs_map = {str(n): float(p) for n, p in dict(record["probabilities"]).items()}
            tokens = dict(record.get("tokens") or {})
            cache = dict(record.get("cache") or {})
            selection = Selection(
                names=names,
                probabilities=tuple(probs_map.get(n, 0.0) for n in names),
                fallback=bool(record.get("fallback")),
                reason=record.get("fallback_reason"),
                end_probability=float(record.get("end_probability") or 0.0),
                why={str(k): str(v) for k, v in dict(record.get("why") or {}).items()},
            )
            bound = tuple(str(n) for n in record["bound"])
            prompt = ToolPrompt(
                mode=check_mode(str(record["mode"])),
                bound=bound,
                preferred=names,
                probabilities=probs_map,
                text=str(record.get("system_text") or ""),
                text_tokens=int(tokens.get("guidance") or 0),
                tool_tokens=int(tokens.get("bound_tools") or 0),
                all_tool_tokens=int(tokens.get("all_tools") or 0),
                counter=str(tokens.get("counter") or ""),
            )
            end_rank = record.get("end_rank")
            k = record.get("k")
            return cls(
                query=str(record["query"]),
                history=tuple(str(h) for h in record["history"]),
                selection=selection,
                prompt=prompt,
                bound=bound,
                explanation=dict(record.get("explanation") or {}),
                end_rank=None if end_rank is None else int(end_rank),
                k=None if k is None else int(k),
                widened=bool(record.get("widened")),
                widen_reason=record.get("widen_reason"),
                cache=str(cache.get("mode") or "off"),
                prefix_kept=cache.get("prefix_kept"),
                bound_tokens=int(tokens.get("bound_tools") or 0),
            )
        except KeyError as exc:
            raise ValueError(f"a step record lacks the key {exc.args[0]!r}") from exc
        except (TypeError, ValueError) as exc:
            raise ValueError(f"malformed step record: {exc}") from exc

    def metadata(self) -> dict[str, Any]:
        """Run metadata (``dtdr_*`` keys) for the model call's trace."""
        return record_metadata(self.to_record())


def record_metadata(record: Mapping[str, Any]) -> dict[str, Any]:
    """Run metadata (``dtdr_*`` keys) from a selection record, for the model call's trace."""
    probs = record.get("probabilities") or {}
    tokens = record.get("tokens") or {}
    return {
        "dtdr_step": record.get("step"),
        "dtdr_mode": record.get("mode"),
        "dtdr_bound_tools": list(record.get("bound") or []),
        "dtdr_selected": list(record.get("selected") or []),
        "dtdr_probabilities": {n: round(float(p), 4) for n, p in probs.items()},
        "dtdr_why": dict(record.get("why") or {}),
        "dtdr_fallback": bool(record.get("fallback")),
        "dtdr_fallback_reason": record.get("fallback_reason"),
        "dtdr_explanation": record.get("explanation") or {},
        "dtdr_widened": bool(record.get("widened")),
        "dtdr_tokens_saved": tokens.get("saved"),
        "dtdr_token_counter": tokens.get("counter"),
    }


def merge_selection_records(
    left: list[dict[str, Any]] | None, right: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """State reducer of ``tool_selections``: append, and restart at the first step of a turn.

    A record with an empty history that is not a widened re-selection starts a new turn, so
    the key holds the current turn's records and does not grow with a long thread (earlier
    turns stay in checkpoints and traces).
    """
    out = list(left or [])
    for record in right or []:
        if not record.get("history") and not record.get("widened"):
            out = []
        out.append(record)
    return out


# ---------------------------------------------------------------------------------- report
@dataclass(frozen=True)
class RunReport:
    """Prompt figures of one run (the model calls of one turn).

    Attributes:
        model_calls: Number of model calls (steps, widened re-selections included).
        prefix_reuse: Share of the calls after the first whose tools array starts with the
            previous call's (None with fewer than two calls).
        bound_tokens: Bound-schema tokens summed over the calls.
        mean_bound_tools: Mean number of tools bound per call.
        per_call_tokens: Bound-schema tokens of each call.
    """

    model_calls: int
    prefix_reuse: float | None
    bound_tokens: int
    mean_bound_tools: float
    per_call_tokens: tuple[int, ...] = field(default_factory=tuple)


def run_report(steps: Sequence[StepRecord | Mapping[str, Any]]) -> RunReport:
    """Prefix reuse and bound-schema tokens of a run's steps (records or their dicts).

    Args:
        steps: The steps of one turn, in call order (e.g. ``state["tool_selections"]``).
    """
    typed = [s if isinstance(s, StepRecord) else StepRecord.from_record(s) for s in steps]
    bounds = [s.bound for s in typed]
    pairs = list(itertools.pairwise(bounds))
    kept = sum(cur[: len(prev)] == prev for prev, cur in pairs)
    return RunReport(
        model_calls=len(typed),
        prefix_reuse=kept / len(pairs) if pairs else None,
        bound_tokens=sum(s.bound_tokens for s in typed),
        mean_bound_tools=float(np.mean([len(b) for b in bounds])) if bounds else 0.0,
        per_call_tokens=tuple(s.bound_tokens for s in typed),
    )
