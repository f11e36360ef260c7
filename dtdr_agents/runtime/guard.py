"""The unbound-call guard: what happens when the model calls a tool that was not bound.

Written once for every integration. Two moments:

* after the model replied (and after the one wider re-selection), `check_unbound` raises
  `UnboundToolCallError` when the policy says so (``on_unbound="raise"``, or too many rejected
  calls in a turn);
* when a tool call is about to run, `refusal` gives the error text that answers it instead
  (``on_unbound="reject"`` and the tool was not bound), or None when it may run.

The MCP proxy does not use `refusal`: it lists only the exposed tools, and refuses a call of
any other with an MCP error of its own (there is no model loop to keep going).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dtdr_agents.foundation.errors import DTDRError
from dtdr_agents.foundation.selection import ON_UNBOUND, OnUnbound, SelectionPolicy

__all__ = [
    "OnUnbound",
    "Reply",
    "UnboundToolCallError",
    "check_on_unbound",
    "check_unbound",
    "refusal",
    "rejection_text",
    "unbound_calls",
]


class UnboundToolCallError(DTDRError, RuntimeError):
    """The model called a tool that was not offered to it, even after widening the selection."""


@dataclass(frozen=True)
class Reply:
    """What the runtime needs to know of a model reply.

    Attributes:
        calls: Names of the tools the reply calls (valid calls only).
        answered: True when the reply calls no tool at all (not even a malformed call).
    """

    calls: tuple[str, ...] = ()
    answered: bool = False


def check_on_unbound(value: str) -> OnUnbound:
    """Validate an `on_unbound` option."""
    if value not in ON_UNBOUND:  # narrows `value` to OnUnbound
        raise ValueError(f"on_unbound must be 'reject', 'allow' or 'raise', got {value!r}")
    return value


def rejection_text(name: str, bound: Sequence[str]) -> str:
    """The error text answering a call of a tool that was not bound at this step."""
    return (
        f"Error: the tool {name!r} is not available at this step. "
        f"Call one of {list(bound)}, or answer if none fits."
    )


def unbound_calls(bound: Sequence[str], reply: Reply | None) -> list[str]:
    """Names the reply calls that are not in `bound`."""
    if reply is None:
        return []
    allowed = set(bound)
    return [n for n in reply.calls if n not in allowed]


def check_unbound(
    policy: SelectionPolicy, bound: Sequence[str], reply: Reply | None, rejections: int
) -> None:
    """The unbound-call policy, applied to the model's final reply of a step.

    With ``on_unbound="raise"`` any call of an unbound tool raises; with ``"reject"`` the run
    stops once `rejections` (calls already rejected in the turn) reached `max_rejections`
    (the loop would otherwise run to the framework's recursion limit); ``"allow"`` never
    raises.

    Raises:
        UnboundToolCallError: As described.
    """
    unbound = unbound_calls(bound, reply)
    if not unbound:
        return
    if policy.on_unbound == "raise":
        raise UnboundToolCallError(
            f"the model called tools that were not bound at this step: {unbound} "
            f"(bound: {list(bound)})"
        )
    if policy.on_unbound == "reject" and rejections >= policy.max_rejections:
        raise UnboundToolCallError(
            f"the model called tools that are not available at this step ({unbound}) "
            f"after {rejections} such calls were rejected in this turn; bound: "
            f"{list(bound)}. Raise k, set always_include, or use on_unbound='allow'."
        )


def refusal(on_unbound: OnUnbound, name: str, bound: Sequence[str] | None) -> str | None:
    """The error text answering a call of `name`, or None when the call may run.

    A call is refused when ``on_unbound="reject"`` and `name` is not in `bound` (the tools
    of the step; None: no step was selected yet, so nothing is refused).
    """
    if on_unbound != "reject" or bound is None or name in bound:
        return None
    return rejection_text(name, bound)
