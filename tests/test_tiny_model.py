import json
import os
import random

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from pydantic import ValidationError
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl.chat_template_utils import (
    add_response_schema,
    get_training_chat_template,
    is_chat_template_prefix_preserving,
    is_chat_template_stop_token_trained,
    qwen2_5_chat_template,
    qwen2_5_training_chat_template,
    supports_tool_calling,
)

from star.models.tiny import IM_END, PAD, SPECIAL_TOKENS, TAG_TOKENS, TinySpec, build_model, corpus_from_trajectories, make_tiny, resolve_model_path, train_tokenizer
from star.travel.env import SYSTEM_PROMPT, TravelEnv
from star.travel.specs import WorldSpec
from star.travel.world.query import Query
from star.travel.world.synthetic import entity_names, generate_world, identifiers
from star.travel.world.tools import TravelTools

SMALL = dict(hidden_size=64, num_layers=2, num_heads=2, max_position_embeddings=4096)


def call(name: str, **arguments: str) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def trajectories(sandbox, n: int, seed: int = 0) -> tuple[list[list[dict]], list[dict]]:
    """Episodes of six tool calls and an answer, as TravelEnv records them."""
    rng = random.Random(seed)
    cities = sandbox.cities.rows(named=True)
    dates = sorted(set(sandbox.flights["date"]))
    env = TravelEnv(TravelTools(sandbox))
    episodes = []
    for _ in range(n):
        a, b = rng.sample(cities, 2)
        start = rng.randrange(len(dates) - 3)
        days = dates[start : start + 3]
        text = f"Plan a 3-day trip from {a['city']} to {b['city']} for 2 people, {days[0]} to {days[-1]}, budget ${rng.randint(8, 40) * 100}."
        env.reset(Query(org=a["city"], dest=b["city"], days=3, visiting_city_number=1, date=days, people_number=2, budget=1000, query=text))
        for name, args in [
            ("SearchCity", dict(state=b["state"])),
            ("SearchFlight", dict(departure=a["city"], destination=b["city"], date=days[0])),
            ("GoogleDistanceMatrix", dict(departure=a["city"], destination=b["city"], mode="taxi")),
            ("SearchAccommodation", dict(city=b["city"])),
            ("SearchRestaurant", dict(city=b["city"])),
            ("SearchAttraction", dict(city=b["city"])),
        ]:
            env.step(f"<think>Next I need {name}.</think>\n" + call(name, **args))
        hotel = env.history[-5]["content"].split(" | ")[0]
        food = [line.split(" | ")[0] for line in env.history[-3]["content"].splitlines()]
        sights = env.history[-1]["content"].splitlines()
        route = [f"from {a['city']} to {b['city']}", b["city"], b["city"]]
        plan = "\n".join(
            f"Day {d + 1}: {route[d]}\n"
            f"Transport: {'Taxi' if d == 0 else '-'}\nBreakfast: -\nAttractions: {sights[d % len(sights)]}\n"
            f"Lunch: {food[0]}\nDinner: {food[1]}\nStay: {hotel}"
            for d in range(3)
        )
        env.step(f"<think>I have what I need.</think>\n<answer>{plan}</answer>")
        episodes.append(list(env.history))
    return episodes, env.tool_schemas()


@pytest.fixture(scope="module")
def world():
    sandbox = generate_world(WorldSpec(seed=0))
    episodes, schemas = trajectories(sandbox, 60)
    return dict(sandbox=sandbox, names=entity_names(sandbox), episodes=episodes, schemas=schemas)


@pytest.fixture(scope="module")
def corpus(world):
    return corpus_from_trajectories(world["episodes"], world["schemas"], SYSTEM_PROMPT)


@pytest.fixture(scope="module")
def tok(world, corpus):
    return train_tokenizer(corpus, world["names"], vocab_size=4096)


@pytest.fixture(scope="module")
def built(tmp_path_factory, world, corpus):
    return make_tiny(tmp_path_factory.mktemp("models") / "tiny", corpus, world["names"], TinySpec(**SMALL))


