import json
import random
import re
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from star.env.parse import parse_action
from star.train.filtering import select
from star.travel.evaluation.evaluate import evaluate_plan
from star.travel.planner.distill import ExpertTeacher, run_episode
from star.travel.planner.expert import Expert
from star.travel.planner.rename import Vocabulary, draw_renaming, rename_messages, rename_text, rename_value, rename_world
from star.travel.plans.format import format_rules
from star.travel.specs import SynthesisSpec
from star.travel.world.query import Query
from star.travel.world.sandbox import Sandbox
from star.travel.world.sandbox_index import index_for
from star.travel.world.synthesize import Synthesizer
from star.travel.world.tools import TravelTools

DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
FLIGHT = re.compile(r"\bF\d+\b")
WORLD_FLIGHT = re.compile(r"\bF\d{4}\b")  # the world's numbers; the prompt's example (F123) is not one


@pytest.fixture(scope="module")
def world(synthetic_sandbox):
    return synthetic_sandbox


@pytest.fixture(scope="module")
def episodes(world):
    """Expert episodes of 3-, 5- and 7-day queries; some plans spoiled, some tool calls failed."""
    spec = SynthesisSpec(seed=3, sizes={"train": 12, "validation": 0, "test": 0}, days={3: 1.0, 5: 1.0, 7: 1.0})
    queries = Synthesizer(world, spec).run()["train"]
    teacher = ExpertTeacher(Expert(mistake_rate=0.3, top_k=2, upgrade_prob=0.5))
    tools, index = TravelTools(world), index_for(world)
    rows = [run_episode(teacher, tools, index, q, 0, seed=0, max_turns=30, fault_rate=0.1) for q in queries]
    return {q.idx: q for q in queries}, rows


def categories(world: Sandbox) -> dict[str, set[str]]:
    """Read from the tables, not from the module under test."""
    return {
        "city": set(world.cities["city"]),
        "accommodations": set(world.accommodations["name"]),
        "restaurants": set(world.restaurants["name"]),
        "attractions": set(world.attractions["name"]),
    }


def occurrences(text: str, world: Sandbox) -> list[tuple[int, str, str]]:
    """(position, kind, value) of every city, place, flight number and date in `text`."""
    found = [(m.start(), "date", m.group()) for m in DATE.finditer(text)]
    flights = set(world.flights["flight_number"])
    found += [(m.start(), "flight", m.group()) for m in FLIGHT.finditer(text) if m.group() in flights]
    for kind, names in categories(world).items():
        found += [(m.start(), kind, m.group()) for name in names for m in re.finditer(rf"\b{re.escape(name)}\b", text)]
    return sorted(found)


def skeleton(text: str, found: list[tuple[int, str, str]]) -> list[str]:
    """The text between the occurrences."""
    out, end = [], 0
    for start, _, value in found:
        assert start >= end  # no two occurrences overlap
        out.append(text[end:start])
        end = start + len(value)
    return out + [text[end:]]


def test_each_category_is_deranged_and_the_whole_world_renamed(world):
    vocabulary = Vocabulary(world)
    expected = categories(world)
    assert {k: set(v) for k, v in vocabulary.categories.items()} == expected  # the synthetic world has no ambiguous name
    renaming = draw_renaming(vocabulary, random.Random(0))
    for kind, names in expected.items():
        images = [renaming.name(n) for n in names]
        assert set(images) == names, kind  # a bijection of the category onto itself
        assert all(renaming.name(n) != n for n in names), kind
    for state in set(world.cities["state"]):
        assert renaming.name(state) == state
    assert 1 <= renaming.days <= 60

    renamed = rename_world(world, renaming)
    assert categories(renamed) == expected
    old, new = set(world.flights["flight_number"]), list(renamed.flights["flight_number"])
    assert len(set(new)) == len(old) and not set(new) & old  # injective, and only fresh numbers
    assert all(re.fullmatch(r"F\d{4}", n) for n in new)
    assert sorted(set(renamed.cities["state"])) == sorted(set(world.cities["state"]))


def test_every_name_number_and_date_of_a_trajectory_is_renamed_and_nothing_else(world, episodes):
    _, rows = episodes
    renaming = draw_renaming(Vocabulary(world), random.Random(1))
    renamed_world = rename_world(world, renaming)  # where the renamed values exist
    images: dict[tuple[str, str], str] = {}
    for row in rows:
        renamed = rename_messages(row["messages"], renaming)
        assert [m["role"] for m in renamed] == [m["role"] for m in row["messages"]]
        for before, after in zip(row["messages"], renamed):
            old, new = occurrences(before["content"], world), occurrences(after["content"], renamed_world)
            assert skeleton(before["content"], old) == skeleton(after["content"], new)
            assert [k for _, k, _ in old] == [k for _, k, _ in new]
            for (_, kind, a), (_, _, b) in zip(old, new):
                assert a != b, (kind, a)  # no original value is left in its place
                assert images.setdefault((kind, a), b) == b  # the same value always becomes the same one
    assert {k for k, _ in images} == {"city", "accommodations", "restaurants", "attractions", "flight", "date"}
    for kind in ("city", "accommodations", "restaurants", "attractions", "flight"):
        pairs = [(a, b) for (k, a), b in images.items() if k == kind]
        assert len({b for _, b in pairs}) == len(pairs), kind  # injective
    flights = set(world.flights["flight_number"])
    assert all(b not in flights and len(a) == len(b) for (k, a), b in images.items() if k == "flight")
    shifts = {(pl.Series([b]).str.to_date() - pl.Series([a]).str.to_date()).dt.total_days()[0] for (k, a), b in images.items() if k == "date"}
    assert shifts == {renaming.days}


