"""Tools on the real TravelPlanner DB, checked against rows read by hand from the CSVs."""


import pytest

from star.travel.world.tools import TravelTools


@pytest.fixture(scope="module")
def tools(real_sandbox):
    return {t.name: t for t in TravelTools(real_sandbox, row_cap=3).as_tools()}


def test_tool_list_is_alphabetical_with_openai_schemas(real_sandbox):
    names = [t.name for t in TravelTools(real_sandbox).as_tools()]
    assert names == sorted(names) == [
        "GoogleDistanceMatrix",
        "SearchAccommodation",
        "SearchAttraction",
        "SearchCity",
        "SearchFlight",
        "SearchRestaurant",
    ]
    schema = TravelTools(real_sandbox).as_tools()[4].schema()
    assert schema["function"]["parameters"]["required"] == ["departure", "destination", "date"]


def test_search_flight_cheapest_first(tools):
    # clean_Flights_2022.csv has four Sarasota -> Chicago flights on 2022-03-22.
    result = tools["SearchFlight"].execute({"departure": "Sarasota", "destination": "Chicago", "date": "2022-03-22"})
    assert result.ok
    assert result.content.splitlines() == [
        "F3984576 | 05:14-06:50 | $279",
        "F3895570 | 15:22-17:15 | $381",
        "F3984575 | 18:54-20:25 | $428",
        "(1 more)",
    ]


def test_distance_costs(tools):
    # Detroit,Norfolk,,10 hours 55 mins,"1,144 km"
    taxi = tools["GoogleDistanceMatrix"].execute({"departure": "Detroit", "destination": "Norfolk", "mode": "taxi"})
    drive = tools["GoogleDistanceMatrix"].execute({"departure": "Detroit", "destination": "Norfolk", "mode": "self-driving"})
    assert taxi.content == "taxi Detroit to Norfolk: 10 hours 55 mins, 1144 km, $1144"
    assert drive.content.endswith("$57")  # int(1144 * 0.05)
    # Hartford,Denver takes "1 day 3 hours": no valid route, as in the official tool
    far = tools["GoogleDistanceMatrix"].execute({"departure": "Hartford", "destination": "Denver", "mode": "taxi"})
    assert far.kind == "empty" and "No taxi route" in far.content


def test_restaurants_accommodation_attractions_cities(tools):
    food = tools["SearchRestaurant"].execute({"city": "Binghamton"}).content.splitlines()
    assert food[0] == "Hoot | Bakery, Mexican, Indian, Fast Food | $10"
    assert food[1] == "Punjabi Chaap Corner | French, Cafe, Seafood | $12"
    assert food[-1] == "(30 more)"  # 33 restaurants in Binghamton
    stay = tools["SearchAccommodation"].execute({"city": "Laredo"}).content
    assert stay.splitlines()[0] == (
        "Lambe’s Vacation Rentals- Maspeth, Queens | Entire home/apt | $164 | min 4 nights | max 3 people"
        " | rules: No smoking & No pets"
    )
    sights = tools["SearchAttraction"].execute({"city": "San Diego"}).content.splitlines()
    assert sights[:2] == ["Cabrillo National Monument", "La Jolla Shores Park"]
    texas = tools["SearchCity"].execute({"state": "Texas"}).content.split(", ")
    assert len(texas) == 23 and "Laredo" in texas and texas == sorted(texas)
    assert tools["SearchRestaurant"].execute({"city": "Dallas(Texas)"}).ok


@pytest.mark.parametrize(
    "name, args, expect",
    [
        ("SearchFlight", {"departure": "Atlantis", "destination": "Chicago", "date": "2022-03-22"}, "unknown departure city 'Atlantis'"),
        ("SearchFlight", {"departure": "Sarasota", "destination": "Chicago", "date": "22/03/2022"}, "bad date"),
        ("SearchFlight", {"departure": "Sarasota", "destination": "Chicago", "date": "2023-01-01"}, "outside 2022-03-01 to 2022-03-31"),
        ("SearchFlight", {"departure": "Sarasota", "destination": "Chicago"}, "needs argument 'date'"),
        ("SearchRestaurant", {"city": 7}, "must be a string"),
        ("SearchRestaurant", {"town": "Dallas"}, "needs argument 'city'"),
        ("SearchRestaurant", [], "must be a JSON object"),
        ("SearchCity", {"state": "Narnia"}, "unknown state 'Narnia'"),
        ("GoogleDistanceMatrix", {"departure": "Dallas", "destination": "Austin", "mode": "walking"}, "mode must be"),
    ],
)
def test_bad_calls_are_error_observations(tools, name, args, expect):
    result = tools[name].execute(args)
    assert not result.ok and result.kind == "invalid"
    assert result.content.startswith("Error:") and expect in result.content


def test_no_rows_is_a_plain_observation(tools):
    result = tools["SearchFlight"].execute({"departure": "Sarasota", "destination": "Laredo", "date": "2022-03-22"})
    assert result.ok and result.kind == "empty"
    assert result.content == "No flights from Sarasota to Laredo on 2022-03-22."


def test_observations_are_deterministic(real_sandbox):
    a = TravelTools(real_sandbox).as_tools()[5].execute({"city": "Dallas"}).content
    b = TravelTools(real_sandbox).as_tools()[5].execute({"city": "Dallas"}).content
    assert a == b


def test_system_prompt_lists_every_tool_with_its_required_arguments(real_sandbox):
    from star.travel.env import SYSTEM_PROMPT

    listed = SYSTEM_PROMPT.split("Tools: ")[1]
    for tool in TravelTools(real_sandbox).as_tools():
        args = ", ".join(a for a in tool.parameters["properties"] if a in tool.parameters["required"])
        assert f"{tool.name}{{{args}}}" in listed
