import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from star.travel.plans.format import format_itinerary, format_rules, render_itinerary
from star.travel.plans.format_check import check_row
from star.travel.plans.format_llm import format_llm
from star.travel.plans.plan import Day, Plan
from star.travel.world.query import Query


def make_query(days: int = 3, org: str = "Aldmoor", dest: str = "Brint", idx: int = 7) -> Query:
    return Query(
        idx=idx,
        org=org,
        dest=dest,
        days=days,
        visiting_city_number=1,
        date=[f"2022-03-{10 + i}" for i in range(days)],
        people_number=1,
        budget=1500,
        query=f"A {days}-day trip from {org} to {dest}.",
    )


SINGLE_CITY = Plan(
    idx=1,
    days=[
        Day(
            days=1,
            current_city="from Aldmoor to Brint",
            transportation="Flight Number: F0012, from Aldmoor to Brint",
            breakfast="-",
            attraction="Old Mill, Brint;Harbor Park, Brint;",
            lunch="Lotus Cafe, Brint",
            dinner="Blue Fork, Brint",
            accommodation="Sea Inn, Brint",
        ),
        Day(
            days=2,
            current_city="Brint",
            transportation="-",
            breakfast="Dawn Bakery, Brint",
            attraction="Glass Museum, Brint;",
            lunch="Green Bowl, Brint",
            dinner="Harbor Grill, Brint",
            accommodation="Sea Inn, Brint",
        ),
        Day(
            days=3,
            current_city="from Brint to Aldmoor",
            transportation="Self-driving, from Brint to Aldmoor",
            # Breakfast before leaving: in the origin city, not the default.
            breakfast="Dawn Bakery, Brint",
            attraction="-",
            lunch="Pier Diner, Aldmoor",
            dinner="-",
            accommodation="-",
        ),
    ],
)

MULTI_CITY = Plan(
    idx=2,
    days=[
        Day(1, "from St. Cloud to Brint", "Flight Number: F7Q2, from St. Cloud to Brint", "-",
            "Old Mill, Brint;", "Lotus Cafe, Brint", "Blue Fork, Brint", "Sunny, quiet loft, Brint"),
        Day(2, "Brint", "-", "Dawn Bakery, Brint", "Harbor Park, Brint;Glass Museum, Brint;",
            "Green Bowl, Brint", "Harbor Grill, Brint", "Sunny, quiet loft, Brint"),
        Day(3, "from Brint to Cove City", "Taxi, from Brint to Cove City", "Dawn Bakery, Brint",
            "Tide Pools, Cove City;", "Shell Shack, Cove City", "Salt & Pepper, Cove City", "Cove Lodge, Cove City"),
        # A transport whose route differs from the day's header keeps its route.
        Day(4, "Cove City", "Taxi, from Cove City to Dell", "-", "Dell Falls, Dell;", "-",
            "Night Owl, Cove City", "Cove Lodge, Cove City"),
        Day(5, "from Cove City to St. Cloud", "Flight Number: F0099, from Cove City to St. Cloud", "-", "-",
            "-", "-", "-"),
    ],
)

EMPTY_FIELDS = Plan(
    idx=3,
    days=[
        Day(1, "from Aldmoor to Brint"),
        Day(2, "Brint", attraction="Old Mill, Brint;"),
        Day(3, "-"),
    ],
)


@pytest.mark.parametrize("plan", [SINGLE_CITY, MULTI_CITY, EMPTY_FIELDS], ids=["single", "multi", "empty"])
def test_round_trip(plan: Plan) -> None:
    text = render_itinerary(plan)
    parsed = format_rules(text, idx=plan.idx)
    assert parsed.error is None
    assert parsed.days == plan.days


