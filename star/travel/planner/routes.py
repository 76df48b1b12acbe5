"""Search over routes: the expert's (through tool calls) and the solver's (over the tables).

`Search` fills a route's cities depth first: the two ends first (the legs
from and to the origin fail most), then the middle; at each position the
candidate that needs the fewest new facts, then the query's fixed shuffle of
the state's cities, and roads before flights (a road serves both road modes
and most pairs have one; flights are by date and sparse). It checks a leg
before the city, and learns more only when a plan needs it: the transport
modes it skipped, the filtered searches for stays and cuisines that the
row cap hid. Facts come from an object whose methods are generators: the
expert's turn each fact into tool calls, the solver's read the tables and
never yield. So both search in the same order, and the solver's plan proves
a query feasible: it sees every row the evaluator knows.
"""

from __future__ import annotations

import random
from collections.abc import Generator

from star.travel.planner.planning import Answer, Knowledge, Option, Planner, allowed_modes, choose_transport, give_up, hotel_fits, wanted_cuisines
from star.travel.world.query import Query

MAX_ROUTES = 2000  # routes planned before the search stops


def city_order(query: Query, listed: list[str]) -> list[str]:
    """Candidate cities in the expert's order; it depends on the query alone, so every run agrees."""
    if query.visiting_city_number == 1:
        return [query.dest]
    listed = list(listed)
    random.Random(f"cities-{query.idx}-{query.org}-{query.dest}").shuffle(listed)
    return [c for c in listed if c != query.org]


def drive_options(opt: Option | None) -> dict[str, Option]:
    """Both road modes from one distance: a car per 5 at km * 0.05, a taxi per 4 at km."""
    if opt is None or not opt.extra:
        return {}
    km = opt.extra[0]
    return {"self-driving": Option("", int(km * 0.05), (km,)), "taxi": Option("", int(km), (km,))}


def _clear(table: dict[str, list[Option]]) -> dict[str, list[Option]]:
    """Leave out names seen with two different rows: the evaluator reads the first in the table, unknown here."""
    out = {}
    for city, options in table.items():
        rows: dict[str, set] = {}
        for o in options:
            rows.setdefault(o.name, set()).add(o)
        out[city] = [o for o in options if len(rows[o.name]) == 1]
    return out


def _merge(old: list, new: list) -> list:
    return old + [x for x in new if x not in old]


