"""Record demonstrations from LangChain / LangGraph runs (learning from your own runs).

`DTDRRecorderCallback` is a callback handler: pass it in the run's config
(``graph.invoke(inputs, config={"callbacks": [callback]})``) and every finished top-level run
whose output has ``messages`` appends its last turn (the request and the ordered tool calls)
to the recorder's JSONL file, which ``dtdr-agents fit --dataset jsonl`` reads. It works with
any agent whose state holds messages (`create_dtdr_agent`, `create_agent`, your own graph).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage

from dtdr_agents.foundation.errors import DTDRError
from dtdr_agents.foundation.types import Demonstration
from dtdr_agents.runtime.recording import DemonstrationRecorder
from langchain_dtdr.messages import NoRequestError, Turn, current_turn

__all__ = ["DTDRRecorderCallback", "record_turn"]


def record_turn(
    recorder: DemonstrationRecorder,
    messages: Sequence[BaseMessage],
    *,
    skip_errors: bool = True,
    accept: Callable[[Turn], bool] | None = None,
) -> Demonstration | None:
    """Record the last turn of `messages` if it finished with an answer.

    Tool calls of one AI message are recorded as parallel calls (see
    `dtdr_agents.runtime.recording.plan_from_steps`).

    Args:
        recorder: Where to append.
        messages: The conversation.
        skip_errors: Skip turns where a tool returned an error (status "error").
        accept: Extra filter, e.g. on user feedback; return False to skip the turn.

    Returns:
        The demonstration written, or None if the turn was skipped.

    Raises:
        InvalidDemonstrationError: A call names a tool outside the recorder's catalogue.
    """
    try:
        turn = current_turn(messages)
    except NoRequestError:
        return None
    if not turn.finished or (skip_errors and turn.errors) or (accept and not accept(turn)):
        return None
    return recorder.record(turn.request, steps=turn.steps)


class DTDRRecorderCallback(BaseCallbackHandler):
    """A callback handler that records each finished top-level run's last turn.

    Recording never breaks a run: problems (e.g. a call to a tool outside the recorder's
    catalogue) are reported as warnings.

    Args:
        recorder: The `DemonstrationRecorder` to append to.
        skip_errors: Skip turns where a tool returned an error.
        accept: Extra filter on the `Turn`.
    """

    run_inline = True
    raise_error = False

    def __init__(
        self,
        recorder: DemonstrationRecorder,
        *,
        skip_errors: bool = True,
        accept: Callable[[Turn], bool] | None = None,
    ) -> None:
        self.recorder = recorder
        self.skip_errors = skip_errors
        self.accept = accept

    def on_chain_end(
        self,
        outputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Record the run's last turn when a top-level run with messages ends."""
        if parent_run_id is not None or not isinstance(outputs, Mapping):
            return
        messages = outputs.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, BaseMessage) for m in messages):
            return
        try:
            record_turn(self.recorder, messages, skip_errors=self.skip_errors, accept=self.accept)
        except (DTDRError, ValueError) as exc:
            warnings.warn(f"DTDRRecorderCallback: run not recorded: {exc}", stacklevel=2)
