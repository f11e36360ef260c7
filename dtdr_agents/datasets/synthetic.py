"""The embedded demonstration set used by `dtdr-agents demo`: procedural, offline, seeded.

A personal-assistant domain in the style of TinyAgent (contacts, email, SMS, calendar, notes,
reminders, files, PDF summaries, maps, weather, web search, Zoom, translation). Each demonstration
comes from one of a few dozen task templates ("intents"): a query paraphrase with filled slots
(people, files, notes, dates, places, topics) and a plan of calls with their data dependencies.

The data is built so that history-aware retrieval matters, as in real agent traces:

* repeated calls: one `get_email_address` / `get_phone_number` per person the query names;
* branching after a shared prefix: many intents start with `open_file -> summarize_pdf` (or
  `get_current_location -> maps_show_directions`, `web_search`, ...) and then diverge, so the
  last call alone does not determine the next tool but the request and the longer history do;
* parallel calls with a joint successor: e.g. several address look-ups all feeding
  `compose_email`; the recorded order of the calls of a stage is shuffled and `edges` keep the
  real dependencies, so a step can have several acceptable next tools;
* plans of 1 to 7 calls, common and rare intents, and paraphrases shared between intents
  ("send it to Bob" by email or by text) so the query alone is sometimes ambiguous.

Everything is derived from `random.Random(seed)`: the same `(n, seed)` gives the same dataset.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dtdr_agents.datasets.base import Dataset
from dtdr_agents.foundation.types import Demonstration, Tool, Toolset

__all__ = ["DEMO_INTENTS", "DEMO_TOOLS", "make_demo_dataset"]


def _schema(properties: dict[str, dict[str, Any]], required: Sequence[str]) -> dict[str, Any]:
    """An object JSON schema with the given properties and required names."""
    return {"type": "object", "properties": properties, "required": list(required)}


def _str(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _str_list(description: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "description": description}


DEMO_TOOLS: tuple[Tool, ...] = (
    Tool(
        "get_phone_number",
        "Search the contacts for a person by name and return their phone number.",
        _schema({"name": _str("Full or partial name of the contact.")}, ["name"]),
    ),
    Tool(
        "get_email_address",
        "Search the contacts for a person by name and return their email address.",
        _schema({"name": _str("Full or partial name of the contact.")}, ["name"]),
    ),
    Tool(
        "compose_email",
        "Compose and send a new email to one or more recipients, optionally with attachments.",
        _schema(
            {
                "recipients": _str_list("Email addresses of the recipients."),
                "subject": _str("Subject line of the email."),
                "content": _str("Body text of the email."),
                "attachments": _str_list("Paths of files to attach."),
                "cc": _str_list("Email addresses to copy."),
            },
            ["recipients", "subject", "content"],
        ),
    ),
    Tool(
        "reply_to_email",
        "Reply to the email currently selected in the mail app with the given content.",
        _schema(
            {
                "content": _str("Body text of the reply."),
                "attachments": _str_list("Paths of files to attach to the reply."),
                "cc": _str_list("Email addresses to copy."),
            },
            ["content"],
        ),
    ),
    Tool(
        "forward_email",
        "Forward the email currently selected in the mail app to other recipients.",
        _schema(
            {
                "recipients": _str_list("Email addresses to forward the email to."),
                "content": _str("Optional note added above the forwarded message."),
                "cc": _str_list("Email addresses to copy."),
            },
            ["recipients"],
        ),
    ),
    Tool(
        "send_sms",
        "Send a text message (SMS) to one or more phone numbers.",
        _schema(
            {
                "recipients": _str_list("Phone numbers of the recipients."),
                "message": _str("Text of the message."),
            },
            ["recipients", "message"],
        ),
    ),
    Tool(
        "create_calendar_event",
        "Create a calendar event with a title, start and end time, and optional invitees.",
        _schema(
            {
                "title": _str("Title of the event."),
                "start_date": _str("Start date and time, ISO 8601 (YYYY-MM-DD HH:MM)."),
                "end_date": _str("End date and time, ISO 8601 (YYYY-MM-DD HH:MM)."),
                "location": _str("Where the event takes place."),
                "invitees": _str_list("Email addresses of the people to invite."),
                "notes": _str("Notes or agenda attached to the event."),
            },
            ["title", "start_date", "end_date"],
        ),
    ),
    Tool(
        "get_calendar_events",
        "List the events on the user's calendar for a given day.",
        _schema({"date": _str("The day to list, ISO 8601 (YYYY-MM-DD).")}, ["date"]),
    ),
    Tool(
        "create_zoom_meeting",
        "Create a Zoom meeting and return its join link.",
        _schema(
            {
                "topic": _str("Topic of the meeting."),
                "start_time": _str("Start date and time, ISO 8601 (YYYY-MM-DD HH:MM)."),
                "duration_minutes": {
                    "type": "integer",
                    "description": "Length of the meeting in minutes.",
                    "minimum": 1,
                },
                "invitees": _str_list("Email addresses of the participants."),
            },
            ["topic", "start_time", "duration_minutes"],
        ),
    ),
    Tool(
        "create_note",
        "Create a new note with the given title and content in the notes app.",
        _schema(
            {
                "name": _str("Title of the new note."),
                "content": _str("Text of the note."),
                "folder": _str("Folder to create the note in; the default folder if empty."),
            },
            ["name", "content"],
        ),
    ),
    Tool(
        "open_note",
        "Open an existing note by its title and return its content.",
        _schema(
            {
                "name": _str("Title of the note."),
                "folder": _str("Folder that holds the note."),
            },
            ["name"],
        ),
    ),
    Tool(
        "append_note_content",
        "Append text to the end of an existing note.",
        _schema(
            {
                "name": _str("Title of the note."),
                "append_content": _str("Text to append."),
                "folder": _str("Folder that holds the note."),
            },
            ["name", "append_content"],
        ),
    ),
    Tool(
        "create_reminder",
        "Create a reminder with an optional due date, notes and priority.",
        _schema(
            {
                "name": _str("What to be reminded of."),
                "due_date": _str("Due date and time, ISO 8601 (YYYY-MM-DD HH:MM)."),
                "notes": _str("Extra notes stored with the reminder."),
                "list_name": _str("Reminder list to add it to."),
                "priority": {
                    "type": "integer",
                    "description": "0 for none, 1 high, 5 medium, 9 low.",
                    "enum": [0, 1, 5, 9],
                },
                "all_day": {"type": "boolean", "description": "Whether it is an all-day item."},
            },
            ["name"],
        ),
    ),
    Tool(
        "open_file",
        "Find a file on the device by name or path, open it, and return its full path.",
        _schema({"name_or_path": _str("File name or path to look for.")}, ["name_or_path"]),
    ),
    Tool(
        "summarize_pdf",
        "Summarize the content of a PDF file and return the summary text.",
        _schema(
            {
                "pdf_path": _str("Path of the PDF file."),
                "max_words": {"type": "integer", "description": "Maximum summary length."},
            },
            ["pdf_path"],
        ),
    ),
    Tool(
        "translate_text",
        "Translate a piece of text into a target language.",
        _schema(
            {
                "text": _str("Text to translate."),
                "target_language": _str("Language to translate into, e.g. 'French'."),
            },
            ["text", "target_language"],
        ),
    ),
    Tool(
        "maps_open_location",
        "Show a place or address in the maps app.",
        _schema({"location": _str("Name or address of the place.")}, ["location"]),
    ),
    Tool(
        "maps_show_directions",
        "Show directions and travel time between two locations in the maps app.",
        _schema(
            {
                "start_location": _str("Where the trip starts."),
                "end_location": _str("Where the trip ends."),
                "transport": {
                    "type": "string",
                    "description": "Means of travel.",
                    "enum": ["driving", "walking", "transit", "cycling"],
                },
            },
            ["start_location", "end_location"],
        ),
    ),
    Tool(
        "get_current_location",
        "Return the device's current location as an address.",
        _schema({}, []),
    ),
    Tool(
        "get_weather",
        "Get the weather forecast for a location and day.",
        _schema(
            {
                "location": _str("City or address."),
                "date": _str("Day of the forecast, ISO 8601 (YYYY-MM-DD); today if empty."),
            },
            ["location"],
        ),
    ),
    Tool(
        "web_search",
        "Search the web and return the top results with titles, links and snippets.",
        _schema(
            {
                "query": _str("The search query."),
                "num_results": {"type": "integer", "description": "How many results to return."},
            },
            ["query"],
        ),
    ),
)
"""The tool catalogue of the demo dataset (21 personal-assistant tools)."""


# --------------------------------------------------------------------------------------------
# Slot values
# --------------------------------------------------------------------------------------------

_PEOPLE = (
    "Alice", "Bob", "Carol", "Dave", "Emma", "Frank", "Grace", "Hector", "Ines", "Jamal",
    "Kenji", "Laura", "Miguel", "Nadia", "Omar", "Priya", "Quentin", "Rosa", "Sam", "Tara",
    "Umar", "Vera", "Wei", "Yusuf", "Zoe", "Dr. Patel", "Professor Klein", "Mom", "Uncle Joe",
    "Sarah Chen", "Liam O'Brien", "Maya Gupta", "Noah Smith", "Olivia Brown", "Lucas Rossi",
    "Hannah Weber", "Ethan Park", "Sofia Alvarez",
)  # fmt: skip
_PDF_STEMS = (
    "ResearchPaper", "Q3_Report", "Project Proposal", "Lease Agreement", "TravelGuide",
    "Meeting Minutes 2024-05-02", "Invoice_4471", "Course Syllabus", "Thesis Draft v3",
    "Budget2025", "Onboarding Handbook", "Quarterly Review", "Grant Application",
    "Insurance Policy", "Conference Program", "Annual Report 2023", "User Study Results",
    "Product Roadmap", "Contract_Acme", "Paper_Review_Notes", "Tax Return 2023",
    "Marketing Plan", "Design Spec", "Lab Safety Manual",
)  # fmt: skip
_DOCS = (
    "slides.pptx", "Budget.xlsx", "ProjectPlan.docx", "resume.pdf", "headshot.jpg",
    "Agenda.docx", "expenses_march.xlsx", "Release Notes.md", "floorplan.png",
    "Pitch Deck.key", "cover_letter.docx", "itinerary.pdf", "photos.zip", "Draft Chapter 2.docx",
)  # fmt: skip
_NOTES = (
    "Research Notes", "Project Ideas", "Vacation Plans", "Meeting Notes", "Reading List",
    "Weekly Log", "Book Club", "Grocery List", "Team Updates", "Thesis", "Gift Ideas",
    "Recipes", "Client Feedback", "Daily Journal", "Course Notes", "House Hunting",
)  # fmt: skip
_FOLDERS = ("Academic", "Work", "Travel", "Personal", "Ideas", "Finance", "Projects", "Family")
_WHEN = (
    "tomorrow at 3 PM", "next Monday at 10 AM", "on Friday at 2:30 PM", "on March 14 at 9:00",
    "this Thursday at noon", "tomorrow morning at 8", "next Tuesday at 4 PM",
    "on June 3rd at 11 AM", "tonight at 7", "the day after tomorrow at 1 PM",
    "next Wednesday at 9:30", "on the 21st at 5 PM",
)  # fmt: skip
_DAYS = (
    "today", "tomorrow", "next Monday", "this Friday", "on June 3rd", "next Tuesday",
    "this weekend", "on the 14th",
)  # fmt: skip
_DAY_NOUNS = (
    "today", "tomorrow", "next Monday", "this Friday", "June 3rd", "next Tuesday",
    "this weekend", "the 14th",
)  # fmt: skip
_PLACES = (
    "Golden Gate Park", "the Ferry Building", "SFO Airport", "Stanford University",
    "Union Square", "The Peninsula, New York", "the Blue Bottle Coffee on Mint Plaza",
    "Central Station", "the Museum of Modern Art", "Oakland Coliseum", "Pier 39",
    "the downtown public library", "Mission Dolores Park", "the office", "Berkeley Marina",
    "Whole Foods on 4th Street",
)  # fmt: skip
_CITIES = (
    "San Francisco", "Seattle", "Boston", "Chicago", "London", "Paris", "Tokyo", "Berlin",
    "Austin", "Denver", "Lisbon", "Toronto",
)  # fmt: skip
_TOPICS = (
    "quarterly planning", "the product launch", "the budget review", "the hiring pipeline",
    "the design critique", "the research proposal", "the marketing campaign", "the Q3 results",
    "next week's offsite", "the client onboarding", "the thesis defense", "the kitchen remodel",
    "the conference talk", "the vendor contract",
)  # fmt: skip
_SUBJECTS = (
    "Research Summary", "Quick update", "Action items", "Project status", "Notes from today",
    "Reading for Monday", "Follow-up", "Trip details", "Budget numbers", "Heads up",
)  # fmt: skip
_SEARCHES = (
    "the best hiking trails near Lake Tahoe", "the latest Python release notes",
    "how to renew a passport", "reviews of the new Pixel phone", "vegetarian lasagna recipes",
    "flights from SFO to Boston in May", "the opening hours of the science museum",
    "tips for a good conference talk", "the history of the Golden Gate Bridge",
    "cheap hotels near Union Square", "how transformers work in machine learning",
    "upcoming jazz concerts this month",
)  # fmt: skip
_LANGS = ("French", "Spanish", "German", "Japanese", "Italian", "Portuguese", "Mandarin")
_TASKS = (
    "pay the electricity bill", "call the dentist", "renew the car insurance",
    "submit the expense report", "water the plants", "book flights for the conference",
    "pick up the dry cleaning", "send the invoice", "review the pull request",
    "buy a birthday present for Mom", "back up the laptop", "prepare the slides",
)  # fmt: skip
_MESSAGES = (
    "I'm running 10 minutes late", "the meeting moved to 4 PM", "dinner is at 7 tonight",
    "the report is ready for review", "I landed safely", "we need to reschedule Friday",
    "the package arrived", "I'll bring the snacks", "the slides are in the shared folder",
    "happy birthday", "the contract is signed", "I'm on my way",
)  # fmt: skip
_DURATIONS = ("15-minute", "30-minute", "45-minute", "1-hour", "90-minute")
_TRANSPORT = ("driving", "walking", "transit", "cycling")

_POOLS: dict[str, tuple[str, ...]] = {
    "person": _PEOPLE,
    "folder": _FOLDERS,
    "note": _NOTES,
    "when": _WHEN,
    "day": _DAYS,
    "dayn": _DAY_NOUNS,
    "place": _PLACES,
    "city": _CITIES,
    "topic": _TOPICS,
    "subject": _SUBJECTS,
    "search": _SEARCHES,
    "lang": _LANGS,
    "task": _TASKS,
    "message": _MESSAGES,
    "duration": _DURATIONS,
    "transport": _TRANSPORT,
    "doc": _DOCS,
}


class _Slots(dict[str, str]):
    """Slot values of one query, drawn on first use; `x2` draws a value different from `x`."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.rng = rng

    def __missing__(self, key: str) -> str:
        if key == "pdf":
            stem = self.rng.choice(_PDF_STEMS)
            value = f'"{stem}.pdf"' if self.rng.random() < 0.5 else f"{stem}.pdf"
        elif key.endswith("2") and key[:-1] in _POOLS:
            first = self[key[:-1]]
            value = self.rng.choice([v for v in _POOLS[key[:-1]] if v != first])
        elif key in _POOLS:
            value = self.rng.choice(_POOLS[key])
        else:
            raise KeyError(key)
        self[key] = value
        return value

    def people(self, k: int) -> list[str]:
        """Draw `k` distinct people, set the `people` slot (and `person`) and return them."""
        names = self.rng.sample(_PEOPLE, k)
        self["people"] = names[0] if k == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        self["person"] = names[0]
        return names


