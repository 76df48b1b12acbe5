import importlib.util
import json
import math
import os
import random
import socket
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from star.agent.backend import BackendError, Generation, end_of_turn, make_backend
from star.agent.hf_backend import TransformersBackend
from star.agent.openai_backend import OpenAIBackend
from star.agent.rollout import STOP_STRINGS, RolloutLimits, run_episodes
from star.env.faults import FAULTS
from star.env.teacher import hash_seed
from star.models.tiny import build_model, corpus_from_trajectories, train_tokenizer
from star.travel.env import TravelEnv
from star.travel.planner.distill import ExpertTeacher, run_episode
from star.travel.planner.expert import Expert
from star.travel.specs import SynthesisSpec
from star.travel.world.sandbox_index import index_for
from star.travel.world.synthesize import Synthesizer
from star.travel.world.synthetic import entity_names
from star.travel.world.tools import TravelTools

LONG = RolloutLimits(max_turns=40, max_new_tokens=4096, max_total_tokens=100_000)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def world(synthetic_sandbox):
    spec = SynthesisSpec(sizes={"train": 30, "validation": 0, "test": 0})
    queries = Synthesizer(synthetic_sandbox, spec).run()["train"]
    tools = TravelTools(synthetic_sandbox)
    index = index_for(synthetic_sandbox)
    # Mistakes and faults, so episodes hold invalid calls, corrections and errors.
    rows = [
        run_episode(ExpertTeacher(Expert(mistake_rate=0.3)), tools, index, q, 0, seed=0, max_turns=30, fault_rate=0.2)
        for q in queries
    ]
    schemas = TravelEnv(tools).tool_schemas()
    corpus = corpus_from_trajectories([r["messages"] for r in rows], schemas)
    tok = train_tokenizer(corpus, entity_names(synthetic_sandbox), 1000)
    model = build_model(tok, hidden_size=64, num_layers=2, num_heads=2).eval()
    lively = livelier(build_model(tok, hidden_size=64, num_layers=2, num_heads=2).eval())
    return dict(queries=queries, tools=tools, rows=rows, schemas=schemas, tok=tok, model=model, lively=lively)


def livelier(model):
    """Large random weights: greedy output then depends on the context (a fresh model's is one token repeated)."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    return model


def expert_envs(world, fault_rate=0.2, max_turns=30):
    # The seeds distillation used, so the same turns meet the same observations.
    return [
        TravelEnv(world["tools"], max_turns=max_turns, fault_rate=fault_rate, seed=hash_seed(0, "faults", q.idx, 0))
        for q in world["queries"]
    ]


def plain_envs(world, n, max_turns=12, fault_rate=0.0):
    return [TravelEnv(world["tools"], max_turns=max_turns, fault_rate=fault_rate, seed=i) for i in range(n)]


class Replay:
    """Plays the expert's recorded turns as if generated; ends odd turns with eos, even ones at the stop string."""

    token_level = True

    def __init__(self, world, lead=()):
        self.tok = world["tok"]
        self.lead = list(lead)  # turns played before the expert's
        self.turns = {
            r["messages"][1]["content"]: [m["content"] for m in r["messages"] if m["role"] == "assistant"]
            for r in world["rows"]
        }
        self.eos_ids = {self.tok.eos_token_id}

    def generate(self, prompts, max_new_tokens, stop=(), temperature=None):
        out = []
        for p in prompts:
            turn = sum(m["role"] == "assistant" for m in p.messages)
            turns = self.lead + self.turns[p.messages[1]["content"]]
            ids = self.tok.encode(turns[turn], add_special_tokens=False)
            if turn % 2:
                out.append(Generation(ids + [self.tok.eos_token_id], [-0.5] * (len(ids) + 1), "eos"))
            else:
                out.append(Generation(ids, [-0.5] * len(ids), "stop"))
        return out


def rendered_ids(tok, messages, schemas, generation_prompt=False):
    encoded = tok.apply_chat_template(messages, tools=schemas, tokenize=True, add_generation_prompt=generation_prompt)
    return encoded["input_ids"]


def spans(mask):
    """(start, end, value) runs of equal mask values."""
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((start, i, mask[start]))
            start = i
    return runs


