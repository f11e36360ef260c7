"""Which planner a benchmark run gives `toolqp` and `hybrid`, and how its figures are labelled.

`goal_planner` does the same for `hybrid`'s sub-goals (``--hybrid-goals planner``).

`bench_planner` turns the bench's options into a planner: recorded plans (``--plans FILE``),
a dataset's shipped instructions (``--plans-from-instruction``, ToolRet), or a live chat
model (``--chat-base-url/--chat-model``). With none of them there is no planner and `toolqp`
is skipped with its reason. Figures obtained from instructions are "dataset-provided LLM
text": an LLM wrote that text when the dataset was built, not a planner run here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dtdr_agents.datasets.base import Dataset
from dtdr_agents.foundation.chat import ChatModel
from dtdr_agents.foundation.errors import DTDRError
from dtdr_agents.planning.plan import (
    SOURCE_INSTRUCTION,
    Plan,
    PlanRecorder,
    instruction_plans,
    read_plans,
)
from dtdr_agents.planning.planners import ChatPlanner, KeptPlanner, Planner, ReplayPlanner


class PlannerOptionError(DTDRError, ValueError):
    """The planner options conflict or do not fit the dataset."""


@dataclass
class PlannerChoice:
    """The planner of a run and how to describe it.

    Attributes:
        planner: The planner, or None (then `toolqp` is skipped).
        source: "recorded plans", "dataset-provided LLM text", "live chat model" or "none".
        note: One sentence for the report.
        problems: Plans-file lines skipped with ``skip_bad``.
    """

    planner: Planner | None
    source: str
    note: str
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The JSON form stored in the bench report."""
        return {"source": self.source, "note": self.note, "skipped_lines": len(self.problems)}


def bench_planner(
    test: Dataset,
    *,
    plans: str | Path | None = None,
    from_instruction: bool = False,
    chat_model: ChatModel | None = None,
    record: str | Path | None = None,
    skip_bad: bool = False,
    max_turns: int | None = None,
) -> PlannerChoice:
    """The planner the bench options ask for.

    Args:
        test: The test dataset (its instructions, with `from_instruction`).
        plans: A plans file (JSON lines) to replay.
        from_instruction: Use each test query's shipped instruction as a one-query plan.
        chat_model: A live chat model (ToolQP-Prompting, Fig. 14).
        record: With a chat model: append every plan to this file.
        skip_bad: Skip plans-file lines that do not parse.
        max_turns: With a chat model: the turn cap (default `MAX_TURNS`).

    Raises:
        PlannerOptionError: More than one planner source, or instructions asked of a dataset
            that has none.
        DatasetFormatError: A plans-file line does not parse (file and line).
    """
    given = [plans is not None, from_instruction, chat_model is not None]
    if sum(given) > 1:
        raise PlannerOptionError(
            "give one planner source: --plans FILE, --plans-from-instruction, or "
            "--chat-base-url/--chat-model"
        )
    if record is not None and chat_model is None:
        raise PlannerOptionError("--record-plans needs a live chat model (--chat-base-url)")
    if plans is not None:
        replay = ReplayPlanner(plans, skip_bad=skip_bad)
        return PlannerChoice(
            replay,
            "recorded plans",
            f"toolqp replays {len(replay)} recorded plans from {plans}",
            replay.problems,
        )
    if from_instruction:
        instruction = getattr(test, "instruction", None)
        pairs = [(d.query, instruction(d)) for d in test.demos] if instruction else []
        found = instruction_plans((q, i) for q, i in pairs if i)
        if not found:
            raise PlannerOptionError(
                f"--plans-from-instruction: the {test.name} dataset ships no instructions "
                "(ToolRet does)"
            )
        return PlannerChoice(
            ReplayPlanner(found),
            SOURCE_INSTRUCTION,
            "toolqp uses dataset-provided LLM text: each query's ToolRet instruction as a "
            f"one-query recorded plan ({len(found)} of {len(test.demos)} test queries); these "
            "are not figures of ToolQP with a live planner",
        )
    if chat_model is not None:
        kwargs: dict[str, Any] = {"recorder": PlanRecorder(record) if record else None}
        if max_turns is not None:
            kwargs["max_turns"] = max_turns
        return PlannerChoice(
            ChatPlanner(chat_model, **kwargs),
            "live chat model",
            f"toolqp plans with the live chat model {chat_model!r} (Fig. 14 prompt)",
        )
    return PlannerChoice(None, "none", "no planner: toolqp is skipped")


def goal_planner(
    *,
    plans: str | Path | None = None,
    chat_model: ChatModel | None = None,
    record: str | Path | None = None,
    skip_bad: bool = False,
) -> PlannerChoice:
    """The planner of `hybrid`'s sub-goals the bench options ask for (``--hybrid-goals planner``).

    Recorded plans (``--plans FILE``: their sub-goals; a full ToolQP plan serves too), or the
    live chat model asked once per request for sub-goals alone (`ChatPlanner` with
    ``max_turns=1``; never a call per step). Either way the planner is a `KeptPlanner`: a
    request is planned once per run, whatever the seeds. With ``record``, live plans are
    appended to that file and the plans already in it are replayed, not asked again (an
    interrupted run resumes from it).

    Raises:
        PlannerOptionError: Neither source, or both.
        DatasetFormatError: A plans-file line does not parse (file and line).
    """
    if (plans is None) == (chat_model is None):
        raise PlannerOptionError(
            "--hybrid-goals planner needs one planner: --plans FILE, or a live chat model "
            "(--chat-base-url/--chat-model)"
        )
    if plans is not None:
        replay = ReplayPlanner(plans, skip_bad=skip_bad)
        return PlannerChoice(
            KeptPlanner(replay, replay.plans),
            "recorded plans",
            f"hybrid's sub-goals from {len(replay)} recorded plans in {plans}",
            replay.problems,
        )
    assert chat_model is not None
    kept: dict[str, Plan] = {}
    problems: list[str] = []
    if record is not None and Path(record).exists():
        kept, problems = read_plans(record, skip_bad=skip_bad)
    recorder = PlanRecorder(record) if record else None
    replayed = f"; {len(kept)} plans replayed from {record}" if kept else ""
    return PlannerChoice(
        KeptPlanner(ChatPlanner(chat_model, max_turns=1, recorder=recorder), kept),
        "live chat model",
        f"hybrid's sub-goals from the live chat model {chat_model!r}, one call per request "
        f"(Fig. 14 prompt, first turn){replayed}",
        problems,
    )


def goal_report(choice: PlannerChoice) -> dict[str, Any]:
    """`PlannerChoice.to_json` of a `goal_planner` after a run, with what its planner did.

    ``planned``: requests given a plan; ``fell_back``: requests whose planning failed at least
    once, where the hybrid used the request's clauses in that seed (a figure is the planner's
    only where it planned; replay the recorded plans for one that is); ``asked``: plans asked
    of the planner inside (a live model's calls).
    """
    out = choice.to_json()
    planner = choice.planner
    if isinstance(planner, KeptPlanner):
        failed = sorted(planner.failed)
        out.update(planned=len(planner.served), fell_back=len(failed), asked=planner.asked)
        out["note"] += (
            f"; {len(planner.served)} requests planned, {len(failed)} fell back to the clauses"
        )
        if failed:
            out["first_failure"] = planner.failed[failed[0]]
    return out


__all__ = ["PlannerChoice", "PlannerOptionError", "bench_planner", "goal_planner", "goal_report"]
