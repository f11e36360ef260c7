"""A Pydantic AI agent whose tools are re-selected before every model call, offline.

`prepare_tools` reads the run's messages (the request and the tool calls so far) and returns
only the tool definitions the retriever selects; the model is a scripted `FunctionModel` that
follows the request's plan. A second agent defers every tool and lets the model search them
with `ToolSearch(strategy=search_strategy(...))`. Pass any Pydantic AI model to run it for real.
"""

from _email_demo import demos, email_plan, request, tools
from pydantic_ai import Agent
from pydantic_ai.capabilities import PrepareTools, ToolSearch

from dtdr_agents import make_retriever
from pydantic_ai_dtdr import prepare_tools, search_strategy
from pydantic_ai_dtdr.testing import PlanModel, pydantic_tools

retriever = make_retriever("hybrid").fit(demos, tools)  # MiniLM, shipped offline

model = PlanModel({request: email_plan})  # swap in "openai:gpt-4o-mini" or any model
prepare = prepare_tools(retriever, k=3)
agent = Agent(model, tools=pydantic_tools(tools), capabilities=[PrepareTools(prepare)])
result = agent.run_sync(request)
for step in prepare.steps(result.run_id):  # why each tool was bound: step.selection.why
    after = (step.history or ("the request",))[-1]
    print(f"step {len(step.history)}, after {after}: bound {', '.join(step.bound)}")
print("answer:", result.output)

# Tool search: every tool deferred; the model's searches are answered by the retriever,
# which also knows the calls made so far.
model = PlanModel({request: email_plan})
search = ToolSearch(strategy=search_strategy(retriever, k=2))
agent = Agent(model, tools=pydantic_tools(tools, defer_loading=True), capabilities=[search])
result = agent.run_sync(request)
print("with tool search, offered per call:", [len(o) for o in model.offered])
print("answer:", result.output)
