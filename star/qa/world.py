"""A seeded synthetic knowledge world: people, cities, countries and companies.

Every entity has one short wiki-style passage that states its attributes and
its relations, so a multi-hop question is answered by reading a chain of
passages, one search per hop. Names are plain capitalised pseudo-words,
unique across the world, so each one can be a single token.
"""

from __future__ import annotations

import random
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from star.io import write_json
from star.qa.data import Passage
from star.qa.specs import QAWorldSpec

_ONSETS = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z"]
_VOWELS = ["a", "e", "i", "o", "u"]
_CODAS = ["", "n", "r", "l", "s", "m"]

WORLD_FILE = "world.json"


class Country(BaseModel):
    name: str
    capital: str


class City(BaseModel):
    name: str
    country: str
    founded: int


class Org(BaseModel):
    name: str
    founded: int
    founder: str
    city: str


class Person(BaseModel):
    name: str
    born: int
    birthplace: str
    employer: str


# relation -> (subject kind, object kind, field on the subject)
RELATIONS: dict[str, tuple[str, str, str]] = {
    "born_in": ("person", "city", "birthplace"),
    "works_for": ("person", "org", "employer"),
    "founded_by": ("org", "person", "founder"),
    "based_in": ("org", "city", "city"),
    "country": ("city", "country", "country"),
    "capital": ("country", "city", "capital"),
}
# kind -> the year field that comparison and "in which year" questions ask about
YEARS = {"person": "born", "org": "founded", "city": "founded"}


class KnowledgeWorld(BaseModel):
    model_config = ConfigDict(extra="forbid")

    spec: QAWorldSpec
    countries: list[Country]
    cities: list[City]
    orgs: list[Org]
    people: list[Person]

    @cached_property
    def entities(self) -> dict[str, tuple[str, BaseModel]]:
        """name -> (kind, record)."""
        table: dict[str, tuple[str, BaseModel]] = {}
        for kind, records in (("country", self.countries), ("city", self.cities), ("org", self.orgs), ("person", self.people)):
            for record in records:
                table[record.name] = (kind, record)
        return table

    @cached_property
    def names_by_kind(self) -> dict[str, list[str]]:
        table: dict[str, list[str]] = {}
        for name, (kind, _) in self.entities.items():
            table.setdefault(kind, []).append(name)
        return table

    def kind(self, name: str) -> str:
        return self.entities[name][0]

    def follow(self, name: str, relation: str) -> str:
        subject, _, attr = RELATIONS[relation]
        kind, record = self.entities[name]
        if kind != subject:
            raise ValueError(f"{relation} does not apply to the {kind} {name}")
        return getattr(record, attr)

    def year(self, name: str) -> int:
        kind, record = self.entities[name]
        return getattr(record, YEARS[kind])

    def passage(self, name: str) -> Passage:
        kind, r = self.entities[name]
        if kind == "country":
            text = f"{r.name} is a country. Its capital is {r.capital}."
        elif kind == "city":
            text = f"{r.name} is a city in {r.country}, founded in {r.founded}."
        elif kind == "org":
            text = f"{r.name} is a company founded in {r.founded} by {r.founder}. It is based in {r.city}."
        else:
            text = f"{r.name} was born in {r.born} in {r.birthplace}. {r.name} works for {r.employer}."
        # The name is unique, so it serves as the id.
        return Passage(id=name, title=name, text=text)

    def passages(self) -> list[Passage]:
        return [self.passage(name) for name in self.entities]

    def save(self, directory: str | Path) -> None:
        write_json(Path(directory) / WORLD_FILE, self.model_dump(mode="json"))

    @classmethod
    def load(cls, directory: str | Path) -> KnowledgeWorld:
        return cls.model_validate_json((Path(directory) / WORLD_FILE).read_text())


class _Names:
    """Unique capitalised pseudo-words, drawn without repeats."""

    def __init__(self, rng: random.Random, syllables: int):
        self.rng = rng
        self.syllables = syllables
        self.used: set[str] = set()

    def word(self) -> str:
        while True:
            w = "".join(
                self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS) for _ in range(self.syllables)
            ).capitalize()
            if w not in self.used and len(w) >= 4:
                self.used.add(w)
                return w


def build_world(spec: QAWorldSpec) -> KnowledgeWorld:
    """Same spec, same world, byte for byte."""
    rng = random.Random(spec.seed)
    names = _Names(rng, spec.name_syllables)
    country_names = [names.word() for _ in range(spec.num_countries)]
    cities = []
    for i in range(spec.num_places):
        # The first cities go round the countries, so each country has at least one.
        country = country_names[i] if i < spec.num_countries else rng.choice(country_names)
        cities.append(City(name=names.word(), country=country, founded=rng.randint(1000, 1950)))
    members: dict[str, list[str]] = {c: [] for c in country_names}
    for city in cities:
        members[city.country].append(city.name)
    countries = [Country(name=c, capital=rng.choice(members[c])) for c in country_names]
    people = [
        dict(name=names.word(), born=rng.randint(1900, 1995), birthplace=rng.choice(cities).name)
        for _ in range(spec.num_people)
    ]
    orgs = []
    for _ in range(spec.num_orgs):
        founder = rng.choice(people)
        # Founders are adults when they found a company.
        founded = rng.randint(founder["born"] + 20, min(founder["born"] + 60, 2020))
        orgs.append(Org(name=names.word(), founded=founded, founder=founder["name"], city=rng.choice(cities).name))
    people_records = [Person(**p, employer=rng.choice(orgs).name) for p in people]
    return KnowledgeWorld(spec=spec, countries=countries, cities=cities, orgs=orgs, people=people_records)


def entity_names(world: KnowledgeWorld) -> list[str]:
    """Every proper name in the world, sorted (each can be one token)."""
    return sorted(world.entities)
