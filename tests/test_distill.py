import json
from collections import Counter

import pytest

from star.train.filtering import select
from star.travel.planner.distill import ExpertTeacher, run_episode
from star.travel.planner.expert import Expert
from star.travel.specs import SynthesisSpec
from star.travel.world.sandbox_index import index_for
from star.travel.world.synthesize import Synthesizer
from star.travel.world.tools import TravelTools


@pytest.fixture(scope="module")
def setup(synthetic_sandbox):
    spec = SynthesisSpec(seed=2, sizes={"train": 40, "validation": 0, "test": 0}, days={3: 1.0, 5: 1.0, 7: 1.0})
    queries = Synthesizer(synthetic_sandbox, spec).run()["train"]
    return queries, TravelTools(synthetic_sandbox), index_for(synthetic_sandbox)


def distill(setup, *, mistake_rate=0.2, fault_rate=0.1, seed=0):
    queries, tools, index = setup
    teacher = ExpertTeacher(Expert(mistake_rate=mistake_rate, top_k=2, upgrade_prob=0.5))
    return [run_episode(teacher, tools, index, q, s, seed=seed, max_turns=30, fault_rate=fault_rate) for q in queries for s in range(2)]


def dump(rows) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)


def test_expert_distillation_is_byte_deterministic(setup):
    a = dump(distill(setup))
    b = dump(distill(setup))
    c = dump(distill(setup, seed=1))
    assert a == b != c


def test_trajectories_look_like_agent_turns(setup):
    rows = distill(setup, mistake_rate=0.0)
    assert all(r["success"] for r in rows)  # faults are retried, plans pass
    assert sum(r["tool_errors"] for r in rows) > 0
    row = rows[0]
    roles = [m["role"] for m in row["messages"]]
    assert roles[:3] == ["system", "user", "assistant"] and roles[-1] == "assistant"
    assert row["messages"][-1]["content"].startswith("<think>") and "<answer>" in row["messages"][-1]["content"]
    assert [t["function"]["name"] for t in json.loads(row["tools"])] == sorted(t["function"]["name"] for t in json.loads(row["tools"]))


def test_filter_counts_add_up(setup):
    rows = distill(setup, mistake_rate=0.3)
    rows.append(dict(next(r for r in rows if r["success"])))  # an exact duplicate
    rows[1] = {**rows[1], "truncated": True, "answer": None}
    kept, stats = select(
        rows,
        require="final",
        max_tokens=10_000,
        count_tokens=lambda r: sum(len(m["content"]) for m in r["messages"]) // 4,
        size=30,
        levels={"easy": 4, "medium": 3, "hard": 3},
        seed=0,
    )
    reasons = ("failed_evaluation", "malformed", "too_long", "duplicate", "over_quota", "level_not_selected")
    dropped = sum(stats[f"dropped_{r}"] for r in reasons)
    assert stats["total"] == len(rows) == stats["kept"] + dropped
    assert stats["dropped_duplicate"] >= 1 and stats["dropped_failed_evaluation"] > 0
    assert all(r["success"] for r in kept) and len(kept) == stats["kept"] <= 30
    assert Counter(r["level"] for r in kept) == Counter({lvl: stats[f"kept_{lvl}"] for lvl in ("easy", "medium", "hard") if stats[f"kept_{lvl}"]})
    # a tight token limit drops everything as too long
    _, tight = select(rows, require="delivered", max_tokens=1, count_tokens=lambda r: 5, size=30, levels={"easy": 1}, seed=0)
    assert tight["kept"] == 0 and tight["dropped_too_long"] > 0


def test_progress_follows_the_teacher_not_the_address_of_its_server(tmp_path):
    from flows.distill import progress_fingerprint
    from star.config import EnvParams
    from star.travel.domain import TravelDomain
    from star.travel.specs import TeacherParams

    world, queries = tmp_path / "world", tmp_path / "queries.jsonl"
    world.mkdir()
    (world / "flights.parquet").write_bytes(b"flights")
    queries.write_text('{"idx": 0}\n')

    def fingerprint(**openai):
        teacher = TeacherParams.model_validate({"kind": "openai", "openai": openai})
        return progress_fingerprint(TravelDomain({"teacher": teacher, "env": EnvParams()}, world), queries)

    same = fingerprint()
    assert fingerprint(base_url="http://10.0.0.2:9000/v1", timeout=5, retries=0, concurrency=16, api_key_env="OTHER_KEY") == same
    assert fingerprint(model="another-model") != same
    assert fingerprint(temperature=0.1) != same
    queries.write_text('{"idx": 1}\n')
    assert fingerprint() != same
