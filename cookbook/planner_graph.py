"""A ToolQP planner graph: a planner node writes the request's sub-goals once, and the
retriever ranks the tools again at every step.

    python cookbook/planner_graph.py
    python cookbook/planner_graph.py --model openai:gpt-4o-mini      # real planner and agent
    python cookbook/planner_graph.py --base-url http://localhost:8000/v1 --model qwen3

The retriever is `toolqp:<base>` (paper 003, ToolQP): a planner (the Fig. 14 prompt through
`dtdr_agents.planning.ChatPlanner`) breaks the request into sub-goals and writes one functional
query per turn; each query runs through the base retriever (``--base``: `qts`, the paper's
dense-retriever setting, by default) and the lists are fused by peak rank with the request's
own ranking (ranked by the base with the history). The graph is:

    START -> plan -> select -> model -> tools -> select -> model -> ... -> END

* ``plan`` runs once per request (the plan is cached per request and catalogue) and writes
  the sub-goals and queries to state;
* ``select`` ranks with ``rank(request, history)`` before every model call: sub-goals that the
  calls so far already served leave the fusion, so the ranking leans on the remaining ones.

Offline (the default) the planner is a scripted chat model that writes each request's recorded
plan as sub-goals (descriptions of the recorded calls), and the agent model follows the
recorded plan, like the other cookbook scripts. With ``--model`` or ``--base-url`` the same
chat model plans and acts.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from _common import base_parser, describe_model, load_demo, make_chat_model, print_reply
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from dtdr_agents.foundation.types import Toolset
from dtdr_agents.planning import ChatPlanner
from dtdr_agents.retrievers import make_retriever
from dtdr_agents.retrievers.toolqp import ToolQPRetriever
from langchain_dtdr import current_turn
from langchain_dtdr.testing import ScriptedChatModel, langchain_tools

_REQUEST = re.compile(r"User Query: (.*)\. Breakdown of user's intents:", re.DOTALL)


class RecordedPlanChat:
    """An offline planner model: answers the Fig. 14 turns from each request's recorded plan.

    Turn 1 lists one sub-goal per recorded call (the tool's description, not its name); each
    later turn writes the next sub-goal as the functional query, then ``<stop_retrieval>``.
    """

    def __init__(self, plans: Mapping[str, Sequence[str]], tools: Toolset) -> None:
        self.plans = {q.strip().rstrip("."): calls for q, calls in plans.items()}
        self.tools = tools

    def __repr__(self) -> str:
        return "RecordedPlanChat()"

    def _goals(self, request: str) -> list[str]:
        calls = self.plans.get(request.strip().rstrip("."), ())
        goals = [
            self.tools.get(c).description or c for c in dict.fromkeys(calls) if self.tools.has(c)
        ]
        return goals or [request]

    def invoke(self, messages: list[tuple[str, str]]) -> str:
        """The next planner turn of the conversation `messages`."""
        found = _REQUEST.search(messages[1][1])
        goals = self._goals(found.group(1) if found else messages[1][1])
        turn = sum(1 for role, _ in messages if role == "ai")
        if turn == 0:
            return (
                f"<task_breakdown>{len(goals)} steps</task_breakdown>\n"
                f"<sub_goals>{json.dumps(goals)}</sub_goals>"
            )
        return goals[turn - 1] if turn <= len(goals) else "<stop_retrieval>"


class PlannerState(MessagesState):
    sub_goals: list[str]
    queries: list[str]
    planned_for: str
    bound_tools: list[str]
    plan_notes: list[dict[str, Any]]


def build_planner_graph(
    model: BaseChatModel, tools: Sequence[BaseTool], retriever: ToolQPRetriever, *, k: int = 3
) -> StateGraph:
    """The ToolQP planner graph over a fitted `toolqp:<base>` retriever."""
    catalogue = [t.name for t in tools]
    by_name = {t.name: t for t in tools}

    def plan_update(request: str, plan: Any) -> dict[str, Any]:
        if plan is None:
            reason = retriever.plan_fallback_reason(request)
            return {"planned_for": request, "sub_goals": [], "queries": [f"(fallback: {reason})"]}
        return {
            "planned_for": request,
            "sub_goals": list(plan.sub_goals),
            "queries": list(plan.queries),
        }

    def plan(state: PlannerState) -> dict[str, Any]:
        request = current_turn(state["messages"]).request
        if state.get("planned_for") == request:
            return {}
        return plan_update(request, retriever.plan_for(request))

    async def aplan(state: PlannerState) -> dict[str, Any]:
        request = current_turn(state["messages"]).request
        if state.get("planned_for") == request:
            return {}
        return plan_update(request, await retriever.aplan_for(request))

    def select(state: PlannerState) -> dict[str, Any]:
        turn = current_turn(state["messages"])
        ranking = retriever.rank(turn.request, list(turn.history), ignore_unknown=True)
        top = ranking.top(k, include_end=False)
        wanted = {t.name for t in top}
        bound = [n for n in catalogue if n in wanted]  # catalogue order: stable prompts
        note = {
            "history": list(turn.history),
            "bound": bound,
            "why": {t.name: t.why for t in top},
            "probabilities": {t.name: t.probability for t in top},
            "done_sub_goals": list(ranking.explanation.get("done_sub_goals", [])),
        }
        return {"bound_tools": bound, "plan_notes": [*state.get("plan_notes", []), note]}

    def call_model(state: PlannerState) -> dict[str, Any]:
        bound = model.bind_tools([by_name[n] for n in state["bound_tools"]])
        return {"messages": [bound.invoke(state["messages"])]}

    def route(state: PlannerState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    graph = StateGraph(PlannerState)
    graph.add_node("plan", RunnableLambda(plan, afunc=aplan, name="plan"))  # async: aplan
    graph.add_node("select", select)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(list(tools)))
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "select")
    graph.add_edge("select", "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "select")
    return graph


def run_request(app: Any, query: str) -> dict[str, Any]:
    """Run one request and print the plan and each selection step."""
    state: dict[str, Any] = {}
    for update in app.stream({"messages": [("user", query)]}, stream_mode="updates"):
        for node, value in update.items():
            if node == "plan" and value:
                print(f"  planner sub-goals: {value['sub_goals']}")
                print(f"  planner queries:   {value['queries']}")
            elif node == "select":
                note = value["plan_notes"][-1]
                history = " -> ".join(note["history"]) or "(none)"
                probs = note["probabilities"]
                shown = ", ".join(f"{n} ({probs[n]:.2f})" for n in note["bound"])
                done = note["done_sub_goals"]
                print(f"  after {history}" + (f" [sub-goals served: {len(done)}]" if done else ""))
                print(f"    bound: {shown}")
                best = next(iter(note["why"]), None)  # the top-ranked bound tool
                if best:
                    print(f"    why {best}: {note['why'][best]}")
            elif node == "model" and value:
                print_reply(value["messages"][-1], indent="  ")
            state.update(value or {})
    return state


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--base", default="qts", help="the base retriever id (default qts)")
    args = parser.parse_args(argv)
    demo = load_demo(args)
    tools = langchain_tools(demo.tools)
    model = make_chat_model(args, demo.plans(), demo.tools)
    planner_model: Any = (
        RecordedPlanChat(demo.plans(), demo.tools)
        if isinstance(model, ScriptedChatModel)
        else model
    )
    retriever = make_retriever(
        f"toolqp:{args.base}",
        lenient=True,  # `seed` reaches the bases that take one
        encoder=args.encoder,
        seed=args.seed,
        planner=ChatPlanner(planner_model),
    )
    assert isinstance(retriever, ToolQPRetriever)
    retriever.fit(demo.train, demo.tools)
    app = build_planner_graph(model, tools, retriever, k=args.k).compile()
    planner_text = (
        "offline scripted planner (writes the recorded plan's steps as sub-goals)"
        if isinstance(planner_model, RecordedPlanChat)
        else describe_model(model)
    )
    print(
        f"ToolQP planner graph: retriever toolqp:{args.base}, k={args.k}, planner: "
        f"{planner_text}, model: {describe_model(model)}"
    )
    for request in demo.test[: args.queries]:
        print(f"\n=== {request.query}\n    recorded plan: {' -> '.join(request.calls)}")
        run_request(app, request.query)
    return 0


if __name__ == "__main__":
    sys.exit(main())