def test_render_is_terse() -> None:
    text = render_itinerary(SINGLE_CITY)
    assert text.splitlines()[:7] == [
        "Day 1: from Aldmoor to Brint",
        "Transport: Flight F0012",
        "Breakfast: -",
        "Attractions: Old Mill; Harbor Park",
        "Lunch: Lotus Cafe",
        "Dinner: Blue Fork",
        "Stay: Sea Inn",
    ]
    # A city that is not the day's default is written out.
    assert "Breakfast: Dawn Bakery, Brint" in text.split("Day 3:")[1]
    assert "Transport: Self-driving" in text.split("Day 3:")[1]
    assert "Transport: Taxi, from Cove City to Dell" in render_itinerary(MULTI_CITY)


def test_round_trip_with_query_keeps_query_fields() -> None:
    query = make_query()
    parsed = format_rules(render_itinerary(SINGLE_CITY), query)
    assert parsed.idx == 7 and parsed.query == query.query
    assert parsed.days == SINGLE_CITY.days
    assert parsed.delivered


NOISY = """Sure! Here is the itinerary you asked for.

<answer>
**DAY 1:** FROM aldmoor TO brint
- **Transportation**:   flight number: F0012
* attraction :  Old Mill ;harbor park, BRINT ;
- Lunch:Lotus Cafe
- Accommodation: Sea Inn
-   Breakfast:   none

### day2 - Brint
1. Dinner: Harbor Grill
2. Hotel: Sea Inn
3. Attractions: Glass Museum

Day3:from Brint to Aldmoor
Breakfast: Dawn Bakery, brint
Transport: self driving
Lunch:   Pier Diner ,aldmoor
Day 4: Brint
Lunch: Extra Place
</answer>
Enjoy your trip!"""


def test_noisy_itinerary_with_query() -> None:
    plan = format_rules(NOISY, make_query(days=3))
    assert plan.error is None
    assert plan.days == [
        Day(
            days=1,
            current_city="from Aldmoor to Brint",
            transportation="Flight Number: F0012, from Aldmoor to Brint",
            breakfast="-",
            attraction="Old Mill, Brint;harbor park, Brint;",
            lunch="Lotus Cafe, Brint",
            dinner="-",
            accommodation="Sea Inn, Brint",
        ),
        Day(2, "Brint", "-", "-", "Glass Museum, Brint;", "-", "Harbor Grill, Brint", "Sea Inn, Brint"),
        Day(3, "from Brint to Aldmoor", "Self-driving, from Brint to Aldmoor", "Dawn Bakery, Brint", "-",
            "Pier Diner, Aldmoor", "-", "-"),
    ]


def test_noisy_without_query_keeps_extra_days() -> None:
    plan = format_rules(NOISY)
    assert [d.days for d in plan.days] == [1, 2, 3, 4]
    # Without a query a mixed-case spelling elsewhere in the text wins over "aldmoor"/"brint".
    assert plan.days[0].current_city == "from Aldmoor to Brint"
    assert plan.days[3] == Day(4, "Brint", lunch="Extra Place, Brint")


def test_missing_days_are_dash_days() -> None:
    text = "Day 1: from Aldmoor to Brint\nTransport: Taxi\nDay 3: Brint\nStay: Sea Inn"
    plan = format_rules(text, make_query(days=4))
    assert plan.delivered
    assert [d.days for d in plan.days] == [1, 2, 3, 4]
    assert plan.days[0].transportation == "Taxi, from Aldmoor to Brint"
    assert plan.days[1] == Day(2) and plan.days[3] == Day(4)
    assert plan.days[2].accommodation == "Sea Inn, Brint"


def test_last_answer_block_and_revised_day_win() -> None:
    text = (
        "<think>Day 1: Nowhere\nLunch: Draft</think>"
        "<answer>Day 1: Brint\nLunch: Old\nDay 1: Brint\nLunch: New</answer>"
    )
    plan = format_rules(text)
    assert plan.days == [Day(1, "Brint", lunch="New, Brint")]


def test_header_variants_and_field_city() -> None:
    for header in ["Day1", "day 1 -", "DAY 1:", "**Day 1**", "## Day 1.", "- Day 1 |"]:
        text = f"{header}\nCurrent City: from Aldmoor to Brint\nStay: Sea Inn"
        plan = format_rules(text)
        assert plan.days == [
            Day(1, "from Aldmoor to Brint", accommodation="Sea Inn, Brint")
        ], header