def test_within_the_world_flights_swap_among_its_own_and_dates_stay(world, episodes):
    """What a tokenizer with one token per world identifier needs: every renamed value is one of the world's."""
    _, rows = episodes
    vocabulary = Vocabulary(world)
    renaming = draw_renaming(vocabulary, random.Random(0), within_world=True)
    assert renaming.days == 0
    assert renaming.names == draw_renaming(vocabulary, random.Random(0)).names  # the same names swapped as in the other mode
    renamed = rename_world(world, renaming)
    old, new = list(world.flights["flight_number"]), list(renamed.flights["flight_number"])
    assert set(new) == set(old) and len(set(new)) == len(set(old))  # a bijection of the world's flight numbers
    assert sum(a == b for a, b in zip(old, new)) <= 1  # each flight another's number (the last draw may be left itself)
    assert renamed.flights["date"].to_list() == world.flights["date"].to_list()
    text = "\n".join(m["content"] for row in rows for m in row["messages"])
    after = rename_text(text, draw_renaming(vocabulary, random.Random(1), within_world=True))
    assert DATE.findall(after) == DATE.findall(text)
    flights = set(old)
    before_flights = [f for f in FLIGHT.findall(text) if f in flights]
    after_flights = [f for f in FLIGHT.findall(after) if f in flights]
    assert len(before_flights) == len(after_flights) > 0 and before_flights != after_flights


@pytest.mark.parametrize("within_world", [False, True])
def test_a_renamed_episode_is_an_episode_of_the_renamed_world(world, episodes, within_world):
    """Its plans get the original verdicts there (and fail in the original world), and its tools answer as it says."""
    queries, rows = episodes
    assert Counter(r["success"] for r in rows).keys() == {True, False}  # passing and failing plans both
    for seed, row in enumerate(rows):
        renaming = draw_renaming(Vocabulary(world), random.Random(seed), within_world)
        renamed_row = rename_value(row, renaming)
        renamed_world = rename_world(world, renaming)
        query = Query.model_validate(rename_value(queries[row["query_id"]].to_row(), renaming))
        if row["answer"]:
            plan = format_rules(renamed_row["answer"], query)
            assert evaluate_plan(query, plan, index_for(renamed_world)).to_dict() == row["evaluation"]
            assert not evaluate_plan(query, plan, index_for(world)).final_pass
        tools = {t.name: t for t in TravelTools(renamed_world).as_tools()}
        messages = renamed_row["messages"]
        for call, reply in zip(messages, messages[1:]):
            if call["role"] != "assistant" or reply["role"] != "tool" or reply["content"].startswith(("Error:", "No results (")):
                continue  # injected faults
            (action,) = parse_action(call["content"]).tool_calls
            answer = tools[action.name].execute(action.arguments).content
            # Rows keep the original's order (a state's cities are listed alphabetically, ties
            # by name), and past the row cap a tie may show another row.
            items = lambda text: Counter(re.split(r", |\n", text))  # noqa: E731
            assert answer.count("\n") == reply["content"].count("\n")
            assert items(answer) == items(reply["content"]) or "more)" in answer


def test_the_same_seed_renames_alike_and_another_seed_differently(world, episodes):
    _, rows = episodes
    vocabulary = Vocabulary(world)

    def renamed(seed: int) -> str:
        rng = random.Random(seed)
        return json.dumps([rename_value(row, draw_renaming(vocabulary, rng)) for row in rows], sort_keys=True)

    assert renamed(5) == renamed(5) != renamed(6)


def test_names_that_cannot_be_told_apart_stay(world):
    """A place named like a state, a room type, a cuisine or a placeholder keeps its name; so does text around it."""
    state = world.cities["state"][0]
    odd = {0: state, 1: "Private room", 2: "Indian", 3: "-"}
    restaurants = world.restaurants.with_columns(
        pl.Series("name", [odd.get(i, n) for i, n in enumerate(world.restaurants["name"])])
    )
    bent = Sandbox(**{**world.tables(), "restaurants": restaurants})
    vocabulary = Vocabulary(bent)
    assert not set(odd.values()) & set(vocabulary.categories["restaurants"])
    hotel = world.accommodations["name"][0]
    text = f"Cities of {state}: x.\n{hotel} | Private room | $81\nBreakfast: - ; Indian | $20"
    renaming = draw_renaming(vocabulary, random.Random(0))
    assert renaming.name(hotel) != hotel
    assert rename_text(text, renaming) == text.replace(hotel, renaming.name(hotel))


