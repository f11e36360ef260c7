"""The demo dataset as data: its tools, slot values and task templates ("intents").

`dtdr_agents.datasets.synthetic` turns these tables into demonstrations. A tool is
``(name, description, required, parameters)``, each parameter ``(type, description[, extra
JSON-schema keywords])`` with ``string[]`` for a list of strings. An intent is a tool family's
dependency pattern: its weight (how common it is), its plan and its query paraphrases
(``{slot}`` placeholders, filled from `POOLS`; ``{x2}`` is a value different from ``{x}``).

A plan is its steps separated by spaces; a step is
``[label=]tool[*people|*people2]@stage[|stage...][<label,label...]``:

- ``*people``: one call per person the query names (1-3 people; ``*people2``: 1-2), all
  steps of one intent naming the same people;
- ``@1`` the stage (calls of one stage are recorded in a shuffled order); ``@0|1|1`` a stage
  drawn from these choices;
- ``<f,m`` the steps (by label) whose output the call needs: the demonstration's edges.
"""

from __future__ import annotations

from typing import Any, NamedTuple

ToolRow = tuple[str, str, tuple[str, ...], dict[str, tuple[Any, ...]]]


class Intent(NamedTuple):
    """A task template: name, relative frequency, plan steps, query paraphrases."""

    name: str
    weight: float
    plan: str
    paraphrases: tuple[str, ...]