def check_masks(tok, traj):
    """Mask 1 exactly on the model's turns: each mask-1 run decodes to one assistant message."""
    decode = lambda ids: tok.decode(ids, skip_special_tokens=False)  # noqa: E731
    ids, mask = traj.completion_ids, traj.completion_mask
    assert len(ids) == len(mask) and set(mask) <= {0, 1}
    turns = [m["content"] for m in traj.messages if m["role"] == "assistant"]
    model_runs = [decode(ids[a:b]) for a, b, v in spans(mask) if v == 1]
    assert [t.removesuffix("<|im_end|>") for t in model_runs] == [t for t in turns if t]
    template_text = "".join(decode(ids[a:b]) for a, b, v in spans(mask) if v == 0)
    for m in traj.messages[2:]:
        if m["role"] != "assistant":
            assert m["content"] in template_text  # every observation is a mask-0 token
            assert all(m["content"] not in run for run in model_runs) or not m["content"]


# -- token bookkeeping ----------------------------------------------------------


@pytest.mark.parametrize("lead", [(), ("<think>Not sure.</think>\nLet me see", "<tool_call>{bad json</tool_call>")])
def test_token_list_equals_full_rendering_for_expert_turns(world, lead):
    """Expert turns fed as generated; `lead` adds malformed turns first, answered by corrections."""
    tok = world["tok"]
    trajs = run_episodes(Replay(world, lead), tok, expert_envs(world), world["queries"], LONG, progress=False)
    assert len(trajs) == 30
    for traj, row in zip(trajs, world["rows"]):
        skip = 2 * len(lead)
        assert traj.messages[:2] + traj.messages[2 + skip :] == row["messages"]  # same observations
        assert all(m["role"] == "user" and m["content"].startswith("Error") for m in traj.messages[3 : 2 + skip : 2])
        assert traj.token_ids == rendered_ids(tok, traj.messages, world["schemas"])
        assert traj.prompt_ids == rendered_ids(tok, traj.messages[:2], world["schemas"], generation_prompt=True)
        assert traj.answer == row["answer"] and traj.turns == row["turns"] + len(lead) and not traj.truncated
        check_masks(tok, traj)
        # eos turns keep the model's <|im_end|> (mask 1); stop-string turns get it from the template (mask 0)
        eos = tok.eos_token_id
        for _, b, v in spans(traj.completion_mask):
            if v == 1:
                stopped = traj.completion_ids[b - 1] != eos
                assert (traj.completion_ids[b] == eos) == stopped
        assert traj.finish_reasons == ["stop", "eos"] * (traj.turns // 2) + ["stop"] * (traj.turns % 2)
        assert all(lp == (-0.5 if m else 0.0) for lp, m in zip(traj.logprobs, traj.completion_mask))
        assert len(traj.env.infos) == len(traj.env.calls) == traj.turns
    kinds = {k for t in trajs for step in t.env.calls for k in step}
    assert {"ok", "fault", "empty"} <= kinds and ("invalid" in kinds) == bool(lead)


def test_real_backend_masks_logprobs_and_text(world):
    tok, model = world["tok"], world["model"]
    backend = TransformersBackend(model, tok, temperature=1.0, seed=0)
    limits = RolloutLimits(max_turns=3, max_new_tokens=24, max_total_tokens=4096)
    trajs = run_episodes(backend, tok, plain_envs(world, 6), world["queries"][:6], limits, progress=False)
    for traj in trajs:
        assert 1 <= traj.turns <= 3
        check_masks(tok, traj)
        assert len(traj.logprobs) == len(traj.completion_ids)
        assert all(math.isfinite(lp) and lp <= 0.0 for lp in traj.logprobs)
        assert all(lp == 0.0 for lp, m in zip(traj.logprobs, traj.completion_mask) if m == 0)
        assert any(lp < 0.0 for lp in traj.logprobs)
        # Sampled tokens need not be the tokenizer's own split of their text, so compare text.
        full_text = tok.apply_chat_template(traj.messages, tools=world["schemas"], tokenize=False)
        assert tok.decode(traj.token_ids, skip_special_tokens=False) == full_text
    # Seeded: the same run gives the same tokens.
    backend = TransformersBackend(model, tok, temperature=1.0, seed=0)
    again = run_episodes(backend, tok, plain_envs(world, 6), world["queries"][:6], limits, progress=False)
    assert [t.token_ids for t in again] == [t.token_ids for t in trajs]


# -- the transformers backend ---------------------------------------------------


def prompts_of(world, n):
    out = []
    for env, q in zip(plain_envs(world, n), world["queries"]):
        env.reset(q)
        out.append(rendered_ids(world["tok"], env.history, world["schemas"], generation_prompt=True))
    return out


def test_batched_greedy_matches_one_by_one(world):
    tok, model = world["tok"], world["lively"]
    prompts = prompts_of(world, 5)
    prompts[1] = prompts[1][:-40] + prompts[3][-40:]  # lengths differ, so rows are padded
    assert len({len(p) for p in prompts}) > 1
    batched = TransformersBackend(model, tok, temperature=0.0).generate(prompts, 20)
    for prompt, gen in zip(prompts, batched):
        alone = TransformersBackend(model, tok, temperature=0.0).generate([prompt], 20)[0]
        assert gen.token_ids == alone.token_ids
        assert gen.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
        with torch.no_grad():
            plain = model.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False)[0, len(prompt) :]
        assert gen.token_ids == plain.tolist()[: len(gen.token_ids)]