@pytest.fixture(scope="module")
def filter_inputs(world, episodes, tmp_path_factory):
    from star.models.tiny import TinySpec, corpus_from_trajectories, make_tiny
    from star.travel.world.synthetic import entity_names

    _, rows = episodes
    root = tmp_path_factory.mktemp("filter")
    world.save(root / "world")
    (root / "trajectories.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    corpus = corpus_from_trajectories([r["messages"] for r in rows], json.loads(rows[0]["tools"]))
    make_tiny(root / "base", corpus, entity_names(world), TinySpec(vocab_size=600, hidden_size=64, num_layers=1, num_heads=2))
    return root


@pytest.fixture
def direct_tasks(monkeypatch):
    """The filter flow as the stage runs it, its tasks called directly (no Prefect run)."""
    import flows.filter

    monkeypatch.setattr(flows.filter, "select_trajectories", flows.filter.select_trajectories.fn)
    monkeypatch.setattr(flows.filter, "save_selection", flows.filter.save_selection.fn)


def run_filter(root, copies: int, within_world: bool = False):
    import flows.filter
    from star.config import EnvParams, ModelParams
    from star.travel.domain import TravelDomain
    from star.travel.specs import FilterParams

    params = FilterParams(examples=8, max_tokens=4000, rename_copies=copies, rename_within_world=within_world)
    out = root / f"sft{copies}{'w' * within_world}"
    domain = TravelDomain({"filter": params, "env": EnvParams()}, root / "world")
    metrics = flows.filter.filter_flow.fn(domain, ModelParams(), root / "trajectories.jsonl", root / "base", out)
    return params, metrics, (out / "train.jsonl").read_text()


def test_the_filter_follows_each_row_with_its_renamed_copies(filter_inputs, direct_tasks):
    root = filter_inputs
    params, plain_metrics, plain = run_filter(root, 0)
    _, metrics, augmented = run_filter(root, 2)
    # Without copies the set is what the selection alone writes, as before the knob existed.
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(root / "base")
    kept, _ = select(
        [json.loads(line) for line in (root / "trajectories.jsonl").read_text().splitlines()],
        require=params.require,
        max_tokens=params.max_tokens,
        count_tokens=lambda r: len(tokenizer.apply_chat_template(r["messages"], tokenize=True, return_dict=False)),
        size=params.examples,
        levels=params.levels,
        seed=params.seed,
    )
    assert plain == "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept)
    assert "renamed_copies" not in plain_metrics

    lines = augmented.splitlines()
    assert len(lines) == 3 * len(plain.splitlines()) == 3 * len(kept) and metrics["renamed_copies"] == 2 * len(kept)
    rows = [json.loads(line) for line in lines]
    assert [line for line, r in zip(lines, rows) if "renamed" not in r] == plain.splitlines()
    for original, *copies in zip(rows[::3], rows[1::3], rows[2::3]):
        assert [c["renamed"] for c in copies] == [1, 2]
        assert {c["query_id"] for c in copies} == {original["query_id"]}
        assert len({json.dumps(r["messages"]) for r in (original, *copies)}) == 3
        # one token per name, one per digit: the built-in tokenizer counts a copy as its original
        assert [c["tokens"] for c in copies] == [original["tokens"]] * 2
    assert run_filter(root, 2)[2] == augmented  # byte for byte

    # Within the world: the copies' flight numbers and dates are all the world's, and differ from the originals'.
    inside = [json.loads(line) for line in run_filter(root, 1, within_world=True)[2].splitlines()]
    world_flights = set(pl.read_parquet(root / "world/flights.parquet")["flight_number"])
    for original, copy in zip(inside[::2], inside[1::2]):
        assert copy["renamed"] == 1 and copy["tokens"] == original["tokens"]
        assert DATE.findall(json.dumps(copy["messages"])) == DATE.findall(json.dumps(original["messages"]))
        assert set(WORLD_FLIGHT.findall(json.dumps(copy["messages"]))) <= world_flights
    assert any(WORLD_FLIGHT.findall(json.dumps(c["messages"])) != WORLD_FLIGHT.findall(json.dumps(o["messages"])) for o, c in zip(inside[::2], inside[1::2]))


def test_copies_over_the_token_limit_are_dropped(world, episodes):
    from star.travel.domain import TravelDomain
    from star.travel.specs import FilterParams

    _, rows = episodes
    stats = Counter()
    domain = TravelDomain({"filter": FilterParams(max_tokens=100, rename_copies=3)}, Path("unused"))
    domain.sandbox = world  # the world in hand, instead of one loaded from disk
    out = domain.augment(rows[:4], lambda r: 101 if "renamed" in r else 1, stats)
    assert out == rows[:4] and stats["dropped_renamed_too_long"] == 12 and stats["renamed_copies"] == 0
