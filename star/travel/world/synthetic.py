"""A seeded synthetic world in the TravelPlanner schema.

Built so that a tiny model can learn the task: entity names are short,
unique across the world, and made of plain letters, so each one can be a
single token everywhere it appears (query, tool call, observation, plan).
"""

from __future__ import annotations

import math
import random
from datetime import timedelta

import polars as pl

from star.travel.specs import WorldSpec
from star.travel.world.sandbox import CUISINES, HOUSE_RULES, ROOM_TYPES, SCHEMA, Sandbox

_ONSETS = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z"]
_VOWELS = ["a", "e", "i", "o", "u"]
_CODAS = ["", "n", "r", "l", "s", "m"]
_EXTRA_CUISINES = ("Cafe", "Pizza", "Seafood", "BBQ", "Bakery")
_RESTAURANT_KINDS = ("Grill", "Cafe", "Bistro", "Diner", "Kitchen")
_HOTEL_KINDS = ("Inn", "Lodge", "Suites", "House")
_SIGHT_KINDS = ("Park", "Museum", "Tower", "Garden", "Market")


class _Names:
    """Unique capitalised pseudo-words, drawn without repeats."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: int) -> str:
        while True:
            w = "".join(
                self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS)
                for _ in range(syllables)
            ).capitalize()
            if w not in self.used and len(w) >= 4:
                self.used.add(w)
                return w


def _duration(km: float) -> str:
    minutes = int(round(km / 80.0 * 60))
    return f"{minutes // 60} hours {minutes % 60} mins"


def generate_world(spec: WorldSpec) -> Sandbox:
    """Same spec, same world, byte for byte."""
    rng = random.Random(spec.seed)
    names = _Names(rng)
    states = [names.word(3) for _ in range(spec.states)]
    cities: list[tuple[str, str]] = []
    coords: dict[str, tuple[float, float]] = {}
    for s, state in enumerate(states):
        # States are regions on the map, so in-state trips are drivable.
        cx, cy = rng.uniform(0, spec.map_size_km), rng.uniform(0, spec.map_size_km)
        for _ in range(spec.cities_per_state):
            city = names.word(2)
            cities.append((city, state))
            coords[city] = (cx + rng.uniform(-150, 150), cy + rng.uniform(-150, 150))

    accommodations, restaurants, attractions = [], [], []
    for city, _state in cities:
        x, y = coords[city]
        for _ in range(spec.accommodations_per_city):
            rules = sorted(rng.sample(HOUSE_RULES, rng.randint(0, 2)))
            accommodations.append(
                dict(
                    name=f"{names.word(2)} {rng.choice(_HOTEL_KINDS)}",
                    room_type=rng.choice(ROOM_TYPES),
                    price=rng.randint(*spec.hotel_price),
                    minimum_nights=rng.choice([1, 1, 1, 2, 3]),
                    review_rate=float(rng.randint(2, 5)),
                    house_rules=" & ".join(rules),
                    max_occupancy=rng.randint(1, 8),
                    city=city,
                )
            )
        for _ in range(spec.restaurants_per_city):
            kinds = rng.sample(CUISINES + _EXTRA_CUISINES, rng.randint(1, 3))
            restaurants.append(
                dict(
                    name=f"{names.word(2)} {rng.choice(_RESTAURANT_KINDS)}",
                    city=city,
                    cuisines=", ".join(kinds),
                    cost=rng.randint(*spec.meal_cost),
                    rating=round(rng.uniform(2.5, 5.0), 1),
                )
            )
        for _ in range(spec.attractions_per_city):
            name = f"{names.word(2)} {rng.choice(_SIGHT_KINDS)}"
            attractions.append(
                dict(
                    name=name,
                    latitude=round(y / 111.0, 4),
                    longitude=round(x / 111.0, 4),
                    address=f"1 {name}, {city}",
                    phone="-",
                    website="-",
                    city=city,
                )
            )

    distances, flights = [], []
    dates = [(spec.start_date + timedelta(days=i)).isoformat() for i in range(spec.num_dates)]
    flight_no = 1000
    for a, _sa in cities:
        for b, _sb in cities:
            if a == b:
                continue
            km = round(math.dist(coords[a], coords[b]) * 1.25 + 20, 0)
            distances.append(dict(origin=a, dest=b, duration=_duration(km), distance_km=km))
    # A route has flights both ways or none, so round trips exist by construction.
    for i, (a, _) in enumerate(cities):
        for b, _ in cities[i + 1 :]:
            if rng.random() >= spec.flight_route_prob:
                continue
            km = round(math.dist(coords[a], coords[b]), 0) + 50
            for origin, dest in ((a, b), (b, a)):
                for day in dates:
                    for _ in range(spec.flights_per_route_day):
                        dep = rng.randint(6 * 60, 20 * 60)
                        dur = int(km / 12) + 30
                        arr = (dep + dur) % (24 * 60)
                        flight_no += 1
                        flights.append(
                            dict(
                                flight_number=f"F{flight_no}",
                                price=rng.randint(*spec.flight_price),
                                dep_time=f"{dep // 60:02d}:{dep % 60:02d}",
                                arr_time=f"{arr // 60:02d}:{arr % 60:02d}",
                                elapsed=f"{dur // 60} hours {dur % 60} minutes",
                                date=day,
                                origin=origin,
                                dest=dest,
                                distance=float(km),
                            )
                        )

    def frame(rows: list[dict], table: str) -> pl.DataFrame:
        return pl.DataFrame(rows, schema=SCHEMA[table], orient="row") if rows else pl.DataFrame(schema=SCHEMA[table])

    return Sandbox(
        flights=frame(flights, "flights"),
        distances=frame(distances, "distances"),
        accommodations=frame(accommodations, "accommodations"),
        restaurants=frame(restaurants, "restaurants"),
        attractions=frame(attractions, "attractions"),
        cities=pl.DataFrame({"city": [c for c, _ in cities], "state": [s for _, s in cities]}, schema=SCHEMA["cities"]),
    )


def entity_names(sandbox: Sandbox) -> list[str]:
    """Every proper name in a sandbox (cities, states, places), sorted; rows without a name are left out."""
    names = set(sandbox.cities["city"]) | set(sandbox.cities["state"])
    for table in (sandbox.accommodations, sandbox.restaurants, sandbox.attractions):
        names |= set(table["name"])
    return sorted(name for name in names if name)


def identifiers(sandbox: Sandbox) -> list[str]:
    """Every flight number and flight date of a sandbox, sorted: the ids a plan copies digit by digit."""
    return sorted(set(sandbox.flights["flight_number"]) | set(sandbox.flights["date"]))
