"""An OpenAI Agents SDK agent whose tools are enabled step by step, offline.

Every catalogue tool's `is_enabled` asks one `DTDRToolSelection`, which ranks the tools from
the run's request and the tool calls so far; the model is a scripted `Model` that follows the
request's plan. Pass any Agents SDK model (e.g. "gpt-4o-mini") to run it for real; an MCP
server takes the same selection as `tool_filter=selection.tool_filter`.
"""

from _email_demo import demos, email_plan, request, tools
from agents import Agent, RunConfig, Runner

from dtdr_agents import make_retriever
from openai_agents_dtdr import DTDRToolSelection
from openai_agents_dtdr.testing import PlanModel, agents_tools

retriever = make_retriever("hybrid").fit(demos, tools)  # MiniLM, shipped offline

selection = DTDRToolSelection(retriever, k=3)
model = PlanModel({request: email_plan})  # swap in "gpt-4o-mini" or any Agents SDK model
agent = selection.agent(Agent(name="assistant", model=model, tools=agents_tools(tools)))
run = selection.context(request)  # carries the request and the calls so far
result = Runner.run_sync(agent, request, context=run, run_config=RunConfig(tracing_disabled=True))

for step in run.steps:  # one per model call; why each tool was bound: step.selection.why
    after = (step.history or ("the request",))[-1]
    print(f"step {len(step.history)}, after {after}: offered {', '.join(step.bound)}")
print("answer:", result.final_output)