def sample_names(world) -> list[str]:
    sb = world["sandbox"]
    return [
        sb.cities["city"][0],
        sb.cities["state"][0],
        sb.accommodations["name"][0],
        sb.restaurants["name"][0],
        sb.attractions["name"][0],
    ]


def short_chat(city: str, state: str) -> list[dict]:
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"Plan a trip to {city} on 2022-03-05."},
        {"role": "assistant", "content": "<think>Which cities?</think>\n" + call("SearchCity", state=state)},
        {"role": "tool", "name": "SearchCity", "content": f"{city}, Other"},
        {"role": "assistant", "content": f"<think>Done.</think>\n<answer>Day 1: from {city} to {city}</answer>"},
    ]


# -- tokenizer ----------------------------------------------------------------


def test_entity_names_are_one_id_in_every_context(world, tok):
    for name in sample_names(world):
        ids = tok.encode(name, add_special_tokens=False)
        assert len(ids) == 1, (name, tok.convert_ids_to_tokens(ids))
        for context in (f" {name}", f'"{name}"', f"\n{name}", f"{name},", f"from {name} to", f"({name})"):
            assert tok.encode(context, add_special_tokens=False).count(ids[0]) == 1, (name, context)


def test_identifiers_are_one_id_only_when_asked(world, corpus, tok):
    sb = world["sandbox"]
    flight, day = sb.flights["flight_number"][0], sb.flights["date"][0]
    text = f'Flight {flight} on {day}: {{"date": "{day}"}}\n{flight} | 08:00-09:00 | $90'
    assert {flight, day} <= set(identifiers(sb))
    whole = train_tokenizer(corpus, world["names"] + identifiers(sb), vocab_size=4096)
    ids = whole.encode(text, add_special_tokens=False)
    assert ids.count(whole.convert_tokens_to_ids(flight)) == 2 and ids.count(whole.convert_tokens_to_ids(day)) == 2
    assert whole.decode(ids) == text
    # names alone: the same text is digits, so no single id holds the flight
    assert len(tok.encode(flight, add_special_tokens=False)) > 1


def test_entity_names_keep_their_id_inside_a_rendered_chat(world, tok):
    sb = world["sandbox"]
    city, state = sb.cities["city"][0], sb.cities["state"][0]
    text = tok.apply_chat_template(short_chat(city, state), tools=world["schemas"], tokenize=False)
    ids = tok.encode(text, add_special_tokens=False)
    # query, observation and answer (twice) hold the city; the JSON call holds the state
    assert ids.count(tok.convert_tokens_to_ids(city)) == text.count(city) == 4
    assert ids.count(tok.convert_tokens_to_ids(state)) == text.count(state) == 1
    # and in every real episode: each name occurrence is exactly its one id
    ids_of = {n: tok.convert_tokens_to_ids(n) for n in world["names"]}
    episode = world["episodes"][0]
    text = tok.apply_chat_template(episode, tools=world["schemas"], tokenize=False)
    ids = tok.encode(text, add_special_tokens=False)
    present = [n for n in world["names"] if n in text]
    assert len(present) >= 8
    for name in present:
        assert ids.count(ids_of[name]) == text.count(name), name


def test_no_bpe_merges_spent_on_names(world, tok):
    added = set(tok.get_added_vocab())
    base = {t.replace("Ġ", " ").strip() for t in tok.get_vocab() if t not in added}
    assert not base & set(world["names"])


def test_special_tokens_are_single_ids_and_digits_split(tok):
    for token in SPECIAL_TOKENS + TAG_TOKENS:
        ids = tok.encode(f"x{token}y", add_special_tokens=False)
        assert tok.convert_tokens_to_ids(token) in ids and len(tok.encode(token, add_special_tokens=False)) == 1
    assert tok.eos_token == IM_END and tok.pad_token == PAD
    # tags are plain tokens: decoding without specials (as GRPO does) keeps them
    text = "<think>a</think><tool_call>{}</tool_call><answer>b</answer><|im_end|>"
    assert tok.decode(tok.encode(text, add_special_tokens=False), skip_special_tokens=True) == text.replace(IM_END, "")
    pieces = tok.convert_ids_to_tokens(tok.encode("On 2022-03-07 fly F1234 for $2100, 31 km", add_special_tokens=False))
    digits = [p for p in pieces if any(c.isdigit() for c in p)]
    assert digits and all(len(p) == 1 for p in digits), pieces
    assert "".join(digits) == "2022030712342100" + "31"


