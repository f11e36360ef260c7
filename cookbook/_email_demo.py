"""The seven-tool catalogue, four past runs and one request of the framework examples.

`pydantic_ai_agent.py` and `openai_agents_agent.py` share it; it imports no agent framework,
so each runs with its own extra only (`offline_agent.py` shows the same data inline).
"""

from dtdr_agents import Demonstration, Toolset

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
request = "Summarize budget.pdf and email it to Carla"