# fmt: off
TOOLS: tuple[ToolRow, ...] = (
    ("get_phone_number",
     "Search the contacts for a person by name and return their phone number.",
     ("name",), {
        "name": ("string", "Full or partial name of the contact."),
    }),
    ("get_email_address",
     "Search the contacts for a person by name and return their email address.",
     ("name",), {
        "name": ("string", "Full or partial name of the contact."),
    }),
    ("compose_email",
     "Compose and send a new email to one or more recipients, optionally with attachments.",
     ("recipients", "subject", "content"), {
        "recipients": ("string[]", "Email addresses of the recipients."),
        "subject": ("string", "Subject line of the email."),
        "content": ("string", "Body text of the email."),
        "attachments": ("string[]", "Paths of files to attach."),
        "cc": ("string[]", "Email addresses to copy."),
    }),
    ("reply_to_email",
     "Reply to the email currently selected in the mail app with the given content.",
     ("content",), {
        "content": ("string", "Body text of the reply."),
        "attachments": ("string[]", "Paths of files to attach to the reply."),
        "cc": ("string[]", "Email addresses to copy."),
    }),
    ("forward_email",
     "Forward the email currently selected in the mail app to other recipients.",
     ("recipients",), {
        "recipients": ("string[]", "Email addresses to forward the email to."),
        "content": ("string", "Optional note added above the forwarded message."),
        "cc": ("string[]", "Email addresses to copy."),
    }),
    ("send_sms",
     "Send a text message (SMS) to one or more phone numbers.",
     ("recipients", "message"), {
        "recipients": ("string[]", "Phone numbers of the recipients."),
        "message": ("string", "Text of the message."),
    }),
    ("create_calendar_event",
     "Create a calendar event with a title, start and end time, and optional invitees.",
     ("title", "start_date", "end_date"), {
        "title": ("string", "Title of the event."),
        "start_date": ("string", "Start date and time, ISO 8601 (YYYY-MM-DD HH:MM)."),
        "end_date": ("string", "End date and time, ISO 8601 (YYYY-MM-DD HH:MM)."),
        "location": ("string", "Where the event takes place."),
        "invitees": ("string[]", "Email addresses of the people to invite."),
        "notes": ("string", "Notes or agenda attached to the event."),
    }),
    ("get_calendar_events", "List the events on the user's calendar for a given day.", ("date",), {
        "date": ("string", "The day to list, ISO 8601 (YYYY-MM-DD)."),
    }),
    ("create_zoom_meeting",
     "Create a Zoom meeting and return its join link.",
     ("topic", "start_time", "duration_minutes"), {
        "topic": ("string", "Topic of the meeting."),
        "start_time": ("string", "Start date and time, ISO 8601 (YYYY-MM-DD HH:MM)."),
        "duration_minutes": ("integer", "Length of the meeting in minutes.", {"minimum": 1}),
        "invitees": ("string[]", "Email addresses of the participants."),
    }),
    ("create_note",
     "Create a new note with the given title and content in the notes app.",
     ("name", "content"), {
        "name": ("string", "Title of the new note."),
        "content": ("string", "Text of the note."),
        "folder": ("string", "Folder to create the note in; the default folder if empty."),
    }),
    ("open_note", "Open an existing note by its title and return its content.", ("name",), {
        "name": ("string", "Title of the note."),
        "folder": ("string", "Folder that holds the note."),
    }),
    ("append_note_content",
     "Append text to the end of an existing note.",
     ("name", "append_content"), {
        "name": ("string", "Title of the note."),
        "append_content": ("string", "Text to append."),
        "folder": ("string", "Folder that holds the note."),
    }),
    ("create_reminder",
     "Create a reminder with an optional due date, notes and priority.",
     ("name",), {
        "name": ("string", "What to be reminded of."),
        "due_date": ("string", "Due date and time, ISO 8601 (YYYY-MM-DD HH:MM)."),
        "notes": ("string", "Extra notes stored with the reminder."),
        "list_name": ("string", "Reminder list to add it to."),
        "priority": ("integer", "0 for none, 1 high, 5 medium, 9 low.", {"enum": [0, 1, 5, 9]}),
        "all_day": ("boolean", "Whether it is an all-day item."),
    }),
    ("open_file",
     "Find a file on the device by name or path, open it, and return its full path.",
     ("name_or_path",), {
        "name_or_path": ("string", "File name or path to look for."),
    }),
    ("summarize_pdf",
     "Summarize the content of a PDF file and return the summary text.",
     ("pdf_path",), {
        "pdf_path": ("string", "Path of the PDF file."),
        "max_words": ("integer", "Maximum summary length."),
    }),
    ("translate_text",
     "Translate a piece of text into a target language.",
     ("text", "target_language"), {
        "text": ("string", "Text to translate."),
        "target_language": ("string", "Language to translate into, e.g. 'French'."),
    }),
    ("maps_open_location", "Show a place or address in the maps app.", ("location",), {
        "location": ("string", "Name or address of the place."),
    }),
    ("maps_show_directions",
     "Show directions and travel time between two locations in the maps app.",
     ("start_location", "end_location"), {
        "start_location": ("string", "Where the trip starts."),
        "end_location": ("string", "Where the trip ends."),
        "transport": (
            "string", "Means of travel.", {"enum": ["driving", "walking", "transit", "cycling"]}
        ),
    }),
    ("get_current_location", "Return the device's current location as an address.", (), {}),
    ("get_weather", "Get the weather forecast for a location and day.", ("location",), {
        "location": ("string", "City or address."),
        "date": ("string", "Day of the forecast, ISO 8601 (YYYY-MM-DD); today if empty."),
    }),
    ("web_search",
     "Search the web and return the top results with titles, links and snippets.",
     ("query",), {
        "query": ("string", "The search query."),
        "num_results": ("integer", "How many results to return."),
    }),
)
# fmt: on
"""The demo catalogue: 21 personal-assistant tools in the style of TinyAgent."""