def test_prose_mentioning_a_day_is_not_a_header() -> None:
    text = "Day 1 will be relaxing.\nLunch: Lotus Cafe"
    plan = format_rules(text)
    assert not plan.delivered and plan.days == []


@pytest.mark.parametrize("text", ["", "no plan here", "Lunch: Lotus Cafe", "<answer></answer>", "Day 0: Brint"])
def test_no_day_is_undelivered(text: str) -> None:
    plan = format_rules(text, make_query())
    assert not plan.delivered
    assert plan.days == [] and plan.error == "no day found in the itinerary"
    assert plan.idx == 7


def test_format_itinerary_dispatch() -> None:
    assert format_itinerary(render_itinerary(SINGLE_CITY)).days == SINGLE_CITY.days
    with pytest.raises(ValueError):
        format_itinerary("Day 1: Brint", kind="magic")  # type: ignore[arg-type]


FRAGMENTS = [
    "Day 1:", "Day 2 -", "day3", "DAY 99999:", "Day 0:", "from", " to ", "Brint", "St. Cloud", "\n", "\n\n",
    "Transport:", "Flight", "Flight Number:", "F0012", "Self-driving", "Taxi", "Breakfast:", "Lunch:",
    "Dinner:", "Stay:", "Hotel:", "Attractions:", ";", ",", "-", "**", "#", "<answer>", "</answer>",
    "->", ":", " ", "none", "Current City:", "é", "\t", "→", "|",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.one_of(st.text(), st.lists(st.sampled_from(FRAGMENTS), max_size=60).map("".join)),
    days=st.one_of(st.none(), st.integers(min_value=1, max_value=7)),
)
def test_rules_never_raise(text: str, days: int | None) -> None:
    query = make_query(days=days) if days else None
    plan = format_rules(text, query)
    assert isinstance(plan, Plan)
    if plan.delivered and query is not None:
        assert [d.days for d in plan.days] == list(range(1, days + 1))
    if not plan.delivered:
        assert plan.error
    assert check_row(plan.to_submission()) == []  # whatever the text, the official reader takes the row


@pytest.mark.parametrize(
    "text",
    [
        "Day 1: from Aldmoor\nStay: Sea Inn",  # a route with no destination
        "Day 1: Aldmoor\nTransport: Flight F1\nStay: Sea Inn",  # a flight with no route
        "Day 1: from Aldmoor to Brint\nTransport: flight number\nStay: Sea Inn",  # no "Flight Number: "
        "Day 1: Brint from here\nStay: Sea Inn",  # "from" in a current city that is not a route
    ],
)
def test_itineraries_the_official_reader_would_reject_are_not_delivered(text: str) -> None:
    plan = format_rules(text, make_query(days=1))
    assert not plan.delivered and plan.error.startswith("breaks the official format")
    assert check_row(plan.to_submission()) == []


WORDS = ["Old", "Mill", "Harbor", "Park", "Lotus", "Cafe", "Blue", "Fork", "Sea", "Inn", "Glass", "Museum", "Ye"]
CITIES = ["Aldmoor", "Brint", "Cove City", "St. Cloud"]
name = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    days = []
    for n in range(1, draw(st.integers(1, 5)) + 1):
        a, b = draw(st.lists(st.sampled_from(CITIES), min_size=2, max_size=2, unique=True))
        travel = draw(st.booleans())
        current = f"from {a} to {b}" if travel else b

        # An entry's city must be one the itinerary names, or its suffix reads as part of the name.
        here = [a, b] if travel else [b]

        def entry() -> str:
            return draw(st.one_of(st.just("-"), name.map(lambda s: f"{s}, {draw(st.sampled_from(here))}")))

        mode = draw(st.sampled_from(["-", "Flight Number: F12, ", "Self-driving, ", "Taxi, "]))
        transport = "-" if mode == "-" else f"{mode}from {a} to {b}"
        attractions = draw(st.lists(name, max_size=3))
        days.append(
            Day(n, current, transport, entry(),
                "".join(f"{x}, {b};" for x in attractions) or "-", entry(), entry(), entry())
        )
    return Plan(idx=0, days=days)


