import pytest
from test_format import FakeOpenAI  # a real HTTP server speaking the chat-completions protocol

from star.travel.specs import ParaphraseSpec, SynthesisSpec
from star.travel.world.paraphrase import ParaphraseUnavailable, facts, paraphrase
from star.travel.world.synthesize import Synthesizer


@pytest.fixture(scope="module")
def queries(synthetic_sandbox):
    return Synthesizer(synthetic_sandbox, SynthesisSpec(seed=4, sizes={"train": 3, "validation": 0, "test": 0})).run()["train"]


def test_faithful_rewording_is_kept_and_a_lossy_one_rejected(queries):
    q = queries[0]
    faithful = " ".join([f"Going {q.org} -> {q.dest} between {q.date[0]} and {q.date[-1]}; {q.people_number} of us, ${q.budget} total.", *facts(q)[6:]])
    server = FakeOpenAI([faithful, "Somewhere nice, cheap, soon."])
    try:
        spec = ParaphraseSpec(enabled=True, base_url=server.base_url, model="m", concurrency=1)
        out, counts = paraphrase(queries[:2], spec)
    finally:
        server.close()
    assert out[0].query == faithful and out[0].org == q.org
    assert out[1].query == queries[1].query  # the lossy reply is not used
    assert counts == {"paraphrased": 1, "rejected": 1}
    assert "Keep every name" in server.requests[0]["messages"][0]["content"]


def test_dead_server_is_a_clear_error(queries):
    spec = ParaphraseSpec(enabled=True, base_url="http://127.0.0.1:9/v1", timeout=1, retries=0)
    with pytest.raises(ParaphraseUnavailable, match="127.0.0.1:9"):
        paraphrase(queries, spec)