PEOPLE = (
    "Alice", "Bob", "Carol", "Dave", "Emma", "Frank", "Grace", "Hector", "Ines", "Jamal",
    "Kenji", "Laura", "Miguel", "Nadia", "Omar", "Priya", "Quentin", "Rosa", "Sam", "Tara",
    "Umar", "Vera", "Wei", "Yusuf", "Zoe", "Dr. Patel", "Professor Klein", "Mom", "Uncle Joe",
    "Sarah Chen", "Liam O'Brien", "Maya Gupta", "Noah Smith", "Olivia Brown", "Lucas Rossi",
    "Hannah Weber", "Ethan Park", "Sofia Alvarez",
)  # fmt: skip
PDF_STEMS = (
    "ResearchPaper", "Q3_Report", "Project Proposal", "Lease Agreement", "TravelGuide",
    "Meeting Minutes 2024-05-02", "Invoice_4471", "Course Syllabus", "Thesis Draft v3",
    "Budget2025", "Onboarding Handbook", "Quarterly Review", "Grant Application",
    "Insurance Policy", "Conference Program", "Annual Report 2023", "User Study Results",
    "Product Roadmap", "Contract_Acme", "Paper_Review_Notes", "Tax Return 2023",
    "Marketing Plan", "Design Spec", "Lab Safety Manual",
)  # fmt: skip
DOCS = (
    "slides.pptx", "Budget.xlsx", "ProjectPlan.docx", "resume.pdf", "headshot.jpg",
    "Agenda.docx", "expenses_march.xlsx", "Release Notes.md", "floorplan.png",
    "Pitch Deck.key", "cover_letter.docx", "itinerary.pdf", "photos.zip", "Draft Chapter 2.docx",
)  # fmt: skip
NOTES = (
    "Research Notes", "Project Ideas", "Vacation Plans", "Meeting Notes", "Reading List",
    "Weekly Log", "Book Club", "Grocery List", "Team Updates", "Thesis", "Gift Ideas",
    "Recipes", "Client Feedback", "Daily Journal", "Course Notes", "House Hunting",
)  # fmt: skip
FOLDERS = ("Academic", "Work", "Travel", "Personal", "Ideas", "Finance", "Projects", "Family")
WHEN = (
    "tomorrow at 3 PM", "next Monday at 10 AM", "on Friday at 2:30 PM", "on March 14 at 9:00",
    "this Thursday at noon", "tomorrow morning at 8", "next Tuesday at 4 PM",
    "on June 3rd at 11 AM", "tonight at 7", "the day after tomorrow at 1 PM",
    "next Wednesday at 9:30", "on the 21st at 5 PM",
)  # fmt: skip
DAYS = (
    "today", "tomorrow", "next Monday", "this Friday", "on June 3rd", "next Tuesday",
    "this weekend", "on the 14th",
)  # fmt: skip
DAY_NOUNS = (
    "today", "tomorrow", "next Monday", "this Friday", "June 3rd", "next Tuesday",
    "this weekend", "the 14th",
)  # fmt: skip
PLACES = (
    "Golden Gate Park", "the Ferry Building", "SFO Airport", "Stanford University",
    "Union Square", "The Peninsula, New York", "the Blue Bottle Coffee on Mint Plaza",
    "Central Station", "the Museum of Modern Art", "Oakland Coliseum", "Pier 39",
    "the downtown public library", "Mission Dolores Park", "the office", "Berkeley Marina",
    "Whole Foods on 4th Street",
)  # fmt: skip
CITIES = (
    "San Francisco", "Seattle", "Boston", "Chicago", "London", "Paris", "Tokyo", "Berlin",
    "Austin", "Denver", "Lisbon", "Toronto",
)  # fmt: skip
TOPICS = (
    "quarterly planning", "the product launch", "the budget review", "the hiring pipeline",
    "the design critique", "the research proposal", "the marketing campaign", "the Q3 results",
    "next week's offsite", "the client onboarding", "the thesis defense", "the kitchen remodel",
    "the conference talk", "the vendor contract",
)  # fmt: skip
SUBJECTS = (
    "Research Summary", "Quick update", "Action items", "Project status", "Notes from today",
    "Reading for Monday", "Follow-up", "Trip details", "Budget numbers", "Heads up",
)  # fmt: skip
SEARCHES = (
    "the best hiking trails near Lake Tahoe", "the latest Python release notes",
    "how to renew a passport", "reviews of the new Pixel phone", "vegetarian lasagna recipes",
    "flights from SFO to Boston in May", "the opening hours of the science museum",
    "tips for a good conference talk", "the history of the Golden Gate Bridge",
    "cheap hotels near Union Square", "how transformers work in machine learning",
    "upcoming jazz concerts this month",
)  # fmt: skip
LANGS = ("French", "Spanish", "German", "Japanese", "Italian", "Portuguese", "Mandarin")
TASKS = (
    "pay the electricity bill", "call the dentist", "renew the car insurance",
    "submit the expense report", "water the plants", "book flights for the conference",
    "pick up the dry cleaning", "send the invoice", "review the pull request",
    "buy a birthday present for Mom", "back up the laptop", "prepare the slides",
)  # fmt: skip
MESSAGES = (
    "I'm running 10 minutes late", "the meeting moved to 4 PM", "dinner is at 7 tonight",
    "the report is ready for review", "I landed safely", "we need to reschedule Friday",
    "the package arrived", "I'll bring the snacks", "the slides are in the shared folder",
    "happy birthday", "the contract is signed", "I'm on my way",
)  # fmt: skip
DURATIONS = ("15-minute", "30-minute", "45-minute", "1-hour", "90-minute")
TRANSPORT = ("driving", "walking", "transit", "cycling")

