"""A LangGraph agent that runs offline: no network, no API key (docs/agents.md shows this file).

The chat model is the package's scripted model: it follows the request's plan and records the
tools it was given at every call. Pass any LangChain chat model instead to run it for real.
"""

from dtdr_agents import Demonstration, Toolset, make_retriever
from langchain_dtdr.testing import PlanFollower, ScriptedChatModel, langchain_tools
from langgraph_dtdr import create_dtdr_agent

tools = Toolset(
    [
        {"name": "open_file", "description": "Open a file and return its text"},
        {"name": "summarize_pdf", "description": "Summarize the text of a PDF document"},
        {"name": "get_email_address", "description": "Look up a contact's email address"},
        {"name": "compose_email", "description": "Write and send an email to an address"},
        {"name": "get_weather", "description": "Get the weather forecast for a city"},
        {"name": "book_flight", "description": "Book a flight to a city"},
        {"name": "translate_text", "description": "Translate a text into another language"},
    ]
)
email_plan = ("open_file", "summarize_pdf", "get_email_address", "compose_email")
demos = [  # past runs: request -> the tool calls, in order
    Demonstration("Summarize q3.pdf and email it to Ana", email_plan),
    Demonstration("Send Bo a summary of report.pdf by email", email_plan),
    Demonstration("Weather in Rome? Book me a flight there", ("get_weather", "book_flight")),
    Demonstration("Translate notes.txt into Spanish", ("open_file", "translate_text")),
]
retriever = make_retriever("hybrid").fit(demos, tools)  # MiniLM, shipped offline

request = "Summarize budget.pdf and email it to Carla"
model = ScriptedChatModel(responder=PlanFollower({request: email_plan}, tools))
agent = create_dtdr_agent(model, langchain_tools(tools), retriever, k=3).compile()
state = agent.invoke({"messages": [("user", request)]})

for step in state["tool_selections"]:  # why each tool was bound: step["why"]
    after = (step["history"] or ["the request"])[-1]
    print(f"step {step['step']}, after {after}: bound {', '.join(step['bound'])}")
print("answer:", state["messages"][-1].content)
