"""`synthesize.source: official`: the published TravelPlanner query file as the test split."""

import csv
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from star.config import ParamsError, load_params
from star.travel.world.official import COLUMNS, OfficialQueriesError, check_world, read_official_queries
from star.travel.world.query import read_queries

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def places(real_sandbox) -> dict[str, str]:
    """Real names: an origin, a one-city destination, and a state with three cities or more elsewhere."""
    cities = dict(zip(real_sandbox.cities["city"], real_sandbox.cities["state"]))
    assert {"Washington", "Myrtle Beach"} <= set(cities)
    state = next(s for s in real_sandbox.states() if len(real_sandbox.cities_in(s)) >= 3 and s != cities["Washington"])
    return {"org": "Washington", "city": "Myrtle Beach", "state": state}


def published_rows(places: dict[str, str]) -> list[dict[str, object]]:
    """Three rows as the hub's files hold them: lists and dicts as Python literals in strings."""
    local_none = "{'house rule': None, 'cuisine': None, 'room type': None, 'transportation': None}"
    return [
        {
            "org": places["org"], "dest": places["city"], "days": 3, "visiting_city_number": 1,
            "date": "['2022-03-13', '2022-03-14', '2022-03-15']", "people_number": 1,
            "local_constraint": local_none, "budget": 1400,
            "query": f"Please plan a 3-day trip from {places['org']} to {places['city']}, March 13th to 15th, 2022, for $1,400.",
            "level": "easy", "reference_information": "[{'Description': 'Attractions in Myrtle Beach', 'Content': '...'}]",
        },
        {
            "org": places["org"], "dest": places["state"], "days": 7, "visiting_city_number": 3,
            "date": str([f"2022-03-{d}" for d in range(17, 24)]), "people_number": 2,
            "local_constraint": "{'house rule': 'pets', 'cuisine': ['American', 'Chinese'], 'room type': None, 'transportation': 'no flight'}",
            "budget": 5100, "query": f"A week for two in three cities of {places['state']}, with our pets.",
            "level": "hard", "reference_information": "[]",
        },
        {
            "org": places["city"], "dest": places["org"], "days": 3, "visiting_city_number": 1,
            "date": "['2022-03-26', '2022-03-27', '2022-03-28']", "people_number": 4,
            "local_constraint": "{'house rule': None, 'cuisine': None, 'room type': 'entire room', 'transportation': None}",
            "budget": 3000, "query": "Four of us, three days, an entire room.", "level": "medium",
            "reference_information": "[]",
        },
    ]


def write_csv(path: Path, rows: list[dict[str, object]]) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_parquet(path: Path, rows: list[dict[str, object]]) -> Path:
    pl.DataFrame(rows).write_parquet(path)
    return path


WRITERS = {"csv": write_csv, "parquet": write_parquet}


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_a_published_file_reads_as_queries(tmp_path, places, kind):
    rows = published_rows(places)
    queries = read_official_queries(WRITERS[kind](tmp_path / f"validation.{kind}", rows))
    assert [q.idx for q in queries] == [1, 2, 3]
    easy, hard, medium = queries
    assert (easy.org, easy.dest, easy.days, easy.visiting_city_number, easy.people_number, easy.budget, easy.level) == (
        "Washington", "Myrtle Beach", 3, 1, 1, 1400, "easy"
    )
    assert easy.date == ["2022-03-13", "2022-03-14", "2022-03-15"]
    assert easy.local_constraint == {"house rule": None, "cuisine": None, "room type": None, "transportation": None}
    assert easy.query == rows[0]["query"]
    assert hard.dest == places["state"] and hard.date[-1] == "2022-03-23"
    assert hard.local_constraint == {"house rule": "pets", "cuisine": ["American", "Chinese"], "room type": None, "transportation": "no flight"}
    assert medium.local_constraint["room type"] == "entire room" and medium.level == "medium"


def test_csv_and_parquet_read_the_same(tmp_path, places):
    rows = published_rows(places)
    assert read_official_queries(write_csv(tmp_path / "a.csv", rows)) == read_official_queries(write_parquet(tmp_path / "a.parquet", rows))


def test_parquet_with_native_lists_and_dicts(tmp_path, places):
    """A parquet whose date is a list column and local_constraint a struct reads the same."""
    rows = published_rows(places)
    queries = read_official_queries(write_csv(tmp_path / "all.csv", rows))
    native = [{**r, "date": q.date, "local_constraint": q.local_constraint} for r, q in zip(rows, queries)]
    assert read_official_queries(write_parquet(tmp_path / "native.parquet", native)) == queries


def broken(places, column: str, value: object, row: int = 1) -> list[dict[str, object]]:
    rows = published_rows(places)
    rows[row][column] = value
    return rows


CODE = "__import__('pathlib').Path('PWNED').touch()"

# A malformed cell, and what the one-line error must say (row numbers count data rows from 1).
MALFORMED = {
    "date not a list": ("date", "2022-03-17", "row 2: date is not a Python list literal"),
    "date is code": ("date", CODE, "row 2: date is not a Python list literal"),
    "date not a date": ("date", str(["2022-03-17", "March 18"] + [f"2022-03-{d}" for d in range(19, 24)]), "row 2: date holds 'March 18'"),
    "date count": ("date", "['2022-03-17', '2022-03-18']", "row 2: date lists 2 dates for 7 days"),
    "local constraint is code": ("local_constraint", CODE, "row 2: local_constraint is not a Python dict literal"),
    "local constraint a list": ("local_constraint", "['pets']", "row 2: local_constraint is not a dict"),
    "local constraint unknown key": ("local_constraint", "{'pool': 'yes'}", "row 2: local_constraint has unknown keys ['pool']"),
    "cuisine not a list": ("local_constraint", "{'cuisine': 'Chinese'}", "row 2: local_constraint['cuisine'] is 'Chinese'"),
    "days not a number": ("days", "seven", "row 2: days is not a whole number"),
    "budget a fraction": ("budget", "5100.5", "row 2: budget is not a whole number"),
    "no people": ("people_number", 0, "row 2: people_number = 0: Input should be greater than or equal to 1"),
    "unknown level": ("level", "extreme", "row 2: level is 'extreme', not one of easy, medium, hard"),
    "empty origin": ("org", "", "row 2: org is empty"),
}