POOLS: dict[str, tuple[str, ...]] = {
    "person": PEOPLE,
    "folder": FOLDERS,
    "note": NOTES,
    "when": WHEN,
    "day": DAYS,
    "dayn": DAY_NOUNS,
    "place": PLACES,
    "city": CITIES,
    "topic": TOPICS,
    "subject": SUBJECTS,
    "search": SEARCHES,
    "lang": LANGS,
    "task": TASKS,
    "message": MESSAGES,
    "duration": DURATIONS,
    "transport": TRANSPORT,
    "doc": DOCS,
}
"""Slot values by slot name (``{pdf}`` is drawn from `PDF_STEMS`)."""

WRAPPERS: tuple[tuple[str, float], ...] = (
    ("{C}.", 6.0),
    ("Please {c}.", 2.0),
    ("Can you {c}?", 1.0),
    ("Could you {c}?", 1.0),
    ("{C}, please.", 1.0),
    ("I need you to {c}.", 0.5),
    ("Hey, {c}.", 0.5),
)
"""Politeness forms of a query (``{C}``/``{c}``: the clause capitalised or not), weighted."""

# fmt: off
INTENTS: tuple[Intent, ...] = (
    Intent("email_people", 9.0, "es=get_email_address*people@0 compose_email@1<es", (
        "email {people} about {topic}",
        "send an email to {people} saying {message}",
        'compose an email to {people} with the subject "{subject}" about {topic}',
        "let {people} know by email that {message}",
        "drop {people} a quick email about {topic}",
        "write an email to {people} telling them {message}",
    )),
    Intent("sms_people", 8.0, "ps=get_phone_number*people@0 send_sms@1<ps", (
        "text {people}: {message}",
        "send a text message to {people} saying {message}",
        "message {people} that {message}",
        "send an SMS to {people} letting them know {message}",
        "shoot {people} a text that {message}",
    )),
    Intent("phone_lookup", 1.0, "get_phone_number*people2@0", (
        "look up the phone number of {people}",
        "find the mobile number for {people}",
        "get me the phone number for {people} from my contacts",
    )),
    Intent("email_lookup", 1.0, "get_email_address*people2@0", (
        "look up the email address of {people}",
        "find the email for {people} in my contacts",
        "get me the email address for {people}",
    )),
    Intent("email_and_text", 2.0, (
        "es=get_email_address*people2@0 ps=get_phone_number*people2@0 compose_email@1<es "
        "send_sms@1<ps"), (
        "email and text {people} that {message}",
        "let {people} know that {message}, both by email and by SMS",
        "send {people} an email and a text saying {message}",
    )),
    Intent("forward_email", 2.5, "es=get_email_address*people@0 forward_email@1<es", (
        "forward this email to {people}",
        'forward the selected email to {people} with the note "{message}"',
        "pass the current email along to {people}",
        "send this email on to {people}",
    )),
    Intent("reply_simple", 1.5, "reply_to_email@0", (
        "reply to the current email saying {message}",
        "respond to this email: {message}",
        "write back to the selected email that {message}",
    )),
    Intent("reply_with_file", 2.0, "f=open_file@0 reply_to_email@1<f", (
        "reply to this email with {doc} attached",
        "respond to the current email and attach {doc}",
        "answer the selected email saying {message} and include {doc}",
    )),
    Intent("reply_and_reminder", 1.5, "reply_to_email@0 create_reminder@0", (
        "reply to the selected email that {message} and remind me to {task} {when}",
        "respond to this email saying {message}, then create a reminder to {task} {when}",
    )),
    Intent("pdf_summarize_only", 2.0, "f=open_file@0 summarize_pdf@1<f", (
        "summarize {pdf}",
        "give me a summary of {pdf}",
        "open {pdf} and tell me what it says in a few sentences",
        "pull out the key points of {pdf}",
    )),
    Intent("pdf_summary_append_note", 6.0, (
        "f=open_file@0 m=summarize_pdf@1<f append_note_content@2<m"), (
        'summarize {pdf} and append the summary to my note "{note}"',
        'add a summary of {pdf} to the "{note}" note in the {folder} folder',
        'open {pdf}, summarize it and append the key points to "{note}"',
        "summarize the {pdf} document and add it to my {note} note",
        "save a summary of {pdf} in my {note} note",
    )),
    Intent("pdf_summary_new_note", 4.0, "f=open_file@0 m=summarize_pdf@1<f create_note@2<m", (
        'summarize {pdf} and save the summary as a new note called "{note}"',
        'create a note named "{note}" in {folder} containing a summary of {pdf}',
        'open {pdf}, summarize it, and put the summary in a new note titled "{note}"',
        'make a new note "{note}" with the main points of {pdf}',
        "save a summary of {pdf} in a note",
    )),
    Intent("pdf_summary_email", 7.0, (
        "f=open_file@0 m=summarize_pdf@1<f es=get_email_address*people@2 compose_email@3<f,m,es"), (
        "summarize {pdf} and email the summary to {people}",
        "send {people} a summary of {pdf} by email",
        "summarize {pdf} and send it to {people}",
        "open {pdf}, summarize it and email {people} the summary with the PDF attached",
        'email {people} the key points of {pdf} with the subject "{subject}"',
    )),
    Intent("pdf_summary_sms", 3.0, (
        "f=open_file@0 m=summarize_pdf@1<f ps=get_phone_number*people@2 send_sms@3<m,ps"), (
        "summarize {pdf} and text the summary to {people}",
        "summarize {pdf} and send it to {people}",
        "send {people} a text with the main points of {pdf}",
        "open {pdf} and message {people} a short summary of it",
    )),
    Intent("pdf_summary_note_and_email", 4.0, (
        "f=open_file@0 m=summarize_pdf@1<f append_note_content@2<m es=get_email_address*people@2 "
        "compose_email@3<f,m,es"), (
        'summarize {pdf}, append the summary to "{note}" in the {folder} folder, then compose an '
        'email with the subject "{subject}" and attach the PDF to send to {people}',
        'add the summary of {pdf} to my "{note}" note and also send it to {people} by email',
        "summarize {pdf} and append it to {note}, then email {people} with the PDF attached",
        "save a summary of {pdf} in my {note} note and email it to {people}",
    )),
    Intent("pdf_summary_reminder", 2.0, "f=open_file@0 m=summarize_pdf@1<f create_reminder@2<m", (
        "summarize {pdf} and create a reminder to review it {when}",
        "remind me {when} to go over {pdf}, with its summary in the reminder notes",
        "open {pdf}, summarize it and set a reminder for {when} with the summary",
    )),
    Intent("pdf_summary_meeting", 2.5, (
        "f=open_file@0 m=summarize_pdf@1<f es=get_email_address*people@2 "
        "create_calendar_event@3<m,es"), (
        "summarize {pdf} and schedule a meeting with {people} {when} to discuss it, with the "
        "summary in the invite",
        "set up a calendar event {when} with {people} to review {pdf} and add its summary to the "
        "notes",
        "book a meeting {when} with {people} about {pdf} and include a summary of the document",
    )),
    Intent("pdf_summary_translate_email", 1.5, (
        "f=open_file@0 m=summarize_pdf@1<f t=translate_text@2<m es=get_email_address*people@2 "
        "compose_email@3<f,t,es"), (
        "summarize {pdf}, translate the summary into {lang} and email it to {people}",
        "send {people} a {lang} translation of the summary of {pdf}",
        "email {people} the summary of {pdf} in {lang}",
    )),
    Intent("file_email_attachment", 4.0, (
        "f=open_file@0 es=get_email_address*people@0|1|1 compose_email@2<f,es"), (
        "email {doc} to {people}",
        "send {people} the file {doc} as an email attachment",
        'attach {doc} to an email to {people} with the subject "{subject}"',
        "share {doc} with {people} over email",
        "send {doc} to {people}",
    )),
    Intent("trip_note", 1.0, (
        "maps_open_location@0 f=open_file@1 m=summarize_pdf@2<f append_note_content@3<m"), (
        'open the location "{place}" in Maps and append the summary of {pdf} to the note "{note}"'
        " in the {folder} folder",
        "show {place} on the map and add a summary of {pdf} to my {note} note",
    )),
    Intent("calendar_simple", 2.5, "create_calendar_event@0", (
        'add "{subject}" to my calendar {when}',
        "create a calendar event for {topic} {when} at {place}",
        "block my calendar {when} for {topic}",
        "put {topic} on my calendar {when}",
    )),
    Intent("calendar_with_invitees", 5.0, (
        "es=get_email_address*people@0 create_calendar_event@1<es"), (
        "schedule a meeting with {people} {when} about {topic}",
        'create a calendar event "{subject}" {when} and invite {people}',
        "put a meeting about {topic} with {people} on my calendar {when}",
        "book time {when} with {people} for {topic} at {place}",
    )),
    Intent("calendar_and_reminder", 2.0, "create_calendar_event@0 create_reminder@0", (
        "put {topic} on my calendar {when} and remind me to {task} the day before",
        'create an event "{subject}" {when} and a reminder to {task}',
    )),
    Intent("zoom_invite_calendar", 4.0, (
        "es=get_email_address*people@0 z=create_zoom_meeting@1<es create_calendar_event@2<z,es"), (
        "set up a {duration} Zoom meeting with {people} {when} about {topic}",
        "schedule a Zoom call {when} with {people} to discuss {topic} and put it on my calendar",
        "create a Zoom meeting on {topic} with {people} {when} and add it to the calendar",
        "invite {people} to a {duration} Zoom about {topic} {when}",
    )),
    Intent("zoom_sms_link", 2.0, (
        "z=create_zoom_meeting@0 ps=get_phone_number*people@0|1 send_sms@2<z,ps"), (
        "create a Zoom meeting {when} about {topic} and text the link to {people}",
        "send {people} a Zoom link for {when} by SMS",
        "set up a {duration} Zoom call {when} and message the link to {people}",
    )),
    Intent("agenda_only", 2.0, "get_calendar_events@0", (
        "show me my calendar for {dayn}",
        "list my events {day}",
        "check what meetings I have {day}",
    )),
    Intent("agenda_sms", 2.0, (
        "c=get_calendar_events@0 ps=get_phone_number*people@1 send_sms@2<c,ps"), (
        "check my calendar for {dayn} and text {people} what I have going on",
        "look at my schedule {day} and send it to {people} by text",
        "send {people} my agenda for {dayn}",
    )),
    Intent("agenda_email", 1.5, (
        "c=get_calendar_events@0 es=get_email_address*people@1 compose_email@2<c,es"), (
        "email {people} my schedule for {dayn}",
        "send {people} my agenda for {dayn}",
        "check my calendar {day} and email the list of events to {people}",
    )),
    Intent("directions_from_here", 4.0, "l=get_current_location@0 maps_show_directions@1<l", (
        "give me directions to {place} from where I am",
        "show me how to get to {place} from my current location",
        "navigate to {place} by {transport}",
        "find the {transport} route from here to {place}",
    )),
    Intent("eta_sms", 2.0, (
        "l=get_current_location@0 d=maps_show_directions@1<l ps=get_phone_number*people@2 "
        "send_sms@3<d,ps"), (
        "find the route from my location to {place} and text {people} how long it will take",
        "check how long it takes to get to {place} from here and let {people} know by text",
        "get directions from here to {place} and send the travel time to {people}",
    )),
    Intent("directions_between", 2.5, "maps_show_directions@0", (
        "show directions from {place} to {place2}",
        "get {transport} directions from {place} to {place2}",
        "show me the route between {place} and {place2}",
    )),
    Intent("directions_share_sms", 2.0, (
        "d=maps_show_directions@0 ps=get_phone_number*people@0|1 send_sms@2<d,ps"), (
        "get directions from {place} to {place2} and text them to {people}",
        "send {people} the route from {place} to {place2} by SMS",
    )),
    Intent("open_location", 2.5, "maps_open_location@0", (
        "open {place} in Maps",
        "show me {place} on the map",
        "find {place} in Apple Maps",
    )),
    Intent("weather_only", 2.0, "get_weather@0", (
        "check the weather in {city} {day}",
        "get the forecast for {city} {day}",
        "tell me whether it will rain in {city} {day}",
    )),
    Intent("weather_here", 1.5, "l=get_current_location@0 get_weather@1<l", (
        "check the weather where I am {day}",
        "get the forecast for my current location",
        "tell me if I need an umbrella here {day}",
    )),
    Intent("weather_and_directions", 1.5, "get_weather@0 maps_show_directions@0", (
        "check the weather at {place} {day} and get {transport} directions there from {place2}",
        "show me the route from {place2} to {place} and the forecast there for {dayn}",
    )),
    Intent("weather_sms", 1.5, "w=get_weather@0 ps=get_phone_number*people@1 send_sms@2<w,ps", (
        "check the weather in {city} {day} and text it to {people}",
        "let {people} know by text what the weather will be in {city} {day}",
    )),
    Intent("web_search_only", 2.0, "web_search@0", (
        "search the web for {search}",
        "google {search}",
        "find information about {search}",
        "look up {search}",
    )),
    Intent("search_new_note", 2.5, "w=web_search@0 create_note@1<w", (
        'search the web for {search} and save what you find in a new note called "{note}"',
        "look up {search} and create a note with the results",
        "look up {search} and save the results in a note",
    )),
    Intent("search_append_note", 2.0, "w=web_search@0 append_note_content@1<w", (
        'look up {search} and add the results to my "{note}" note',
        "search for {search} and append the best links to {note}",
        "look up {search} and save the results in my {note} note",
    )),
    Intent("search_email", 2.0, (
        "w=web_search@0 es=get_email_address*people@0|1|1 compose_email@2<w,es"), (
        "search for {search} and email the results to {people}",
        "look up {search} and send what you find to {people}",
        "find {search} online and email the links to {people}",
    )),
    Intent("search_sms", 1.5, "w=web_search@0 ps=get_phone_number*people@1 send_sms@2<w,ps", (
        "look up {search} and text the results to {people}",
        "look up {search} and send what you find to {people}",
    )),
    Intent("open_note_only", 1.5, "open_note@0", (
        'open the note "{note}"',
        "show me my {note} note",
        "pull up {note} from the {folder} folder",
    )),
    Intent("open_note_email", 2.0, (
        "o=open_note@0 es=get_email_address*people@1 compose_email@2<o,es"), (
        'open my "{note}" note and email its contents to {people}',
        "send {people} my {note} note by email",
        "share the {note} note with {people}",
    )),
    Intent("create_note_only", 1.5, "create_note@0", (
        'create a new note titled "{note}" in {folder} saying {message}',
        'jot down "{message}" in a new note',
    )),
    Intent("append_note_only", 1.5, "append_note_content@0", (
        'add "{message}" to my {note} note',
        'append "{task}" to the note "{note}" in {folder}',
    )),
    Intent("note_and_reminder", 2.0, "create_note@0 create_reminder@0", (
        'jot down a note "{note}" saying {message} and set a reminder to {task} {when}',
        'create a note called "{note}" and remind me {when} to {task}',
    )),
    Intent("reminder_only", 2.5, "create_reminder@0", (
        "remind me to {task} {when}",
        "set a reminder {when} to {task}",
        "create a high-priority reminder to {task}",
        "add {task} to my reminders",
    )),
    Intent("multi_reminders", 1.5, "create_reminder@0 create_reminder@0", (
        "remind me to {task} {when} and to {task2} {when2}",
        "set two reminders: {task} {when}, and {task2} {when2}",
        "create reminders to {task} and to {task2}",
    )),
    Intent("translate_sms", 1.5, (
        "t=translate_text@0 ps=get_phone_number*people@0|1 send_sms@2<t,ps"), (
        'translate "{message}" into {lang} and text it to {people}',
        "send {people} a text in {lang} saying {message}",
    )),
    Intent("translate_email", 1.0, (
        "t=translate_text@0 es=get_email_address*people@1 compose_email@2<t,es"), (
        'translate "{message}" into {lang} and email it to {people}',
        "email {people} in {lang} that {message}",
    )),
)
# fmt: on
"""The task templates, in the order the generator draws from them."""