# -- chat template and TRL ----------------------------------------------------


def test_chat_template_renders_tools_calls_and_observations(world, tok):
    chat = short_chat("Aaa", "Bbb")
    text = tok.apply_chat_template(chat[:4], tools=world["schemas"], tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\n" + SYSTEM_PROMPT + "\n\n# Tools")
    for schema in world["schemas"]:
        assert json.dumps(schema) in text
    assert "<|im_start|>assistant\n<think>Which cities?</think>\n<tool_call>" in text
    assert "<|im_start|>user\n<tool_response>\nAaa, Other\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_trl_recognises_the_template(tok):
    assert tok.chat_template == qwen2_5_chat_template
    assert supports_tool_calling(tok)
    assert is_chat_template_prefix_preserving(tok)
    assert get_training_chat_template(tok) == qwen2_5_training_chat_template
    assert is_chat_template_stop_token_trained(tok, chat_template=qwen2_5_training_chat_template)
    # GRPO's tool-call parser reads the agent's own format
    parsed = add_response_schema(tok).parse_response(
        '<think>go</think>\n<tool_call>{"name": "SearchCity", "arguments": {"state": "Bbb"}}</tool_call><|im_end|>',
        prefix="<|im_start|>assistant\n",
    )
    assert parsed["tool_calls"][0]["function"] == {"name": "SearchCity", "arguments": {"state": "Bbb"}}


def masked_runs(tokenizer, ids: list[int], mask: list[int]) -> list[str]:
    runs, current = [], []
    for token, keep in zip(ids, mask, strict=True):
        if keep:
            current.append(token)
        elif current:
            runs.append(tokenizer.decode(current))
            current = []
    if current:
        runs.append(tokenizer.decode(current))
    return runs


def test_assistant_mask_is_exactly_the_assistant_turns(world, tok):
    episode = world["episodes"][0]
    out = tok.apply_chat_template(
        episode,
        tools=world["schemas"],
        chat_template=get_training_chat_template(tok),
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    expected = ["\n" + m["content"] + IM_END + "\n" for m in episode if m["role"] == "assistant"]
    assert len(expected) == 7
    assert masked_runs(tok, out["input_ids"], out["assistant_masks"]) == expected
    observation_ids = set(tok.encode(episode[3]["content"], add_special_tokens=False))
    masked = {i for i, keep in zip(out["input_ids"], out["assistant_masks"]) if keep}
    assert tok.convert_tokens_to_ids("<tool_response>") not in masked
    assert observation_ids - masked  # observation text is not trained on


def test_sft_trainer_swaps_in_the_training_template(tmp_path, world, built):
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    tokenizer = AutoTokenizer.from_pretrained(built)
    model = AutoModelForCausalLM.from_pretrained(built)
    rows = [{"messages": e, "tools": world["schemas"]} for e in world["episodes"][:2]]
    args = SFTConfig(output_dir=str(tmp_path), assistant_only_loss=True, max_length=4096, report_to="none", max_steps=1, use_cpu=True, bf16=False)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    assert trainer.chat_template == qwen2_5_training_chat_template
    row = trainer.train_dataset[0]
    trained = [label != -100 for label in row["labels"]]
    expected = ["\n" + m["content"] + IM_END + "\n" for m in world["episodes"][0] if m["role"] == "assistant"]
    assert masked_runs(tokenizer, row["input_ids"], trained) == expected


# -- model --------------------------------------------------------------------


def test_build_model_checks_head_dim(tok):
    with pytest.raises(ValueError, match="multiple of 32"):
        build_model(tok, hidden_size=96, num_heads=2)
    with pytest.raises(ValueError, match="not divisible"):
        build_model(tok, hidden_size=100, num_heads=3)
    with pytest.raises(ValidationError):
        TinySpec(hidden=64)


def test_model_forward_and_generate(tok):
    model = build_model(tok, hidden_size=64, num_layers=1, num_heads=2)
    eos, pad = tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(PAD)
    assert model.config.vocab_size == len(tok)
    assert model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert (model.config.eos_token_id, model.config.pad_token_id, model.config.bos_token_id) == (eos, pad, pad)
    assert model.generation_config.eos_token_id == eos
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, return_dict=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**prompt).logits
        out = model.generate(**prompt, max_new_tokens=1, do_sample=False)
    assert logits.shape == (1, prompt["input_ids"].shape[1], len(tok))
    assert out.shape == (1, prompt["input_ids"].shape[1] + 1)


def test_make_tiny_round_trip_offline(built, tok, corpus):
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in built.iterdir()}
    assert not [p for p in built.parent.iterdir() if p.name.startswith(".tmp-")]
    loaded = AutoTokenizer.from_pretrained(built, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(built, local_files_only=True)
    assert loaded.chat_template == qwen2_5_chat_template
    assert len(loaded) == len(tok) == model.config.vocab_size
    # "e" + combining accent checks the normalizer survives the reload
    for text in corpus[:20] + ["Cafe\u0301 at 07:30"]:
        assert loaded.encode(text, add_special_tokens=False) == tok.encode(text, add_special_tokens=False)
    assert model.generation_config.eos_token_id == loaded.eos_token_id == loaded.convert_tokens_to_ids(IM_END)
    assert model.config.hidden_size == SMALL["hidden_size"] and model.config.num_hidden_layers == SMALL["num_layers"]
    fresh = build_model(tok, **{k: v for k, v in SMALL.items()}, seed=0)
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_make_tiny_is_deterministic(tmp_path, world, corpus, built):
    again = make_tiny(tmp_path / "again", corpus, world["names"], TinySpec(**SMALL))
    other = make_tiny(tmp_path / "other", corpus, world["names"], TinySpec(**SMALL, seed=1))
    for name in ("tokenizer.json", "model.safetensors", "config.json", "generation_config.json"):
        assert (again / name).read_bytes() == (built / name).read_bytes(), name
    assert (other / "tokenizer.json").read_bytes() == (built / "tokenizer.json").read_bytes()
    assert (other / "model.safetensors").read_bytes() != (built / "model.safetensors").read_bytes()
    # rebuilding over an existing directory replaces it in place
    assert make_tiny(tmp_path / "other", corpus, world["names"], TinySpec(**SMALL)) == tmp_path / "other"
    assert (other / "model.safetensors").read_bytes() == (built / "model.safetensors").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again", "other"]


def test_resolve_model_path(tmp_path, built):
    with pytest.raises(FileNotFoundError, match="not built"):
        resolve_model_path("builtin:tiny", tmp_path / "missing")
    assert resolve_model_path("builtin:tiny", built) == str(built)
    assert resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct", built) == "Qwen/Qwen2.5-0.5B-Instruct"
    assert resolve_model_path(str(tmp_path), built) == str(tmp_path)
    with pytest.raises(ValueError, match="unknown built-in"):
        resolve_model_path("builtin:huge", built)


def test_corpus_holds_prompt_schemas_and_every_message(world, corpus):
    assert SYSTEM_PROMPT in corpus
    for schema in world["schemas"]:
        assert json.dumps(schema) in corpus
    assert len(corpus) == 1 + len(world["schemas"]) + len(world["episodes"])
    for episode, text in zip(world["episodes"], corpus[-len(world["episodes"]) :], strict=True):
        assert all(m["content"] in text for m in episode)
        assert text.count("<tool_response>") == 6


def test_entity_names_of_the_real_database_are_all_strings(real_sandbox):
    # A few real hotels have no name: the tokenizer must not get None as a name.
    names = entity_names(real_sandbox)
    assert names and all(isinstance(n, str) and n for n in names)
    assert any(n is None for n in real_sandbox.accommodations["name"])