@settings(max_examples=150, deadline=None)
@given(plan=plans())
def test_round_trip_property(plan: Plan) -> None:
    assert format_rules(render_itinerary(plan)).days == plan.days


# ------------------------------------------------------ real database names
# (kind, Day field per layout); restaurants fill the meal a real plan would have.
REAL_TABLES = {
    "accommodations": ("hotel", {"stay": "accommodation", "arrive": "accommodation", "leave": "accommodation"}),
    "restaurants": ("restaurant", {"stay": "lunch", "arrive": "dinner", "leave": "breakfast"}),
    "attractions": ("attraction", {"stay": "attraction", "arrive": "attraction", "leave": "attraction"}),
}


def test_every_real_name_round_trips(real_sandbox) -> None:
    """Name -> the expert's plan entry -> itinerary text -> rules formatter -> the same entry.

    The expert writes an entry as "Name, City" (attractions "Name, City;") and
    renders its answer with `render_itinerary(skip_empty=True)`; the official
    plan fields are "Name, City". Each name is tried on a day in its city, on
    the travel day into it (its city is the default) and on the travel day out
    of it (its city must be written). A name's surrounding spaces are not kept:
    the official evaluation strips them (get_valid_name_city in utils/func.py),
    and so does this project's evaluator.
    """
    from star.travel.plans.plan_text import name_city

    cities = sorted(set(real_sandbox.cities["city"]))
    queries: dict[tuple[str, str], Query] = {}
    failures: list[tuple[str, str, str, str, str]] = []
    checked = 0
    for table, (kind, fields) in REAL_TABLES.items():
        rows = getattr(real_sandbox, table).select("name", "city").unique(maintain_order=True)
        for name, city in rows.iter_rows():
            if name is None or city is None:
                continue
            checked += 1
            # The other end of the trip: the city a trailing ", X" of the name names, when
            # there is one, so that the itinerary knows X as a city (the hard case).
            suffix = name.rpartition(",")[2].strip()
            other = suffix if suffix in cities and suffix != city else cities[cities[0] == city]
            query = queries.get((other, city))
            if query is None:
                query = queries[other, city] = make_query(days=1, org=other, dest=city)
            end = ";" if kind == "attraction" else ""
            want = f"{name.strip()}, {city}{end}"
            layouts = {"stay": city, "arrive": f"from {other} to {city}", "leave": f"from {city} to {other}"}
            for layout, current in layouts.items():
                field = fields[layout]
                plan = Plan(idx=1, days=[Day(1, current, **{field: f"{name}, {city}{end}"})])
                text = render_itinerary(plan, skip_empty=True)
                got = getattr(format_rules(text, query).days[0], field)
                if got != want:
                    failures.append((kind, layout, name, text, got))
            # The evaluator reads back the database name and city.
            assert name_city(want.removesuffix(";"), True) == (name.strip(), city)
    assert checked > 19_000
    assert not failures, f"{len(failures)} of {3 * checked} round trips differ, e.g. {failures[:3]}"


@pytest.mark.parametrize(
    "line, entry",
    [
        ("Stay: **Sea Inn**", "Sea Inn, Brint"),  # emphasis around a whole value is markdown
        ("**Stay:** Sea Inn", "Sea Inn, Brint"),
        ("- **Stay**: `Sea Inn`", "Sea Inn, Brint"),
        ("Stay: **Cozy Space - Private Access**, Brint", "**Cozy Space - Private Access**, Brint"),
        ("Stay: UWS Cozy room***", "UWS Cozy room***, Brint"),
        ("Stay: Home: Cozy, quiet", "Home: Cozy, quiet, Brint"),
        ("Stay: Big\\nRoom", "Big\nRoom, Brint"),
        ("Stay: -, Brint", "-"),
        ("Attractions: Mission Beach Boardwalk | Ocean Front Walk", "Mission Beach Boardwalk | Ocean Front Walk, Brint;"),
        ("Attractions: -, Brint; Old Mill", "-, Brint;Old Mill, Brint;"),  # an attraction named "-"
        ("Attractions: -", "-"),
        ("Lunch: #45", "#45, Brint"),
    ],
)
def test_entries_keep_their_characters(line: str, entry: str) -> None:
    day = format_rules(f"Day 1: Brint\n{line}").days[0]
    key = line.split(":")[0].strip("-* ")
    field = {"Stay": "accommodation", "Attractions": "attraction", "Lunch": "lunch"}[key]
    assert getattr(day, field) == entry


