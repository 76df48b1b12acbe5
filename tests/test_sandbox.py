import hashlib

import polars as pl

from star.travel.specs import WorldSpec
from star.travel.world.sandbox import SCHEMA, Sandbox
from star.travel.world.synthetic import entity_names, generate_world


def test_both_sources_share_the_schema(real_sandbox, synthetic_sandbox):
    for name in SCHEMA:
        real, synthetic = getattr(real_sandbox, name), getattr(synthetic_sandbox, name)
        assert real.schema == synthetic.schema == pl.Schema(SCHEMA[name]), name
        assert real.height > 0 and synthetic.height > 0, name


def test_real_database_row_counts(real_sandbox):
    # Row counts of the public files (header excluded).
    assert real_sandbox.accommodations.height == 5047
    assert real_sandbox.attractions.height == 5302
    assert real_sandbox.flights.height == 9207
    assert real_sandbox.distances.height == 17602
    assert real_sandbox.restaurants.height == 9551
    assert real_sandbox.cities.height == 312
    assert real_sandbox.state_of("Sarasota") == "Florida"


def test_save_and_load_round_trip(tmp_path, real_sandbox):
    real_sandbox.save(tmp_path / "world")
    loaded = Sandbox.load(tmp_path / "world")
    for name, frame in real_sandbox.tables().items():
        assert loaded.tables()[name].equals(frame), name
    assert not list(tmp_path.glob(".tmp-*"))


def _digest(sandbox: Sandbox, directory) -> str:
    sandbox.save(directory)
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(directory.iterdir()))).hexdigest()


def test_synthetic_world_is_deterministic(tmp_path):
    a = _digest(generate_world(WorldSpec(seed=3)), tmp_path / "a")
    b = _digest(generate_world(WorldSpec(seed=3)), tmp_path / "b")
    c = _digest(generate_world(WorldSpec(seed=4)), tmp_path / "c")
    assert a == b != c


def test_synthetic_world_size_follows_spec():
    spec = WorldSpec(seed=1, states=2, cities_per_state=3, restaurants_per_city=5, num_dates=4)
    world = generate_world(spec)
    assert world.cities.height == 6 and len(world.states()) == 2
    assert world.restaurants.height == 30
    assert set(world.flights["date"]) <= {f"2022-03-0{d}" for d in range(1, 5)}
    # every flight route runs both ways, so round trips exist
    routes = set(zip(world.flights["origin"], world.flights["dest"]))
    assert all((b, a) in routes for a, b in routes)


def test_synthetic_entity_names_are_unique_plain_words(synthetic_sandbox):
    names = entity_names(synthetic_sandbox)
    cities = synthetic_sandbox.cities["city"].to_list()
    assert len(cities) == len(set(cities))
    assert synthetic_sandbox.restaurants["name"].n_unique() == synthetic_sandbox.restaurants.height
    assert all(n.replace(" ", "").isalpha() for n in names)
