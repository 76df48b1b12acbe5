import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from star.travel.plans.format import format_itinerary, render_itinerary
from star.travel.plans.format_check import check_file, check_row, check_rows, check_text
from star.travel.plans.plan import Day, Plan, write_submission
from star.travel.world.query import Query

ROOT = Path(__file__).resolve().parents[1]


def make_query(idx: int, days: int = 3) -> Query:
    return Query(
        idx=idx,
        org="Aldmoor",
        dest="Brint",
        days=days,
        visiting_city_number=1,
        date=[f"2022-03-{10 + i}" for i in range(days)],
        people_number=1,
        budget=1500,
        query=f"A {days}-day trip from Aldmoor to Brint ({idx}).",
    )


TRIP = Plan(
    idx=1,
    days=[
        Day(1, "from Aldmoor to Brint", "Flight Number: F0012, from Aldmoor to Brint", "-",
            "Old Mill, Brint;Harbor Park, Brint;", "Lotus Cafe, Brint", "Blue Fork, Brint", "Sea Inn, Brint"),
        Day(2, "Brint", "-", "Dawn Bakery, Brint", "Glass Museum, Brint;", "Green Bowl, Brint",
            "Harbor Grill, Brint", "Sea Inn, Brint"),
        Day(3, "from Brint to Aldmoor", "Self-driving, from Brint to Aldmoor", "Dawn Bakery, Brint", "-",
            "Pier Diner, Aldmoor", "-", "-"),
    ],
)
QUERIES = [make_query(1), make_query(2), make_query(3)]


def formatted(tmp_path: Path) -> Path:
    """A submission as the format stage writes it: a delivered plan, a taxi day, and a query with no answer."""
    taxi = render_itinerary(TRIP).replace("Self-driving", "Taxi").replace("Transport: Flight F0012", "Transport: Taxi")
    plans = [format_itinerary(render_itinerary(TRIP), QUERIES[0]), format_itinerary(taxi, QUERIES[1]),
             Plan(idx=3, error="no final answer")]
    for plan, query in zip(plans, QUERIES):
        plan.query = query.query
    path = tmp_path / "plans.jsonl"
    write_submission(path, plans)
    return path


def good_row() -> dict:
    return {"idx": 1, "query": "q", "plan": [copy.deepcopy(vars(d)) for d in TRIP.days]}


def test_the_formatters_submission_passes(tmp_path):
    path = formatted(tmp_path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[0]["plan"] and rows[1]["plan"] and rows[2]["plan"] == []
    assert check_file(path, QUERIES) == []
    assert check_file(path) == []


def test_the_official_example_layout_passes():
    # The official example numbers days under "day" and leaves the last ";" off some attractions.
    row = good_row()
    for day in row["plan"]:
        day["day"] = day.pop("days")
    row["plan"][1]["attraction"] = "Glass Museum, Brint"
    # One of its days has no attraction key: incomplete, which the evaluation reports, not a format error.
    del row["plan"][0]["attraction"]
    assert check_row(row) == []
    # An undelivered plan may be null, [] or "".
    assert all(check_row({"idx": 1, "query": "q", "plan": empty}) == [] for empty in (None, [], ""))
    # A null meal, attraction or transport is read as nothing.
    row["plan"][1].update(breakfast=None, attraction=None, transportation=None)
    assert check_row(row) == []


def broken(change) -> dict:
    row = good_row()
    change(row)
    return row


def set_day(i: int, **values):
    return lambda row: row["plan"][i].update(values)


def drop(i: int, key: str):
    return lambda row: row["plan"][i].pop(key)


# Each rule, broken on its own, and the words its violation must say.
ROW_CASES = {
    "no idx": (lambda row: row.pop("idx"), "lacks idx"),
    "no query": (lambda row: row.pop("query"), "lacks query"),
    "no plan": (lambda row: row.pop("plan"), "lacks plan"),
    "idx not an integer": (lambda row: row.update(idx="1"), "idx is not an integer"),
    "idx a boolean": (lambda row: row.update(idx=True), "idx is not an integer"),
    "query not a string": (lambda row: row.update(query=["q"]), "query is not a string"),
    "plan a string": (lambda row: row.update(plan="Day 1: Brint"), "plan is neither empty nor a list"),
    "plan an object": (lambda row: row.update(plan={"days": 1}), "plan is neither empty nor a list"),
    "day not an object": (lambda row: row["plan"].__setitem__(1, "Brint"), "day 2 is not an object"),
    "day without current city": (drop(0, "current_city"), "day 1 lacks current_city"),
    "day without transportation": (drop(2, "transportation"), "day 3 lacks transportation"),
    "day without number": (drop(1, "days"), "day 2 has no day number"),
    "day numbered out of order": (set_day(1, days=3), "day 2 is numbered 3, not 2"),
    "day number a string": (set_day(0, days="1"), 'day 1 is numbered "1", not 1'),
    "null current city": (set_day(1, current_city=None), "day 2: current_city is null"),
    "null accommodation": (set_day(0, accommodation=None), "day 1: accommodation is null"),
    "number for a meal": (set_day(1, dinner=12), "day 2: dinner is not a string"),
    "list of attractions": (set_day(1, attraction=["Old Mill, Brint"]), "day 2: attraction is not a string"),
    "empty current city": (set_day(1, current_city=" "), "day 2: current_city is empty"),
    "route without to": (set_day(0, current_city="from Aldmoor"), "day 1: current_city \"from Aldmoor\" says 'from'"),
    "flight without Flight Number:": (
        set_day(0, transportation="flight number F0012, from Aldmoor to Brint"), "does not spell 'Flight Number:'"
    ),
    "flight without a route": (
        set_day(1, transportation="Flight Number: F0012"), "day 2: flight \"Flight Number: F0012\" has no route"
    ),
}


@pytest.mark.parametrize("case", sorted(ROW_CASES))
def test_each_rule_broken_alone_is_caught(case):
    change, words = ROW_CASES[case]
    row = broken(change)
    violations = check_row(row)
    assert len(violations) == 1, violations
    assert words in violations[0], violations
    # In a file, the line is named.
    assert check_rows([good_row(), row]) == [f"line 2: {violations[0]}"]


def test_a_row_that_is_not_an_object():
    assert check_rows([good_row(), [1, 2]]) == ["line 2: is not a JSON object but [1, 2]"]


def test_a_flight_takes_its_route_from_the_travel_day():
    # "Flight Number: F1" alone is fine on a day whose current city is a route.
    assert check_row(broken(set_day(0, transportation="Flight Number: F0012"))) == []


def lines(rows) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def rows_for(queries) -> list[dict]:
    return [{**good_row(), "idx": q.idx} for q in queries]


def test_rows_answer_the_queries_one_for_one_in_order():
    assert check_rows(rows_for(QUERIES), QUERIES) == []
    assert check_rows(rows_for(QUERIES[:2]), QUERIES) == ["2 rows for 3 queries: one row per query is needed"]
    assert check_rows(rows_for(QUERIES + [make_query(4)]), QUERIES) == ["4 rows for 3 queries: one row per query is needed"]
    swapped = rows_for([QUERIES[1], QUERIES[0], QUERIES[2]])
    assert check_rows(swapped, QUERIES) == [
        "line 1: idx 2, but query 1 has idx 1 (rows must follow the queries' order)",
        "line 2: idx 1, but query 2 has idx 2 (rows must follow the queries' order)",
    ]


def test_file_rules():
    text = lines(rows_for(QUERIES))
    assert check_text(text, QUERIES) == []
    # Whitespace around the whole file is ignored, as by the official reader; a blank row is not.
    assert check_text("\n" + text + "\n\n", QUERIES) == []
    first, rest = text.split("\n", 1)
    assert check_text(first + "\n\n" + rest, QUERIES) == [
        "line 2 is blank",
        "4 rows for 3 queries: one row per query is needed",
        "line 3: idx 2, but query 3 has idx 3 (rows must follow the queries' order)",
    ]
    assert check_text(first + "\n{idx: 2}\n" + rest.split("\n", 1)[1], QUERIES)[0].startswith("line 2 is not JSON")
    assert check_text("", QUERIES) == ["the file has no rows"]
    assert check_text("", []) == []


def test_a_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "plans.jsonl"
    data = lines(rows_for(QUERIES)).encode().replace(b"Sea Inn", b"Sea \xe9nn")
    path.write_bytes(data)
    at = data.index(b"\xe9")
    assert check_file(path) == [f"the file is not UTF-8: invalid continuation byte at byte {at}"]


def test_command_line(tmp_path):
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(q.model_dump_json() + "\n" for q in QUERIES))
    plans = tmp_path / "plans.jsonl"
    plans.write_text(lines(rows_for(QUERIES[:2])))
    run = lambda *args: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "star.travel.plans.format_check", "--plans", str(plans), *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert run().returncode == 0
    proc = run("--queries", str(queries))
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == ["2 rows for 3 queries: one row per query is needed"]