def _count(rng: random.Random, top: int = 3) -> int:
    """How many people a query names: usually one, sometimes two or three."""
    return rng.choices((1, 2, 3)[:top], weights=(0.45, 0.35, 0.2)[:top])[0]


_WRAPPERS: tuple[tuple[str, float], ...] = (
    ("{C}.", 6.0),
    ("Please {c}.", 2.0),
    ("Can you {c}?", 1.0),
    ("Could you {c}?", 1.0),
    ("{C}, please.", 1.0),
    ("I need you to {c}.", 0.5),
    ("Hey, {c}.", 0.5),
)


def _wrap(rng: random.Random, clause: str) -> str:
    """Turn an imperative clause into a sentence with a random politeness wrapper."""
    forms = [w for w, _ in _WRAPPERS]
    form = rng.choices(forms, weights=[w for _, w in _WRAPPERS])[0]
    return form.format(C=clause[:1].upper() + clause[1:], c=clause)


# --------------------------------------------------------------------------------------------
# Plans
# --------------------------------------------------------------------------------------------


class _Plan:
    """Calls with data dependencies, grouped in stages; calls of one stage are shuffled."""

    def __init__(self) -> None:
        self.tools: list[str] = []
        self.stages: list[int] = []
        self.deps: list[tuple[int, ...]] = []

    def add(self, tool: str, stage: int, *deps: int) -> int:
        """Add a call at `stage` that needs the calls `deps` (from earlier stages)."""
        for d in deps:
            if self.stages[d] >= stage:
                raise AssertionError(
                    f"{tool}: dependency {self.tools[d]} is not in an earlier stage"
                )
        self.tools.append(tool)
        self.stages.append(stage)
        self.deps.append(tuple(deps))
        return len(self.tools) - 1

    def lookups(self, tool: str, k: int, stage: int) -> list[int]:
        """Add `k` independent calls of `tool` (one per person) at `stage`."""
        return [self.add(tool, stage) for _ in range(k)]

    def record(self, rng: random.Random) -> tuple[tuple[str, ...], tuple[tuple[int, int], ...]]:
        """The recorded call order (stages in order, shuffled within) and the remapped edges."""
        keys = [(s, rng.random()) for s in self.stages]
        order = sorted(range(len(self.tools)), key=lambda i: keys[i])
        pos = {node: p for p, node in enumerate(order)}
        calls = tuple(self.tools[i] for i in order)
        edges = tuple(
            sorted((pos[d], pos[j]) for j in range(len(self.tools)) for d in self.deps[j])
        )
        return calls, edges


