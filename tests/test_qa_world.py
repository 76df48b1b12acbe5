"""The synthetic knowledge world and its questions."""

import re
from collections import Counter

import pytest
from pydantic import ValidationError

from star.qa.data import load_questions, save_questions
from star.qa.specs import QAWorldSpec, QuestionSpec
from star.qa.synthesize import synthesize_questions
from star.qa.world import KnowledgeWorld, build_world, entity_names

SPEC = QuestionSpec(seed=3, sizes={"train": 400, "validation": 50, "test": 50})


@pytest.fixture(scope="module")
def world():
    return build_world(QAWorldSpec(seed=0))


@pytest.fixture(scope="module")
def questions(world):
    return synthesize_questions(world, SPEC)


def test_world_is_byte_deterministic(tmp_path):
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        build_world(QAWorldSpec(seed=seed)).save(tmp_path / name)
    a, b, c = ((tmp_path / n / "world.json").read_bytes() for n in "abc")
    assert a == b != c
    loaded = KnowledgeWorld.load(tmp_path / "a")
    assert loaded == build_world(QAWorldSpec(seed=1))
    assert loaded.passages() == build_world(QAWorldSpec(seed=1)).passages()


def test_names_are_unique_single_words(world):
    names = entity_names(world)
    spec = world.spec
    assert len(names) == len(set(names)) == spec.num_people + spec.num_places + spec.num_countries + spec.num_orgs
    assert all(re.fullmatch(r"[A-Z][a-z]{3,}", n) for n in names)
    assert names == sorted(names)


def test_passages_are_short_and_state_relations(world):
    passages = world.passages()
    assert len(passages) == len(entity_names(world))
    assert max(len(p.text.split()) for p in passages) <= 16
    person = world.people[0]
    text = world.passage(person.name).text
    assert person.birthplace in text and person.employer in text and str(person.born) in text
    org = world.orgs[0]
    assert world.passage(org.name).text == f"{org.name} is a company founded in {org.founded} by {org.founder}. It is based in {org.city}."
    # founders are adults when they found their company
    born = {p.name: p.born for p in world.people}
    assert all(o.founded - born[o.founder] >= 20 for o in world.orgs)


def test_world_spec_is_checked():
    with pytest.raises(ValidationError):
        QAWorldSpec(num_countries=10, num_places=5)
    with pytest.raises(ValidationError):
        QAWorldSpec(planets=3)


def test_questions_are_deterministic_and_unique(world, questions, tmp_path):
    assert synthesize_questions(world, SPEC) == questions
    assert synthesize_questions(world, SPEC.model_copy(update={"seed": 4})) != questions
    every = [q for split in ("train", "validation", "test") for q in questions[split]]
    assert [len(questions[s]) for s in ("train", "validation", "test")] == [400, 50, 50]
    assert len({q.question for q in every}) == len(every)
    assert [q.idx for q in every] == list(range(len(every)))
    save_questions(tmp_path / "q.jsonl", every)
    assert load_questions(tmp_path / "q.jsonl") == every


def test_question_mix_follows_the_spec(world, questions):
    mix = Counter((q.hops, q.kind) for q in questions["train"])
    assert set(mix) == {(h, k) for h in (2, 3, 4) for k in ("bridge", "comparison")}
    assert all(n > 40 for n in mix.values())  # 400 questions over 6 equal cells
    only = synthesize_questions(world, QuestionSpec(sizes={"train": 50}, hops={4: 1.0}, kinds={"comparison": 1.0}))["train"]
    assert {(q.hops, q.kind, q.level) for q in only} == {(4, "comparison", "4hop")}


def test_every_question_is_answerable_from_its_supporting_passages(world, questions):
    by_id = {p.id: p for p in world.passages()}
    for q in questions["train"] + questions["test"]:
        assert len(q.supporting) == len(set(q.supporting)) == q.hops == len(q.plan)
        text = " ".join(f"{by_id[i].title}: {by_id[i].text}" for i in q.supporting)
        assert re.search(rf"\b{q.answer}\b", text), q
        for name in q.plan:  # each hop's entity is in the passages
            assert name in text
        assert q.plan[0] in q.question


def test_answers_follow_the_relations(world):
    qs = synthesize_questions(world, QuestionSpec(seed=7, sizes={"train": 300}))["train"]
    checked = Counter()
    for q in qs:
        m = re.fullmatch(r"In which city was the founder of (\w+) born\?", q.question)
        if m:
            assert q.answer == world.follow(world.follow(m[1], "founded_by"), "born_in")
            checked["bridge"] += 1
        m = re.fullmatch(r"Who was born (earlier|later), (\w+) or (\w+)\?", q.question)
        if m:
            a, b = world.year(m[2]), world.year(m[3])
            first = m[2] if a < b else m[3]
            assert q.answer == (first if m[1] == "earlier" else ({m[2], m[3]} - {first}).pop())
            checked["comparison"] += 1
    assert checked["bridge"] > 0 and checked["comparison"] > 0


def test_a_world_too_small_says_so():
    tiny = build_world(QAWorldSpec(num_people=2, num_places=2, num_countries=1, num_orgs=2))
    with pytest.raises(ValueError, match="too small"):
        synthesize_questions(tiny, QuestionSpec(sizes={"train": 500}, hops={2: 1.0}, kinds={"comparison": 1.0}))