@pytest.mark.parametrize("kind", sorted(WRITERS))
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_cell_is_one_line_naming_row_and_field(tmp_path, places, monkeypatch, kind, case):
    column, value, words = MALFORMED[case]
    monkeypatch.chdir(tmp_path)
    rows = broken(places, column, value)
    if kind == "parquet":  # one type per column, as a real parquet file has
        rows = [{k: (str(v) if k == column else v) for k, v in r.items()} for r in rows]
    path = WRITERS[kind](tmp_path / f"test.{kind}", rows)
    with pytest.raises(OfficialQueriesError) as info:
        read_official_queries(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ") and words in message, message
    assert not (tmp_path / "PWNED").exists()  # read as a literal, never run


def test_file_level_problems(tmp_path, places):
    rows = published_rows(places)
    cases = {
        tmp_path / "absent.csv": "file not found",
        write_csv(tmp_path / "queries.json", rows): "not a .csv or .parquet file",
        write_csv(tmp_path / "no_budget.csv", [{k: v for k, v in r.items() if k != "budget"} for r in rows]): "lacks the columns budget",
        tmp_path / "header.csv": "holds no queries",
        tmp_path / "garbage.parquet": "cannot be read as parquet",
    }
    (tmp_path / "header.csv").write_text(",".join(COLUMNS) + "\n")
    (tmp_path / "garbage.parquet").write_bytes(b"not parquet at all")
    for path, words in cases.items():
        with pytest.raises(OfficialQueriesError) as info:
            read_official_queries(path)
        assert str(info.value).startswith(f"{path}: ") and words in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(OfficialQueriesError, match="no query file given"):
        read_official_queries("")


def test_the_queries_must_be_in_the_world(tmp_path, places, real_sandbox, synthetic_sandbox):
    queries = read_official_queries(write_csv(tmp_path / "v.csv", published_rows(places)))
    real = dict(zip(real_sandbox.cities["city"], real_sandbox.cities["state"]))
    check_world(queries, real, "v.csv")
    synthetic = dict(zip(synthetic_sandbox.cities["city"], synthetic_sandbox.cities["state"]))
    with pytest.raises(OfficialQueriesError, match=r"^v.csv: row 1: org 'Washington' is not a city of the world \(official queries need world.source: travelplanner\)$"):
        check_world(queries, synthetic, "v.csv")
    # A multi-city trip goes to a state; a one-city trip to a city.
    with pytest.raises(OfficialQueriesError, match="row 2: dest 'Myrtle Beach' is not a state"):
        check_world([queries[0], queries[1].model_copy(update={"dest": "Myrtle Beach"})], real, "v.csv")
    with pytest.raises(OfficialQueriesError, match="row 1: dest 'South Carolina' is not a city"):
        check_world([queries[0].model_copy(update={"dest": "South Carolina"})], real, "v.csv")


def test_params(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"synthesize": {"source": "official", "path": "test.csv"}}))
    assert load_params(params, ["synthesize"])["synthesize"].path == "test.csv"
    params.write_text(yaml.safe_dump({"synthesize": {"source": "official"}}))
    with pytest.raises(ParamsError, match="source official needs path"):
        load_params(params, ["synthesize"])
    params.write_text(yaml.safe_dump({"synthesize": {"source": "hub"}}))
    with pytest.raises(ParamsError, match="'synthesized' or 'official'"):
        load_params(params, ["synthesize"])


def test_the_test_split_is_the_published_file(tmp_path, places, real_sandbox):
    """Over the real database: train and validation synthesized, test the file's queries, in its order."""
    from star.config import EnvParams
    from star.travel.domain import TravelDomain
    from star.travel.specs import SynthesizeParams

    real_sandbox.save(tmp_path / "world")
    path = write_parquet(tmp_path / "test.parquet", published_rows(places))
    synthesize = SynthesizeParams(sizes={"train": 3, "validation": 2, "test": 50}, source="official", path=str(path))
    metrics = TravelDomain({"synthesize": synthesize, "env": EnvParams()}, tmp_path / "world").synthesize(tmp_path / "queries")
    assert metrics["queries_train"] == 3 and metrics["queries_validation"] == 2
    assert metrics["queries_test"] == 3 and metrics["official_test"] == 3
    assert read_queries(tmp_path / "queries/test.jsonl") == read_official_queries(path)
    assert [q.org for q in read_queries(tmp_path / "queries/train.jsonl")]


def run_synthesize_stage(tmp_path: Path, synthesize: dict) -> subprocess.CompletedProcess:
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"synthesize": synthesize}))
    env = {"PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "stages.synthesize"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("problem", ["missing", "malformed"])
def test_the_stage_stops_with_one_line_and_exit_2(tmp_path, places, problem):
    if problem == "malformed":
        write_csv(tmp_path / "test.csv", broken(places, "local_constraint", "{'house rule': 'pets'"))
        expect = "error: test.csv: row 2: local_constraint is not a Python dict literal: \"{'house rule': 'pets'\""
    else:
        expect = "error: test.csv: file not found"
    proc = run_synthesize_stage(tmp_path, {"source": "official", "path": "test.csv"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [expect]
    assert not (tmp_path / "data").exists() and not (tmp_path / "mlflow.db").exists()