def run_format_stage(tmp_path: Path, answer: str, patch: str = "") -> subprocess.CompletedProcess:
    """`stages.format base` in a scratch project with one test query; `patch` runs first (a formatter bug)."""
    (tmp_path / "params.yaml").write_text("format:\n  kind: rules\n")
    (tmp_path / "data/queries").mkdir(parents=True)
    (tmp_path / "data/queries/test.jsonl").write_text(QUERIES[0].model_dump_json() + "\n")
    (tmp_path / "data/infer/base").mkdir(parents=True)
    (tmp_path / "data/infer/base/trajectories.jsonl").write_text(json.dumps({"query_id": 1, "answer": answer}) + "\n")
    code = f"import runpy, sys\n{patch}\nsys.argv = ['stages.format', 'base']\nrunpy.run_module('stages.format', run_name='__main__', alter_sys=True)"
    env = {"PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)


def stage_metrics(tmp_path: Path) -> dict[str, float]:
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs(client.get_experiment_by_name("star").experiment_id, "tags.`star.stage` = 'format@base'")
    assert len(runs) == 1
    return runs[0].data.metrics


# A formatter that writes a plan the official check would crash on (a route with no "to").
BUGGY_FORMATTER = """
import star.travel.plans.format as f
from star.travel.plans.plan import Day, Plan
f.format_itinerary = lambda text, query, **kw: Plan(idx=query.idx, days=[Day(1, "from Aldmoor")])
"""


@pytest.mark.slow
def test_the_format_stage_checks_what_it_writes(tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir(), bad.mkdir()
    proc = run_format_stage(good, render_itinerary(TRIP))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert check_file(good / "data/plans/base.jsonl", QUERIES[:1]) == []
    assert stage_metrics(good)["format_violations"] == 0

    proc = run_format_stage(bad, render_itinerary(TRIP), BUGGY_FORMATTER)
    assert proc.returncode == 1, proc.stderr[-2000:]
    # the last line says what failed (Prefect's own log of the failed flow comes before it)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: format@base: data/plans/base.jsonl: the formatter wrote a submission with 1 violation of the official format rules")
    assert "line 1: day 1: current_city \"from Aldmoor\" says 'from'" in last
    assert not (bad / "data/plans/base.jsonl").exists()
    assert stage_metrics(bad)["format_violations"] == 1
