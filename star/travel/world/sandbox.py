"""The TravelPlanner sandbox: its tables in polars, one schema for every source.

Column names are normalised to snake_case; every source (the official CSV
layout, the synthetic world, the parquet written by the `world` stage) maps
onto `SCHEMA`, so tools and the evaluator never see where the data came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from star.io import atomic_dir

SCHEMA: dict[str, dict[str, pl.DataType]] = {
    "flights": {
        "flight_number": pl.String,
        "price": pl.Int64,
        "dep_time": pl.String,
        "arr_time": pl.String,
        "elapsed": pl.String,
        "date": pl.String,
        "origin": pl.String,
        "dest": pl.String,
        "distance": pl.Float64,
    },
    "distances": {
        "origin": pl.String,
        "dest": pl.String,
        "duration": pl.String,
        "distance_km": pl.Float64,
    },
    "accommodations": {
        "name": pl.String,
        "room_type": pl.String,
        "price": pl.Int64,
        "minimum_nights": pl.Int64,
        "review_rate": pl.Float64,
        "house_rules": pl.String,
        "max_occupancy": pl.Int64,
        "city": pl.String,
    },
    "restaurants": {
        "name": pl.String,
        "city": pl.String,
        "cuisines": pl.String,
        "cost": pl.Int64,
        "rating": pl.Float64,
    },
    "attractions": {
        "name": pl.String,
        "latitude": pl.Float64,
        "longitude": pl.Float64,
        "address": pl.String,
        "phone": pl.String,
        "website": pl.String,
        "city": pl.String,
    },
    "cities": {"city": pl.String, "state": pl.String},
}

# The official value sets of the local constraints.
ROOM_TYPES = ("Entire home/apt", "Private room", "Shared room")
HOUSE_RULES = ("No parties", "No smoking", "No children under 10", "No pets", "No visitors")
CUISINES = ("Chinese", "American", "Italian", "Mexican", "Indian", "Mediterranean", "French")


@dataclass(frozen=True)
class Sandbox:
    flights: pl.DataFrame
    distances: pl.DataFrame
    accommodations: pl.DataFrame
    restaurants: pl.DataFrame
    attractions: pl.DataFrame
    cities: pl.DataFrame

    def tables(self) -> dict[str, pl.DataFrame]:
        return {name: getattr(self, name) for name in SCHEMA}

    def states(self) -> list[str]:
        return sorted(self.cities["state"].unique().to_list())

    def cities_in(self, state: str) -> list[str]:
        return self.cities.filter(pl.col("state") == state)["city"].to_list()

    def state_of(self, city: str) -> str | None:
        hit = self.cities.filter(pl.col("city") == city)["state"]
        return hit[0] if len(hit) else None

    def save(self, directory: str | Path) -> None:
        """Write every table as parquet, atomically (all or nothing)."""
        with atomic_dir(directory) as tmp:
            for name, frame in self.tables().items():
                frame.write_parquet(tmp / f"{name}.parquet")

    @classmethod
    def load(cls, directory: str | Path) -> Sandbox:
        """Read a sandbox written by `save`."""
        directory = Path(directory)
        missing = [n for n in SCHEMA if not (directory / f"{n}.parquet").exists()]
        if missing:
            raise FileNotFoundError(f"{directory} is not a sandbox: missing {', '.join(missing)}")
        return cls(**{n: _conform(pl.read_parquet(directory / f"{n}.parquet"), n) for n in SCHEMA})


def _conform(frame: pl.DataFrame, table: str) -> pl.DataFrame:
    """Select and cast columns to the schema; fail clearly on a missing column."""
    schema = SCHEMA[table]
    missing = [c for c in schema if c not in frame.columns]
    if missing:
        raise ValueError(f"table {table!r} lacks columns {missing}")
    return frame.select([pl.col(c).cast(t) for c, t in schema.items()])


def _km(text: str | None) -> float | None:
    """'1,144 km' -> 1144.0"""
    if text is None:
        return None
    match = re.search(r"[\d,.]+", text)
    return float(match.group().replace(",", "")) if match else None


def load_travelplanner(database: str | Path) -> Sandbox:
    """Load a directory in the official TravelPlanner CSV layout.

    Values are kept as they are (names untrimmed, row order, empty cells as
    null); only types and column names are normalised.
    """
    db = Path(database)
    if not (db / "flights" / "clean_Flights_2022.csv").exists():
        raise FileNotFoundError(f"{db} is not a TravelPlanner database directory")

    def read(rel: str) -> pl.DataFrame:
        return pl.read_csv(db / rel, infer_schema_length=None)

    flights = read("flights/clean_Flights_2022.csv").rename(
        {
            "Flight Number": "flight_number",
            "Price": "price",
            "DepTime": "dep_time",
            "ArrTime": "arr_time",
            "ActualElapsedTime": "elapsed",
            "FlightDate": "date",
            "OriginCityName": "origin",
            "DestCityName": "dest",
            "Distance": "distance",
        }
    )
    distances = read("googleDistanceMatrix/distance.csv").rename(
        {"origin": "origin", "destination": "dest", "duration": "duration"}
    )
    distances = distances.with_columns(
        pl.col("distance").map_elements(_km, return_dtype=pl.Float64).alias("distance_km")
    )
    accommodations = read("accommodations/clean_accommodations_2022.csv").rename(
        {
            "NAME": "name",
            "room type": "room_type",
            "minimum nights": "minimum_nights",
            "review rate number": "review_rate",
            "maximum occupancy": "max_occupancy",
        }
    )
    restaurants = read("restaurants/clean_restaurant_2022.csv").rename(
        {"Name": "name", "City": "city", "Cuisines": "cuisines", "Average Cost": "cost", "Aggregate Rating": "rating"}
    )
    attractions = read("attractions/attractions.csv").rename(
        {
            "Name": "name",
            "Latitude": "latitude",
            "Longitude": "longitude",
            "Address": "address",
            "Phone": "phone",
            "Website": "website",
            "City": "city",
        }
    )
    cities = pl.read_csv(
        db / "background" / "citySet_with_states.txt",
        separator="\t",
        has_header=False,
        new_columns=["city", "state"],
        schema_overrides={"city": pl.String, "state": pl.String},
    )
    frames = dict(
        flights=flights,
        distances=distances,
        accommodations=accommodations,
        restaurants=restaurants,
        attractions=attractions,
        cities=cities,
    )
    return Sandbox(**{n: _conform(f, n) for n, f in frames.items()})