def gqa_model(tok):
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    return livelier(Qwen2ForCausalLM(config).eval())


@pytest.mark.parametrize("which", ["tiny", "gqa"])
def test_kept_cache_and_shared_prefix_change_nothing(world, which):
    """Multi-turn greedy rollouts with the KV cache kept across turns equal plain generate every turn."""
    tok = world["tok"]
    model = world["lively"] if which == "tiny" else gqa_model(tok)
    limits = RolloutLimits(max_turns=3, max_new_tokens=16)
    # Extra stop strings end some rows early, so the kept cache has holes.
    stop = (*STOP_STRINGS, "Museum", "Cafe")
    runs = {}
    for reuse in (True, False):
        backend = TransformersBackend(model, tok, temperature=0.0, reuse_cache=reuse)
        envs, tasks = plain_envs(world, 8), world["queries"][:8]
        runs[reuse] = run_episodes(backend, tok, envs, tasks, limits, stop=stop, progress=False)
    assert sum(t.turns for t in runs[True]) > 8
    finishes = [f for t in runs[True] for f in t.finish_reasons]
    assert "stop" in finishes and "length" in finishes
    for a, b in zip(runs[True], runs[False]):
        assert a.token_ids == b.token_ids and a.completion_mask == b.completion_mask
        # the two paths sum attention in a different order: equal to 1e-4, relative
        assert a.logprobs == pytest.approx(b.logprobs, rel=1e-4, abs=1e-4)