# ------------------------------------------------------------------ llm path

KEY_ENV = "STAR_TEST_FORMAT_KEY"
SECRET = "sk-test-secret-0042"


class FakeOpenAI:
    """A real HTTP server speaking the chat-completions protocol, replying from a script."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, **body})
                fake.auth.append(self.headers.get("Authorization", ""))
                content = fake.replies.pop(0) if fake.replies else "{}"
                reply = {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "m"),
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv(KEY_ENV, SECRET)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    servers: list[FakeOpenAI] = []

    def start(replies: list[str]) -> FakeOpenAI:
        servers.append(FakeOpenAI(replies))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def good_reply(plan: Plan) -> str:
    return json.dumps({"plan": plan.to_submission()["plan"]})


def llm(text: str, query: Query | None, base_url: str, **kw: Any) -> Plan:
    options = {"timeout": 5, "retries": 2, "backoff": 0.01, **kw}
    return format_llm(text, query, base_url=base_url, model="tiny", api_key_env=KEY_ENV, **options)


def test_llm_good_reply(serve: Any) -> None:
    server = serve([good_reply(SINGLE_CITY)])
    query = make_query()
    plan = llm(render_itinerary(SINGLE_CITY), query, server.base_url)
    assert plan.error is None and plan.delivered
    assert plan.days == SINGLE_CITY.days
    assert plan.idx == 7 and plan.query == query.query

    (request,) = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["model"] == "tiny"
    fmt = request["response_format"]
    assert fmt["type"] == "json_schema"
    schema = fmt["json_schema"]["schema"]
    assert "plan" in schema["properties"] and "plan" in schema["required"]
    assert "Old Mill" in request["messages"][-1]["content"]
    assert server.auth == [f"Bearer {SECRET}"]


def test_llm_retries_after_invalid_json(serve: Any, caplog: pytest.LogCaptureFixture) -> None:
    server = serve(["this is not json", good_reply(MULTI_CITY)])
    with caplog.at_level(logging.WARNING):
        plan = format_itinerary(
            render_itinerary(MULTI_CITY), None, kind="llm", base_url=server.base_url, model="tiny",
            api_key_env=KEY_ENV, timeout=5, retries=3, backoff=0.01,
        )
    assert plan.delivered and plan.days == MULTI_CITY.days
    assert len(server.requests) == 2
    assert "attempt 1 failed" in caplog.text
    assert SECRET not in caplog.text


def test_llm_gives_up_on_persistent_garbage(serve: Any) -> None:
    server = serve(["nope", '{"plan": "x"}', '{"days": 1}'])
    plan = llm("Day 1: Brint", None, server.base_url)
    assert not plan.delivered and plan.days == []
    assert "after 3 attempts" in plan.error and "ValidationError" in plan.error
    assert len(server.requests) == 3


def test_llm_dead_server_is_undelivered_quickly(serve: Any, caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with caplog.at_level(logging.DEBUG):
        plan = llm("Day 1: Brint", make_query(), f"http://127.0.0.1:{port}/v1", timeout=1)
    assert time.monotonic() - start < 5
    assert not plan.delivered and plan.days == [] and plan.idx == 7
    assert "after 3 attempts" in plan.error and "APIConnectionError" in plan.error
    assert SECRET not in plan.error and SECRET not in caplog.text