class Search:
    def __init__(self, query: Query, facts, planner: Planner, rng: random.Random, max_routes: int = MAX_ROUTES):
        self.q, self.facts, self.planner, self.rng = query, facts, planner, rng
        self.allowed = allowed_modes(query)
        self.flights: dict[tuple, list[Option]] = {}
        self.roads: dict[tuple, dict[str, Option]] = {}  # (a, b) -> mode -> option
        self.asked_roads: dict[tuple, set[str]] = {}
        self.hotels: dict[str, list[Option]] = {}
        self.food: dict[str, list[Option]] = {}
        self.sights: dict[str, list[str]] = {}
        self.city_ok: dict[str, bool] = {}
        self.no_cuisine: set[frozenset] = set()  # city sets that lack a wanted cuisine
        self.asked: set[tuple] = set()
        self.best: Answer | None = None  # the cheapest plan found over budget
        self.legs: list = []
        self.routes_left = max_routes

    def day(self, leg: int) -> str:
        return self.q.date[min(2 * leg, len(self.q.date) - 1)]

    def run(self, order: list[str]) -> Generator:
        k = self.q.visiting_city_number
        # The legs from and to the origin fail most, so the ends are chosen first.
        fill = [0, *([k - 1] if k > 1 else []), *range(1, k - 1)]
        return (yield from self._place([None] * k, fill, order))

    def _place(self, slots: list, fill: list[int], order: list[str]) -> Generator:
        if not fill:
            if self.routes_left <= 0 or frozenset(slots) in self.no_cuisine:
                return None
            self.routes_left -= 1
            return (yield from self._try(slots))
        p = fill[0]
        # Two passes: roads alone first (one call a leg), then flights for the candidates left.
        for fly in (False, True):
            tried: set[str] = set()
            while True:
                # Next the candidate with the fewest facts still to learn, then in the fixed order.
                ranked = []
                for i, city in enumerate(order):
                    if city in slots or city in tried or self.city_ok.get(city) is False:
                        continue
                    known = [self._known_leg(a, b, j) for j, a, b in self._legs_at(slots, p, city)]
                    if False not in known:
                        ranked.append((known.count(None) + (city not in self.city_ok), i, city))
                if not ranked:
                    break
                city = min(ranked)[2]
                tried.add(city)
                slots[p] = city
                ok = True
                for j, a, b in self._legs_at(slots, p, city):
                    ok = ok and (yield from self._leg_ok(a, b, j, slots, fly))
                if ok and (yield from self._city(city)):
                    found = yield from self._place(slots, fill[1:], order)
                    if found is not None:
                        return found
                slots[p] = None
        return None

    def _legs_at(self, slots: list, p: int, city: str) -> list[tuple[int, str, str]]:
        """The legs between `city` at position p and the neighbours already placed."""
        route = [self.q.org, *slots[:p], city, *slots[p + 1 :], self.q.org]
        return [(j, route[j], route[j + 1]) for j in (p, p + 1) if route[j] is not None and route[j + 1] is not None]

    def _known_leg(self, a: str, b: str, j: int) -> bool | None:
        """True or False when what is known settles the leg, None when a call must."""
        road = self.roads.get((a, b), self.roads.get((b, a)))  # roads go both ways
        flights = self.flights.get((a, b, self.day(j))) if "flight" in self.allowed else []
        if road or flights:
            return True
        return False if road is not None and flights is not None else None

    # -- facts -----------------------------------------------------------------

    def _flights(self, a: str, b: str, day: str) -> Generator:
        if (a, b, day) not in self.flights:
            self.flights[a, b, day] = yield from self.facts.flights(a, b, day)
        return self.flights[a, b, day]

    def _road(self, a: str, b: str, mode: str) -> Generator:
        """Both road modes' costs: one answer gives the distance, so ask once."""
        if not self.allowed - {"flight"}:
            return {}
        if (b, a) in self.asked_roads and not self.roads[b, a]:
            return {}  # roads go both ways (all but 7 of 62,835 pairs in the public sandbox)
        if (a, b) not in self.asked_roads:
            modes = set(self.facts.road_modes(a, b)) or {mode}
            self.asked_roads[a, b] = modes
            found: dict[str, Option] = {}
            for m in sorted(modes):
                opt = yield from self.facts.drive(a, b, m)
                if opt is not None:
                    found = drive_options(opt) | found | {m: opt}
            self.roads[a, b] = found
        return self.roads[a, b]

    def _leg_ok(self, a: str, b: str, j: int, slots: list, fly: bool = True) -> Generator:
        """Roads first: most pairs have one and it serves both road modes; flights are by date and sparse."""
        known = self._known_leg(a, b, j)
        if known is not None:
            return known
        if (yield from self._road(a, b, self._road_mode(slots))):
            return True
        return fly and "flight" in self.allowed and bool((yield from self._flights(a, b, self.day(j))))

    def _road_mode(self, cities: list) -> str:
        """The mode to ask a road for: once a leg can only be flown, the others go by taxi (a car cannot be mixed in)."""
        route = [self.q.org, *cities, self.q.org]
        flown = any(self.flights.get((a, b, self.day(j))) and not self.roads.get((a, b)) for j, (a, b) in enumerate(zip(route, route[1:])) if a and b)
        return "taxi" if "self-driving" not in self.allowed or flown else "self-driving"

    def _city(self, city: str) -> Generator:
        """Sights, stays, food: in the order they most often rule a city out."""
        if city not in self.city_ok:
            self.sights[city] = yield from self.facts.attractions(city)
            ok = bool(self.sights[city])
            if ok:
                known = self.facts.known_hotels(city)
                self.hotels[city] = known if known is not None else []
                if not any(hotel_fits(self.q, h) for h in self.hotels[city]):
                    yield from self._fitting_hotels(city)
                ok = any(hotel_fits(self.q, h) for h in self.hotels[city])
            if ok:
                self.food[city] = yield from self.facts.restaurants(city, "")
                ok = len({r.name for r in self.food[city]}) >= 4
            self.city_ok[city] = ok
        return self.city_ok[city]

    def _fitting_hotels(self, city: str) -> Generator:
        if ("hotels", city) not in self.asked and not self.facts.complete:
            self.asked.add(("hotels", city))
            self.hotels[city] = _merge(self.hotels.get(city, []), (yield from self.facts.hotels(city, True)))

    def _cuisine(self, city: str, cuisine: str) -> Generator:
        if ("food", city, cuisine) not in self.asked:
            self.asked.add(("food", city, cuisine))
            self.food[city] = _merge(self.food[city], (yield from self.facts.restaurants(city, cuisine)))

    def _all_legs(self, cities: list[str]) -> Generator:
        route = [self.q.org, *cities, self.q.org]
        for j, (a, b) in enumerate(zip(route, route[1:])):
            if "flight" in self.allowed:
                yield from self._flights(a, b, self.day(j))
            yield from self._road(a, b, self._road_mode(cities))

    # -- planning --------------------------------------------------------------

    def _plan(self, cities: list[str]) -> Answer:
        route = [self.q.org, *cities, self.q.org]
        options = []
        for j, (a, b) in enumerate(zip(route, route[1:])):
            flights = self.flights.get((a, b, self.day(j))) or []
            options.append(({"flight": flights[0]} if flights else {}) | self.roads.get((a, b), {}))
        legs = choose_transport(self.q, options)
        self.legs = list(zip(legs or [], route, route[1:]))
        if legs is None:
            return give_up(self.q, "no way to travel one of the legs")
        know = Knowledge(list(cities), legs, _clear(self.hotels), _clear(self.food), self.sights)
        return self.planner.plan(self.q, know, self.rng)

    def road_legs(self) -> list[tuple[str, str, str]]:
        """(mode, from, to) of the last plan's road legs whose mode was never asked for."""
        return [(m, a, b) for (m, _), a, b in self.legs if m != "flight" and m not in self.asked_roads.get((a, b), set())]

    def _try(self, cities: list[str]) -> Generator:
        route = [self.q.org, *cities, self.q.org]
        for j, (a, b) in enumerate(zip(route, route[1:])):
            if not self.flights.get((a, b, self.day(j))):  # a road known only from its reverse: learn its cost
                yield from self._road(a, b, self._road_mode(cities))
        for cuisine in wanted_cuisines(self.q):
            for city in cities:
                if any(cuisine in r.extra for c in cities for r in self.food[c]):
                    break
                yield from self._cuisine(city, cuisine)
            if not any(cuisine in r.extra for c in cities for r in self.food[c]):
                self.no_cuisine.add(frozenset(cities))
                return None
        if self.facts.complete:
            yield from self._all_legs(cities)
        answer = self._plan(cities)
        # A plan over budget or short of a cuisine: learn what was skipped, then plan again.
        steps = [("over budget", lambda: self._all_legs(cities)), ("over budget", lambda: self._each(self._fitting_hotels, cities))]
        for w in wanted_cuisines(self.q):
            steps += [(r, lambda w=w: self._each(lambda c: self._cuisine(c, w), cities)) for r in ("over budget", f"no {w} restaurant")]
        for reason, step in steps:
            if answer.ok or self.facts.complete:
                break
            if answer.reason == reason:
                yield from step()
                answer = self._plan(cities)
        if answer.ok:
            return answer
        if answer.reason == "over budget" and (self.best is None or answer.cost < self.best.cost):
            self.best = answer
        return None

    @staticmethod
    def _each(fetch, cities: list[str]) -> Generator:
        for city in cities:
            yield from fetch(city)