def test_stop_strings_end_the_turn(world):
    tok, model = world["tok"], world["lively"]
    prompt = prompts_of(world, 1)[0]
    backend = TransformersBackend(model, tok, temperature=0.0)
    free = backend.generate([prompt], 24)[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 24
    stop = tok.decode(free.token_ids[10:12])
    cut = TransformersBackend(model, tok, temperature=0.0).generate([prompt], 24, stop=[stop])[0]
    assert cut.finish_reason == "stop"
    assert cut.token_ids == free.token_ids[: len(cut.token_ids)] and len(cut.token_ids) <= 12
    assert stop in tok.decode(cut.token_ids) and stop not in tok.decode(cut.token_ids[:-1])
    assert end_of_turn(tok, free.token_ids, {tok.eos_token_id}, [stop]) == (len(cut.token_ids), "stop")


def test_stop_strings_are_found_where_decoding_every_window_finds_them(world):
    """Decoding only at tokens that could end a stop string cuts where decoding every position cuts."""
    tok = world["tok"]
    rng = random.Random(0)
    texts = ["</tool_call>", "</answer>", "Museum", "Cafe]", "ends → here", "déjà vu"]
    for stop in (["</tool_call>", "</answer>"], ["Museum", "e]"], ["→ h"], ["à v", "</answer>"]):
        window = max(len(s.encode()) for s in stop) + 1
        found = 0
        for _ in range(200):
            ids = [rng.randrange(len(tok)) for _ in range(rng.randrange(1, 12))]
            ids += tok.encode(" " + rng.choice(texts) + " ", add_special_tokens=False)
            ids += [rng.randrange(len(tok)) for _ in range(rng.randrange(0, 12))]
            expected = (len(ids), "length")
            for j in range(len(ids)):
                if any(s in tok.decode(ids[max(0, j + 1 - window) : j + 1], skip_special_tokens=False) for s in stop):
                    expected = (j + 1, "stop")
                    break
            found += expected[1] == "stop"
            assert end_of_turn(tok, ids, set(), stop) == expected, (stop, ids)
        assert found > 20  # the stop strings did occur


# -- limits ---------------------------------------------------------------------


def test_max_turns_ends_episodes_truncated(world):
    tok = world["tok"]
    limits = RolloutLimits(max_turns=3)
    trajs = run_episodes(Replay(world), tok, expert_envs(world), world["queries"], limits, progress=False)
    for traj in trajs:
        assert traj.turns == 3 and traj.truncated and traj.answer is None
        assert traj.messages[-1]["role"] != "assistant"  # the last observation is recorded
        assert traj.token_ids == rendered_ids(tok, traj.messages, world["schemas"])  # no dangling generation prompt


def test_env_max_turns_truncates_through_the_engine(world):
    envs = expert_envs(world, max_turns=2)
    trajs = run_episodes(Replay(world), world["tok"], envs, world["queries"], LONG, progress=False)
    assert all(t.turns == 2 and t.truncated for t in trajs)
    assert all(t.env.infos[-1].get("truncated") for t in trajs)


def test_max_total_tokens_ends_episodes_cleanly(world):
    tok = world["tok"]
    prompt_len = len(prompts_of(world, 1)[0])
    limit = prompt_len + 150
    limits = RolloutLimits(max_turns=40, max_new_tokens=4096, max_total_tokens=limit)
    trajs = run_episodes(Replay(world), tok, expert_envs(world), world["queries"], limits, progress=False)
    for traj in trajs:
        assert traj.truncated and traj.answer is None
        assert traj.token_ids == rendered_ids(tok, traj.messages, world["schemas"])
        # No model token past the budget; only the env's last reply may run over.
        last_model = max(i for i, m in enumerate(traj.completion_mask) if m == 1)
        assert len(traj.prompt_ids) + last_model < limit


def test_max_new_tokens_cuts_the_turn_and_the_episode_goes_on(world):
    tok, model = world["tok"], world["model"]
    limits = RolloutLimits(max_turns=3, max_new_tokens=5)
    backend = TransformersBackend(model, tok, temperature=0.0)
    trajs = run_episodes(backend, tok, plain_envs(world, 3), world["queries"][:3], limits, progress=False)
    for traj in trajs:
        assert traj.turns == 3 and traj.truncated
        assert traj.finish_reasons == ["length"] * 3
        runs = [(a, b) for a, b, v in spans(traj.completion_mask) if v == 1]
        assert all(b - a == 5 for a, b in runs)
        # the template's <|im_end|> closes each cut turn, as a mask-0 token
        assert all(traj.completion_ids[b] == tok.eos_token_id and traj.completion_mask[b] == 0 for _, b in runs)


def test_a_run_of_unparseable_turns_ends_the_episode(world):
    # garbage, a parseable call (it resets the run), then garbage again; the expert's turns after that
    lead = ["no call here", '<tool_call>{"name": "SearchCity", "arguments": {"state": "x"}}</tool_call>', "??", "??", "??"]
    tok = world["tok"]
    for limit, ends_at in ((2, 4), (3, 5)):
        limits = RolloutLimits(max_turns=12, max_invalid_turns=limit)
        trajs = run_episodes(Replay(world, lead), tok, expert_envs(world)[:2], world["queries"][:2], limits, progress=False)
        assert all(t.turns == ends_at and t.truncated and t.answer is None for t in trajs), [t.turns for t in trajs]
        assert all(t.token_ids == rendered_ids(tok, t.messages, world["schemas"]) for t in trajs)
    unlimited = run_episodes(Replay(world, lead), tok, expert_envs(world)[:2], world["queries"][:2], RolloutLimits(max_turns=12), progress=False)
    assert all(t.turns > 5 for t in unlimited)


# -- environment faults ---------------------------------------------------------


def test_fault_injection_is_active_through_the_engine(world):
    envs = expert_envs(world, fault_rate=1.0)
    trajs = run_episodes(Replay(world), world["tok"], envs, world["queries"], LONG, progress=False)
    tool_messages = [m for t in trajs for m in t.messages if m["role"] == "tool"]
    assert len(tool_messages) > 30
    assert all(m["content"] in FAULTS for m in tool_messages)
    tool_steps = [step for t in trajs for step, info in zip(t.env.calls, t.env.infos) if info["kind"] == "tool"]
    assert tool_steps and all(kind == "fault" for step in tool_steps for kind in step)


# -- message-based backends -----------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_openai_backend_dead_port_fails_fast_and_clearly(monkeypatch):
    monkeypatch.setenv("STAR_TEST_KEY", "sk-very-secret")
    port = free_port()
    backend = OpenAIBackend(f"http://127.0.0.1:{port}/v1", "m", api_key_env="STAR_TEST_KEY", timeout=2, retries=1)
    start = time.monotonic()
    with pytest.raises(BackendError) as err:
        backend.generate([_prompt()], 16)
    assert time.monotonic() - start < 10
    message = str(err.value)
    assert f"127.0.0.1:{port}" in message and "2 attempts" in message
    assert "sk-very-secret" not in message and "sk-very-secret" not in repr(backend.__dict__)


def _prompt():
    from star.agent.backend import Prompt

    return Prompt([1, 2, 3], [{"role": "user", "content": "hi"}])


def expert_chat(turns: dict, seen: list):
    """Answers chat completions with the expert's turns, dropping the stop string as servers do."""

    def answer(body: dict) -> tuple[int, str]:
        seen.append(body)
        messages = body["messages"]
        text = turns[messages[1]["content"]][sum(m["role"] == "assistant" for m in messages)]
        for s in body.get("stop") or []:
            text = text.split(s)[0]
        reply = {
            "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        }  # fmt: skip
        return 200, json.dumps(reply)

    return answer


def test_openai_backend_text_path_through_the_engine(world, reply_server):
    tok = world["tok"]
    seen: list = []
    backend = make_backend("openai", base_url=reply_server(expert_chat(Replay(world).turns, seen)), model="m", concurrency=4)
    trajs = run_episodes(backend, tok, expert_envs(world)[:5], world["queries"][:5], LONG, progress=False)
    for traj, row in zip(trajs, world["rows"]):
        assert traj.messages == row["messages"]  # the dropped stop strings were put back
        assert traj.logprobs is None
        assert traj.token_ids == rendered_ids(tok, traj.messages, world["schemas"])
        check_masks(tok, traj)
    assert all(b["tools"] and b["tool_choice"] == "none" for b in seen)


# -- construction ----------------------------------------------------------------


def test_make_backend_and_vllm_import_error(world):
    backend = make_backend("transformers", model=world["model"], tokenizer=world["tok"], temperature=0.0)
    assert isinstance(backend, TransformersBackend) and backend.temperature == 0.0
    with pytest.raises(ValueError, match="unknown backend"):
        make_backend("tgi")
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(ImportError, match="gpu"):
            make_backend("vllm", model="whatever")


def test_tools_argument_sets_the_rendered_schemas(world):
    tok = world["tok"]
    schemas = json.loads(world["rows"][0]["tools"])  # as distillation stores them
    for tools in (schemas, []):
        envs = expert_envs(world)[:3]
        trajs = run_episodes(Replay(world), tok, envs, world["queries"][:3], LONG, tools=tools, progress=False)
        for traj in trajs:
            assert traj.token_ids == rendered_ids(tok, traj.messages, tools or None)
            # stored schemas keep the env's key order, so they render the same prompt
            expected = rendered_ids(tok, traj.messages[:2], world["schemas"] if tools else None, generation_prompt=True)
            assert traj.prompt_ids == expected


def test_every_episode_needs_its_own_env(world):
    env = plain_envs(world, 1)[0]
    with pytest.raises(ValueError, match="own env"):
        run_episodes(Replay(world), world["tok"], [env, env], world["queries"][:2], progress=False)


def test_openai_backend_names_a_reply_that_is_not_json_and_hides_an_echoed_key(monkeypatch, fixed_reply_server):
    monkeypatch.setenv("STAR_TEST_KEY", "sk-very-secret")
    garbled = OpenAIBackend(fixed_reply_server(200, "{not json"), "m", api_key_env="STAR_TEST_KEY", timeout=2, retries=0)
    with pytest.raises(BackendError, match="not JSON"):
        garbled.generate([_prompt()], 16)
    echo = fixed_reply_server(400, '{"error": {"message": "bad key sk-very-secret", "type": "invalid_request_error"}}')
    with pytest.raises(BackendError) as err:
        OpenAIBackend(echo, "m", api_key_env="STAR_TEST_KEY", timeout=2, retries=0).generate([_prompt()], 16)
    assert "(400)" in str(err.value) and "sk-very-secret" not in str(err.value)