_Builder = Callable[[random.Random, _Slots], tuple[list[str], _Plan]]


@dataclass(frozen=True)
class _Intent:
    """A task template: paraphrases (picked by the builder) and a plan builder."""

    name: str
    weight: float
    build: _Builder


_INTENTS: list[_Intent] = []


def _intent(name: str, weight: float) -> Callable[[_Builder], _Builder]:
    """Register a plan builder as an intent with a relative frequency."""

    def register(fn: _Builder) -> _Builder:
        _INTENTS.append(_Intent(name, weight, fn))
        return fn

    return register


# --- contacts, email, SMS -------------------------------------------------------------------


@_intent("email_people", 9.0)
def _email_people(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    es = p.lookups("get_email_address", len(s.people(_count(rng))), 0)
    p.add("compose_email", 1, *es)
    return [
        "email {people} about {topic}",
        "send an email to {people} saying {message}",
        'compose an email to {people} with the subject "{subject}" about {topic}',
        "let {people} know by email that {message}",
        "drop {people} a quick email about {topic}",
        "write an email to {people} telling them {message}",
    ], p


@_intent("sms_people", 8.0)
def _sms_people(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    ps = p.lookups("get_phone_number", len(s.people(_count(rng))), 0)
    p.add("send_sms", 1, *ps)
    return [
        "text {people}: {message}",
        "send a text message to {people} saying {message}",
        "message {people} that {message}",
        "send an SMS to {people} letting them know {message}",
        "shoot {people} a text that {message}",
    ], p


@_intent("phone_lookup", 1.0)
def _phone_lookup(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.lookups("get_phone_number", len(s.people(_count(rng, 2))), 0)
    return [
        "look up the phone number of {people}",
        "find the mobile number for {people}",
        "get me the phone number for {people} from my contacts",
    ], p


@_intent("email_lookup", 1.0)
def _email_lookup(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.lookups("get_email_address", len(s.people(_count(rng, 2))), 0)
    return [
        "look up the email address of {people}",
        "find the email for {people} in my contacts",
        "get me the email address for {people}",
    ], p


@_intent("email_and_text", 2.0)
def _email_and_text(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    k = len(s.people(_count(rng, 2)))
    es = p.lookups("get_email_address", k, 0)
    ps = p.lookups("get_phone_number", k, 0)
    p.add("compose_email", 1, *es)
    p.add("send_sms", 1, *ps)
    return [
        "email and text {people} that {message}",
        "let {people} know that {message}, both by email and by SMS",
        "send {people} an email and a text saying {message}",
    ], p


@_intent("forward_email", 2.5)
def _forward(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    es = p.lookups("get_email_address", len(s.people(_count(rng))), 0)
    p.add("forward_email", 1, *es)
    return [
        "forward this email to {people}",
        'forward the selected email to {people} with the note "{message}"',
        "pass the current email along to {people}",
        "send this email on to {people}",
    ], p


@_intent("reply_simple", 1.5)
def _reply(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.add("reply_to_email", 0)
    return [
        "reply to the current email saying {message}",
        "respond to this email: {message}",
        "write back to the selected email that {message}",
    ], p


@_intent("reply_with_file", 2.0)
def _reply_file(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    f = p.add("open_file", 0)
    p.add("reply_to_email", 1, f)
    return [
        "reply to this email with {doc} attached",
        "respond to the current email and attach {doc}",
        "answer the selected email saying {message} and include {doc}",
    ], p


@_intent("reply_and_reminder", 1.5)
def _reply_reminder(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.add("reply_to_email", 0)
    p.add("create_reminder", 0)
    return [
        "reply to the selected email that {message} and remind me to {task} {when}",
        "respond to this email saying {message}, then create a reminder to {task} {when}",
    ], p


# --- files and PDFs (shared prefix open_file -> summarize_pdf) -------------------------------


def _pdf_prefix(p: _Plan) -> tuple[int, int]:
    f = p.add("open_file", 0)
    return f, p.add("summarize_pdf", 1, f)


@_intent("pdf_summarize_only", 2.0)
def _pdf_only(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    _pdf_prefix(p)
    return [
        "summarize {pdf}",
        "give me a summary of {pdf}",
        "open {pdf} and tell me what it says in a few sentences",
        "pull out the key points of {pdf}",
    ], p


@_intent("pdf_summary_append_note", 6.0)
def _pdf_append(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    _, m = _pdf_prefix(p)
    p.add("append_note_content", 2, m)
    return [
        'summarize {pdf} and append the summary to my note "{note}"',
        'add a summary of {pdf} to the "{note}" note in the {folder} folder',
        'open {pdf}, summarize it and append the key points to "{note}"',
        "summarize the {pdf} document and add it to my {note} note",
        "save a summary of {pdf} in my {note} note",
    ], p


@_intent("pdf_summary_new_note", 4.0)
def _pdf_new_note(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    _, m = _pdf_prefix(p)
    p.add("create_note", 2, m)
    return [
        'summarize {pdf} and save the summary as a new note called "{note}"',
        'create a note named "{note}" in {folder} containing a summary of {pdf}',
        'open {pdf}, summarize it, and put the summary in a new note titled "{note}"',
        'make a new note "{note}" with the main points of {pdf}',
        "save a summary of {pdf} in a note",
    ], p


@_intent("pdf_summary_email", 7.0)
def _pdf_email(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    f, m = _pdf_prefix(p)
    es = p.lookups("get_email_address", len(s.people(_count(rng))), 2)
    p.add("compose_email", 3, f, m, *es)
    return [
        "summarize {pdf} and email the summary to {people}",
        "send {people} a summary of {pdf} by email",
        "summarize {pdf} and send it to {people}",
        "open {pdf}, summarize it and email {people} the summary with the PDF attached",
        'email {people} the key points of {pdf} with the subject "{subject}"',
    ], p


@_intent("pdf_summary_sms", 3.0)
def _pdf_sms(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    _, m = _pdf_prefix(p)
    ps = p.lookups("get_phone_number", len(s.people(_count(rng))), 2)
    p.add("send_sms", 3, m, *ps)
    return [
        "summarize {pdf} and text the summary to {people}",
        "summarize {pdf} and send it to {people}",
        "send {people} a text with the main points of {pdf}",
        "open {pdf} and message {people} a short summary of it",
    ], p


@_intent("pdf_summary_note_and_email", 4.0)
def _pdf_note_email(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    f, m = _pdf_prefix(p)
    p.add("append_note_content", 2, m)
    es = p.lookups("get_email_address", len(s.people(_count(rng))), 2)
    p.add("compose_email", 3, f, m, *es)
    return [
        'summarize {pdf}, append the summary to "{note}" in the {folder} folder, then compose'
        ' an email with the subject "{subject}" and attach the PDF to send to {people}',
        'add the summary of {pdf} to my "{note}" note and also send it to {people} by email',
        "summarize {pdf} and append it to {note}, then email {people} with the PDF attached",
        "save a summary of {pdf} in my {note} note and email it to {people}",
    ], p


@_intent("pdf_summary_reminder", 2.0)
def _pdf_reminder(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    _, m = _pdf_prefix(p)
    p.add("create_reminder", 2, m)
    return [
        "summarize {pdf} and create a reminder to review it {when}",
        "remind me {when} to go over {pdf}, with its summary in the reminder notes",
        "open {pdf}, summarize it and set a reminder for {when} with the summary",
    ], p


@_intent("pdf_summary_meeting", 2.5)
def _pdf_meeting(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    _, m = _pdf_prefix(p)
    es = p.lookups("get_email_address", len(s.people(_count(rng))), 2)
    p.add("create_calendar_event", 3, m, *es)
    return [
        "summarize {pdf} and schedule a meeting with {people} {when} to discuss it, with the"
        " summary in the invite",
        "set up a calendar event {when} with {people} to review {pdf} and add its summary to"
        " the notes",
        "book a meeting {when} with {people} about {pdf} and include a summary of the document",
    ], p


@_intent("pdf_summary_translate_email", 1.5)
def _pdf_translate(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    f, m = _pdf_prefix(p)
    t = p.add("translate_text", 2, m)
    es = p.lookups("get_email_address", len(s.people(_count(rng))), 2)
    p.add("compose_email", 3, f, t, *es)
    return [
        "summarize {pdf}, translate the summary into {lang} and email it to {people}",
        "send {people} a {lang} translation of the summary of {pdf}",
        "email {people} the summary of {pdf} in {lang}",
    ], p


@_intent("file_email_attachment", 4.0)
def _file_email(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    f = p.add("open_file", 0)
    es = p.lookups("get_email_address", len(s.people(_count(rng))), rng.choice((0, 1, 1)))
    p.add("compose_email", 2, f, *es)
    return [
        "email {doc} to {people}",
        "send {people} the file {doc} as an email attachment",
        'attach {doc} to an email to {people} with the subject "{subject}"',
        "share {doc} with {people} over email",
        "send {doc} to {people}",
    ], p


@_intent("trip_note", 1.0)
def _trip_note(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.add("maps_open_location", 0)
    f = p.add("open_file", 1)
    m = p.add("summarize_pdf", 2, f)
    p.add("append_note_content", 3, m)
    return [
        'open the location "{place}" in Maps and append the summary of {pdf} to the note'
        ' "{note}" in the {folder} folder',
        "show {place} on the map and add a summary of {pdf} to my {note} note",
    ], p


# --- calendar, Zoom ---------------------------------------------------------------------------


@_intent("calendar_simple", 2.5)
def _calendar(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.add("create_calendar_event", 0)
    return [
        'add "{subject}" to my calendar {when}',
        "create a calendar event for {topic} {when} at {place}",
        "block my calendar {when} for {topic}",
        "put {topic} on my calendar {when}",
    ], p


@_intent("calendar_with_invitees", 5.0)
def _calendar_invite(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    es = p.lookups("get_email_address", len(s.people(_count(rng))), 0)
    p.add("create_calendar_event", 1, *es)
    return [
        "schedule a meeting with {people} {when} about {topic}",
        'create a calendar event "{subject}" {when} and invite {people}',
        "put a meeting about {topic} with {people} on my calendar {when}",
        "book time {when} with {people} for {topic} at {place}",
    ], p


@_intent("calendar_and_reminder", 2.0)
def _calendar_reminder(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.add("create_calendar_event", 0)
    p.add("create_reminder", 0)
    return [
        "put {topic} on my calendar {when} and remind me to {task} the day before",
        'create an event "{subject}" {when} and a reminder to {task}',
    ], p


@_intent("zoom_invite_calendar", 4.0)
def _zoom_calendar(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    es = p.lookups("get_email_address", len(s.people(_count(rng))), 0)
    z = p.add("create_zoom_meeting", 1, *es)
    p.add("create_calendar_event", 2, z, *es)
    return [
        "set up a {duration} Zoom meeting with {people} {when} about {topic}",
        "schedule a Zoom call {when} with {people} to discuss {topic} and put it on my calendar",
        "create a Zoom meeting on {topic} with {people} {when} and add it to the calendar",
        "invite {people} to a {duration} Zoom about {topic} {when}",
    ], p


@_intent("zoom_sms_link", 2.0)
def _zoom_sms(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    z = p.add("create_zoom_meeting", 0)
    ps = p.lookups("get_phone_number", len(s.people(_count(rng))), rng.choice((0, 1)))
    p.add("send_sms", 2, z, *ps)
    return [
        "create a Zoom meeting {when} about {topic} and text the link to {people}",
        "send {people} a Zoom link for {when} by SMS",
        "set up a {duration} Zoom call {when} and message the link to {people}",
    ], p


@_intent("agenda_only", 2.0)
def _agenda(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.add("get_calendar_events", 0)
    return [
        "show me my calendar for {dayn}",
        "list my events {day}",
        "check what meetings I have {day}",
    ], p


@_intent("agenda_sms", 2.0)
def _agenda_sms(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    c = p.add("get_calendar_events", 0)
    ps = p.lookups("get_phone_number", len(s.people(_count(rng))), 1)
    p.add("send_sms", 2, c, *ps)
    return [
        "check my calendar for {dayn} and text {people} what I have going on",
        "look at my schedule {day} and send it to {people} by text",
        "send {people} my agenda for {dayn}",
    ], p


@_intent("agenda_email", 1.5)
def _agenda_email(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    c = p.add("get_calendar_events", 0)
    es = p.lookups("get_email_address", len(s.people(_count(rng))), 1)
    p.add("compose_email", 2, c, *es)
    return [
        "email {people} my schedule for {dayn}",
        "send {people} my agenda for {dayn}",
        "check my calendar {day} and email the list of events to {people}",
    ], p


# --- maps, weather ----------------------------------------------------------------------------


@_intent("directions_from_here", 4.0)
def _directions_here(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    loc = p.add("get_current_location", 0)
    p.add("maps_show_directions", 1, loc)
    return [
        "give me directions to {place} from where I am",
        "show me how to get to {place} from my current location",
        "navigate to {place} by {transport}",
        "find the {transport} route from here to {place}",
    ], p


@_intent("eta_sms", 2.0)
def _eta_sms(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    loc = p.add("get_current_location", 0)
    d = p.add("maps_show_directions", 1, loc)
    ps = p.lookups("get_phone_number", len(s.people(_count(rng))), 2)
    p.add("send_sms", 3, d, *ps)
    return [
        "find the route from my location to {place} and text {people} how long it will take",
        "check how long it takes to get to {place} from here and let {people} know by text",
        "get directions from here to {place} and send the travel time to {people}",
    ], p


@_intent("directions_between", 2.5)
def _directions_between(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.add("maps_show_directions", 0)
    return [
        "show directions from {place} to {place2}",
        "get {transport} directions from {place} to {place2}",
        "show me the route between {place} and {place2}",
    ], p


@_intent("directions_share_sms", 2.0)
def _directions_share(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    d = p.add("maps_show_directions", 0)
    ps = p.lookups("get_phone_number", len(s.people(_count(rng))), rng.choice((0, 1)))
    p.add("send_sms", 2, d, *ps)
    return [
        "get directions from {place} to {place2} and text them to {people}",
        "send {people} the route from {place} to {place2} by SMS",
    ], p


@_intent("open_location", 2.5)
def _open_location(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.add("maps_open_location", 0)
    return [
        "open {place} in Maps",
        "show me {place} on the map",
        "find {place} in Apple Maps",
    ], p


@_intent("weather_only", 2.0)
def _weather(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.add("get_weather", 0)
    return [
        "check the weather in {city} {day}",
        "get the forecast for {city} {day}",
        "tell me whether it will rain in {city} {day}",
    ], p


@_intent("weather_here", 1.5)
def _weather_here(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    loc = p.add("get_current_location", 0)
    p.add("get_weather", 1, loc)
    return [
        "check the weather where I am {day}",
        "get the forecast for my current location",
        "tell me if I need an umbrella here {day}",
    ], p


@_intent("weather_and_directions", 1.5)
def _weather_directions(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.add("get_weather", 0)
    p.add("maps_show_directions", 0)
    return [
        "check the weather at {place} {day} and get {transport} directions there from {place2}",
        "show me the route from {place2} to {place} and the forecast there for {dayn}",
    ], p


@_intent("weather_sms", 1.5)
def _weather_sms(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    w = p.add("get_weather", 0)
    ps = p.lookups("get_phone_number", len(s.people(_count(rng))), 1)
    p.add("send_sms", 2, w, *ps)
    return [
        "check the weather in {city} {day} and text it to {people}",
        "let {people} know by text what the weather will be in {city} {day}",
    ], p


# --- web search, notes, reminders, translation -----------------------------------------------


@_intent("web_search_only", 2.0)
def _search(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.add("web_search", 0)
    return [
        "search the web for {search}",
        "google {search}",
        "find information about {search}",
        "look up {search}",
    ], p


@_intent("search_new_note", 2.5)
def _search_note(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    w = p.add("web_search", 0)
    p.add("create_note", 1, w)
    return [
        'search the web for {search} and save what you find in a new note called "{note}"',
        "look up {search} and create a note with the results",
        "look up {search} and save the results in a note",
    ], p


@_intent("search_append_note", 2.0)
def _search_append(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    w = p.add("web_search", 0)
    p.add("append_note_content", 1, w)
    return [
        'look up {search} and add the results to my "{note}" note',
        "search for {search} and append the best links to {note}",
        "look up {search} and save the results in my {note} note",
    ], p


@_intent("search_email", 2.0)
def _search_email(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    w = p.add("web_search", 0)
    es = p.lookups("get_email_address", len(s.people(_count(rng))), rng.choice((0, 1, 1)))
    p.add("compose_email", 2, w, *es)
    return [
        "search for {search} and email the results to {people}",
        "look up {search} and send what you find to {people}",
        "find {search} online and email the links to {people}",
    ], p


@_intent("search_sms", 1.5)
def _search_sms(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    w = p.add("web_search", 0)
    ps = p.lookups("get_phone_number", len(s.people(_count(rng))), 1)
    p.add("send_sms", 2, w, *ps)
    return [
        "look up {search} and text the results to {people}",
        "look up {search} and send what you find to {people}",
    ], p


@_intent("open_note_only", 1.5)
def _open_note(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.add("open_note", 0)
    return [
        'open the note "{note}"',
        "show me my {note} note",
        "pull up {note} from the {folder} folder",
    ], p


@_intent("open_note_email", 2.0)
def _open_note_email(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    o = p.add("open_note", 0)
    es = p.lookups("get_email_address", len(s.people(_count(rng))), 1)
    p.add("compose_email", 2, o, *es)
    return [
        'open my "{note}" note and email its contents to {people}',
        "send {people} my {note} note by email",
        "share the {note} note with {people}",
    ], p


@_intent("create_note_only", 1.5)
def _create_note(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.add("create_note", 0)
    return [
        'create a new note titled "{note}" in {folder} saying {message}',
        'jot down "{message}" in a new note',
    ], p


@_intent("append_note_only", 1.5)
def _append_note(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.add("append_note_content", 0)
    return [
        'add "{message}" to my {note} note',
        'append "{task}" to the note "{note}" in {folder}',
    ], p


@_intent("note_and_reminder", 2.0)
def _note_reminder(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.add("create_note", 0)
    p.add("create_reminder", 0)
    return [
        'jot down a note "{note}" saying {message} and set a reminder to {task} {when}',
        'create a note called "{note}" and remind me {when} to {task}',
    ], p


@_intent("reminder_only", 2.5)
def _reminder(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.add("create_reminder", 0)
    return [
        "remind me to {task} {when}",
        "set a reminder {when} to {task}",
        "create a high-priority reminder to {task}",
        "add {task} to my reminders",
    ], p


@_intent("multi_reminders", 1.5)
def _reminders(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    p.add("create_reminder", 0)
    p.add("create_reminder", 0)
    return [
        "remind me to {task} {when} and to {task2} {when2}",
        "set two reminders: {task} {when}, and {task2} {when2}",
        "create reminders to {task} and to {task2}",
    ], p


@_intent("translate_sms", 1.5)
def _translate_sms(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    t = p.add("translate_text", 0)
    ps = p.lookups("get_phone_number", len(s.people(_count(rng))), rng.choice((0, 1)))
    p.add("send_sms", 2, t, *ps)
    return [
        'translate "{message}" into {lang} and text it to {people}',
        "send {people} a text in {lang} saying {message}",
    ], p


@_intent("translate_email", 1.0)
def _translate_email(rng: random.Random, s: _Slots) -> tuple[list[str], _Plan]:
    p = _Plan()
    t = p.add("translate_text", 0)
    es = p.lookups("get_email_address", len(s.people(_count(rng))), 1)
    p.add("compose_email", 2, t, *es)
    return [
        'translate "{message}" into {lang} and email it to {people}',
        "email {people} in {lang} that {message}",
    ], p


DEMO_INTENTS: tuple[str, ...] = tuple(i.name for i in _INTENTS)
"""Names of the task templates the demo dataset draws from."""


def _generate(n: int, seed: int) -> list[tuple[str, Demonstration]]:
    """`n` (intent name, demonstration) pairs drawn with `random.Random(seed)`."""
    try:
        count = operator.index(n)
    except TypeError:
        count = 0
    if isinstance(n, bool) or count < 1:
        raise ValueError(f"n must be a positive integer (number of demonstrations), got {n!r}")
    n = count
    rng = random.Random(seed)
    weights = [i.weight for i in _INTENTS]
    width = max(5, len(str(n)))
    out: list[tuple[str, Demonstration]] = []
    for k in range(1, n + 1):
        intent = rng.choices(_INTENTS, weights=weights)[0]
        slots = _Slots(rng)
        paraphrases, plan = intent.build(rng, slots)
        query = _wrap(rng, rng.choice(paraphrases).format_map(slots))
        calls, edges = plan.record(rng)
        demo = Demonstration(query=query, calls=calls, edges=edges, id=f"demo-{k:0{width}d}")
        out.append((intent.name, demo))
    return out


def make_demo_dataset(n: int = 2400, seed: int = 0) -> Dataset:
    """Build the embedded demo dataset: `n` personal-assistant demonstrations.

    Each demonstration is a query drawn from one of `DEMO_INTENTS` (weighted: some intents
    are common, some rare) with slots filled in, and the plan of calls that answers it, with
    its data dependencies as `edges` (calls of one stage, such as contact look-ups, are
    recorded in a shuffled order). No file or network access; fully determined by `seed`.

    Args:
        n: Number of demonstrations (at least 1).
        seed: Seed of the `random.Random` generator that draws everything.

    Returns:
        A `Dataset` named "demo" with source "embedded", the `DEMO_TOOLS` catalogue and
        demonstrations with ids "demo-00001", "demo-00002", ...

    Raises:
        ValueError: If `n` is not a positive integer.
    """
    demos = tuple(demo for _, demo in _generate(n, seed))
    return Dataset(name="demo", tools=Toolset(DEMO_TOOLS), demos=demos, source="embedded")
