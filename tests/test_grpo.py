import math
from types import SimpleNamespace

import pytest
import torch
from pydantic import ValidationError

from star.agent.hf_backend import TransformersBackend
from star.agent.rollout import RolloutLimits
from star.config import GRPOStageParams
from star.models.tiny import TinySpec, corpus_from_trajectories, make_tiny
from star.train.grpo import EpisodeRunner, episode_end, task_prompts, train_grpo, zero_variance_groups
from star.train.grpo_params import GRPOParams
from star.train.process import process_reward, verdicts
from star.travel.env import SYSTEM_PROMPT
from star.travel.planner.distill import ExpertTeacher, run_episode
from star.travel.planner.expert import Expert
from star.travel.play import play
from star.travel.rewards import Scorer
from star.travel.specs import SynthesisSpec, TravelRewardParams
from star.travel.world.sandbox_index import index_for
from star.travel.world.synthesize import Synthesizer
from star.travel.world.synthetic import entity_names
from star.travel.world.tools import TravelTools


def test_zero_variance_groups_are_exactly_the_flat_ones():
    rewards = [1, 1, 0, 1, 0.5, 0.5, 0, 0, 0.2, 0.3]
    assert zero_variance_groups(rewards, 2) == [0, 2, 3]
    assert zero_variance_groups(rewards[:8], 4) == []


class _State:
    global_step = 0


class _Trainer:
    state = _State()
    processing_class = None


def test_two_tasks_with_one_text_stay_two():
    """The rollout finds each prompt's task by its position, not by its text."""
    twins = [SimpleNamespace(query="the same words", idx=i) for i in range(2)]
    prompts = task_prompts(twins, lambda q: q.query, "system")
    assert [m["role"] for m in prompts[0]] == ["system", "user"] and prompts[0][1]["content"] == prompts[1][1]["content"]
    played = []

    def play(batch, seed, prefixes):
        played.extend(q.idx for q in batch)
        return [(None, SimpleNamespace(truncated=False, completion_mask=[1], completion_ids=[0], prompt_ids=[0], logprobs=None)) for _ in batch]

    runner = EpisodeRunner(play, twins, lambda q, env, step: {"reward": float(q.idx)}, GRPOParams(algorithm="grpo", num_generations=2))
    trainer = _Trainer()
    trainer.processing_class = SimpleNamespace(eos_token_id=0)
    out = runner([prompts[1], prompts[1], prompts[0], prompts[0]], trainer)
    assert played == [1, 1, 0, 0] and out["reward"] == [1.0, 1.0, 0.0, 0.0]


def test_dapo_replaces_flat_groups_and_counts_them():
    params = GRPOParams(algorithm="dapo", num_generations=2, dapo_max_tries=3)
    runner = EpisodeRunner(play=None, queries=[SimpleNamespace(query=q) for q in ("q1", "q2", "q3")], scorer=None, params=params)
    outcomes = iter([[0.0, 1.0]])  # the first fresh group has signal

    def fake_play_scored(queries, step, prefixes=None):
        return [(q, None, {"reward": r}) for q, r in zip(queries, next(outcomes))]

    runner._play_scored = fake_play_scored
    results = [("a", None, {"reward": 1.0}), ("a", None, {"reward": 1.0}), ("b", None, {"reward": 0.0}), ("b", None, {"reward": 1.0})]
    kept, dropped = runner._dynamic_sampling(results, step=0)
    assert dropped == 1
    assert [r["reward"] for _, _, r in kept] == [0.0, 1.0, 0.0, 1.0]
    assert kept[2][0] == "b"  # the group with signal is untouched


def test_call_breakdown_keeps_faults_invalid_calls_and_recoveries_apart():
    from star.train.process import call_breakdown

    kinds = ["ok", "fault", "repeated", "invalid", "fault", "fault", "unknown_tool", "error", "empty", "fault"]
    # faults at 1, 4, 5, 9: only the one at 1 is followed by a call that worked (its retry)
    assert call_breakdown(kinds) == {"tool_error_rate": 0.7, "fault_rate": 0.4, "invalid_rate": 0.2, "error_rate": 0.1, "recovery_rate": 0.25}
    assert call_breakdown([]) == {"tool_error_rate": 0.0, "fault_rate": 0.0, "invalid_rate": 0.0, "error_rate": 0.0, "recovery_rate": 0.0}
    assert call_breakdown(["fault", "ok"])["recovery_rate"] == 1.0


def test_process_reward_values():
    values = TravelRewardParams(informative=1.0, repeated=-0.5, invalid=-1.0, failed=0.0)
    assert verdicts(["ok", "empty", "repeated", "invalid", "unknown_tool", "fault", "error", "OK"]) == [
        "informative", "informative", "repeated", "invalid", "invalid", "failed", "failed", "invalid",
    ]
    assert process_reward(verdicts(["ok", "empty", "repeated", "invalid"]), values) == pytest.approx((1 + 1 - 0.5 - 1) / 4)
    assert process_reward(verdicts(["fault", "error"]), values) == 0.0
    assert process_reward([], values) == 0.0
    assert process_reward(["invalid"] * 3, TravelRewardParams(invalid=-5.0)) == -1.0  # clipped


@pytest.mark.parametrize(
    "bad",
    [
        {"epsilon": 0.3, "epsilon_high": 0.2},
        {"algorithm": "arpo", "num_generations": 3},
        {"algorithm": "ppo"},
        {"reward": "SUM"},  # the reward is the domain's section now
        {"num_generations": 1},
        {"beta": -0.1},
        {"learning_rate": 0},
        {"loss_type": "xyz"},
        {"scale_rewards": "rank"},
        {"process": {"weight": 0.1}},
        {"temperature": 0},
        {"steps": 0},
        {"unknown_knob": 1},
    ],
)
def test_every_knob_is_validated(bad):
    with pytest.raises(ValidationError):
        GRPOStageParams.model_validate(bad)


def test_paper_defaults():
    params = GRPOParams()
    assert params.beta == 0.0 and params.epsilon_high > params.epsilon and params.mask_truncated_completions


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, synthetic_sandbox):
    queries = Synthesizer(synthetic_sandbox, SynthesisSpec(seed=3, sizes={"train": 8, "validation": 0, "test": 0})).run()["train"]
    tools, index = TravelTools(synthetic_sandbox), index_for(synthetic_sandbox)
    rows = [run_episode(ExpertTeacher(Expert(0.0)), tools, index, q, 0, seed=0, max_turns=16, fault_rate=0.0) for q in queries]
    corpus = corpus_from_trajectories([r["messages"] for r in rows], [])
    path = make_tiny(tmp_path_factory.mktemp("tiny"), corpus, entity_names(synthetic_sandbox), TinySpec(vocab_size=400, hidden_size=64, num_layers=2, num_heads=2))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path), queries, tools, index


def test_runner_masks_every_observation_token(tiny):
    model, tokenizer, queries, tools, index = tiny
    params = GRPOParams(algorithm="grpo", num_generations=2, max_turns=3, max_new_tokens=24)
    limits = RolloutLimits(max_turns=3, max_new_tokens=24, max_total_tokens=1024)

    envs = []

    def play_batch(batch, seed, prefixes):
        backend = TransformersBackend(model, tokenizer, temperature=1.0, seed=seed)
        played = play(backend, tokenizer, tools, batch, limits, batch_size=len(batch), fault_rate=0.5, seed=seed, prefixes=prefixes, progress=False)
        envs.extend(e for _, e, _ in played)
        return [(e, t) for _, e, t in played]

    runner = EpisodeRunner(play_batch, queries, Scorer(index, TravelRewardParams(), params.steps), params)
    prompts = [p for p in task_prompts(queries[:2], lambda q: q.query, "") for _ in range(2)]
    trainer = _Trainer()
    trainer.processing_class = tokenizer
    out = runner(prompts, trainer)
    assert len(out["completion_ids"]) == 4 and all(len(m) == len(c) for m, c in zip(out["env_mask"], out["completion_ids"]))
    observations = 0
    for env, ids, mask, logprobs in zip(envs, out["completion_ids"], out["env_mask"], out["logprobs"]):
        masked = tokenizer.decode([t for t, m in zip(ids, mask) if not m])
        trained = tokenizer.decode([t for t, m in zip(ids, mask) if m])
        for message in env.history[2:]:
            if message["role"] != "assistant":  # tool results and corrections: never trained on
                observations += 1
                assert message["content"] in masked and message["content"] not in trained
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if not m)
    assert observations > 0
    # TRL reads "ends in eos" as "finished": only episodes cut by a limit may not.
    for env, ids in zip(envs, out["completion_ids"]):
        assert (ids[-1] == tokenizer.eos_token_id) == (env.answer is not None and not env.truncated)
    assert all(isinstance(r, float) for r in out["reward"])
    assert set(runner.stats) >= {"reward", "success", "turns", "tool_error_rate", "truncated", "groups_dropped_fraction"}
    assert set(runner.stats) >= {"fault_rate", "invalid_rate", "error_rate", "recovery_rate", "generation_seconds", "scoring_seconds"}


def test_an_episode_the_engine_cut_is_masked_whatever_the_rubric_says(tiny):
    """A rubric that reads only the env's own turn limit (as QA's once did) calls an episode the
    engine cut at its token budget finished; TRL must still see it as cut, never ending in eos."""
    model, tokenizer, queries, tools, index = tiny
    params = GRPOParams(algorithm="grpo", num_generations=2, max_turns=8, max_new_tokens=24)
    prompt = len(tokenizer.apply_chat_template([{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": queries[0].query}], tokenize=True, return_dict=False))
    limits = RolloutLimits(max_turns=8, max_new_tokens=24, max_total_tokens=prompt + 160)  # a few turns, then the budget
    played = []

    def play_batch(batch, seed, prefixes):
        backend = TransformersBackend(model, tokenizer, temperature=1.0, seed=seed)
        played.extend(play(backend, tokenizer, tools, batch, limits, batch_size=len(batch), seed=seed, progress=False))
        return [(e, t) for _, e, t in played[-len(batch) :]]

    def env_only(query, env, step):
        return {"reward": 0.0, "truncated": float(env.truncated)}

    runner = EpisodeRunner(play_batch, queries, env_only, params)
    prompts = [p for p in task_prompts(queries[:2], lambda q: q.query, "") for _ in range(2)]
    trainer = _Trainer()
    trainer.processing_class = tokenizer
    out = runner(prompts, trainer)
    cut_by_budget = [t for _, e, t in played if t.truncated and not e.truncated]
    assert cut_by_budget, "the budget should cut episodes the env itself would go on with"
    assert all(tokenizer.eos_token_id in t.completion_ids for t in cut_by_budget)  # a tool reply's end is an eos
    for (_, _, t), ids in zip(played, out["completion_ids"]):
        assert t.truncated and ids[-1] != tokenizer.eos_token_id
    assert runner.stats["truncated"] == [1.0]


@pytest.mark.slow
def test_arpo_groups_share_a_replayed_prefix(tiny):
    model, tokenizer, queries, tools, index = tiny
    params = GRPOParams(algorithm="arpo", num_generations=4, max_turns=3, max_new_tokens=16)
    limits = RolloutLimits(max_turns=3, max_new_tokens=16, max_total_tokens=1024)
    seen = []

    def play_batch(batch, seed, prefixes):
        seen.append(prefixes)
        backend = TransformersBackend(model, tokenizer, temperature=1.0, seed=seed)
        return [(e, t) for _, e, t in play(backend, tokenizer, tools, batch, limits, batch_size=len(batch), seed=seed, prefixes=prefixes, progress=False)]

    runner = EpisodeRunner(play_batch, queries, Scorer(index, TravelRewardParams(), params.steps), params)
    prompts = task_prompts(queries[:1], lambda q: q.query, "") * 4
    trainer = _Trainer()
    trainer.processing_class = tokenizer
    out = runner(prompts, trainer)
    assert len(out["completion_ids"]) == 4  # same sample budget
    assert seen[0] is None and len(seen[1]) == 2  # half played in full, half branched
    prefix = seen[1][0]
    assert prefix  # a branch point after at least one tool result
    branched = tokenizer.decode(out["completion_ids"][2])
    assert prefix[0][:8] in branched


def test_episode_end_cuts_after_the_final_eos():
    done = SimpleNamespace(completion_ids=[5, 9, 2, 7, 9, 2, 3])  # ... <eos> "\n"
    assert episode_end(done, truncated=False, eos=2) == 6
    cut = SimpleNamespace(completion_ids=[5, 9, 2, 7, 4])
    assert episode_end(cut, truncated=True, eos=2) == 5
    cut_on_eos = SimpleNamespace(completion_ids=[5, 2])
    assert episode_end(cut_on_eos, truncated=True, eos=2) == 1


def _logprob(model, prompt_ids, completion_ids, mask):
    """Summed log-probability of the model's own (mask 1) tokens of one episode."""
    import torch

    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
    picked = torch.log_softmax(logits, -1).gather(1, torch.tensor(completion_ids)[:, None])[:, 0]
    return float((picked * torch.tensor(mask, dtype=torch.float)).sum())


@pytest.mark.slow
@pytest.mark.parametrize("optimizer, learning_rate", [("adamw", 1e-3), ("sgd", 1.0)])
def test_one_step_raises_the_better_episodes_and_lowers_the_worse(tiny, tmp_path, one_torch_thread, optimizer, learning_rate):
    import copy

    import torch
    from datasets import Dataset
    from trl import GRPOTrainer

    from star.train.grpo import grpo_config

    base, tokenizer, queries, tools, index = tiny
    model = copy.deepcopy(base)
    before = copy.deepcopy(base).eval()
    params = GRPOParams(
        algorithm="grpo", num_generations=4, queries_per_step=1, steps=1, learning_rate=learning_rate, optimizer=optimizer, max_turns=2, max_new_tokens=24, mask_truncated_completions=False,
        loss_type="grpo", scale_rewards="group",
    )
    limits = RolloutLimits(max_turns=2, max_new_tokens=24, max_total_tokens=512)

    def play_batch(batch, seed, prefixes):
        backend = TransformersBackend(model, tokenizer, temperature=1.0, seed=seed)
        return [(e, t) for _, e, t in play(backend, tokenizer, tools, batch, limits, batch_size=len(batch), seed=seed, progress=False)]

    calls = iter(range(100))

    def alternate(query, env, step):  # every other episode is the better one
        return {"reward": float(next(calls) % 2 == 0)}

    runner = EpisodeRunner(play_batch, queries, alternate, params)
    seen = []

    def rollout(prompts, trainer):
        seen.append(runner(prompts, trainer))
        return seen[-1]

    torch.manual_seed(0)
    dataset = Dataset.from_list([{"prompt": prompt} for prompt in task_prompts(queries, lambda q: q.query, "")])
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[lambda prompts, completions, reward, **kw: reward],
        args=grpo_config(params, tmp_path, use_cpu=True),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    trainer.train()
    assert type(trainer.optimizer.optimizer).__name__ == {"adamw": "AdamW", "sgd": "SGD"}[optimizer]
    model.eval()
    out = seen[0]
    changes = [
        _logprob(model, p, c, m) - _logprob(before, p, c, m)
        for p, c, m in zip(out["prompt_ids"], out["completion_ids"], out["env_mask"])
    ]
    better = [d for d, r in zip(changes, out["reward"]) if r == 1.0]
    worse = [d for d, r in zip(changes, out["reward"]) if r == 0.0]
    assert better and worse
    assert min(better) > 0 > max(worse), changes


def test_skipped_levels_leave_rl_training(tmp_path):
    from star.train.grpo import train_grpo

    tasks = [SimpleNamespace(level="easy"), SimpleNamespace(level="easy")]
    params = GRPOParams(skip_levels=["easy"])
    # every task is skipped: the run stops before it loads a model
    with pytest.raises(ValueError, match="no training task is left"):
        train_grpo(params, str(tmp_path / "no-model"), tasks, str, None, None, "", tmp_path / "out", tmp_path / "ckpt")
    with pytest.raises(OSError):  # one medium task is left, so it goes on to load the (missing) model
        train_grpo(params, str(tmp_path / "no-model"), [*tasks, SimpleNamespace(level="medium")], str, None, None, "", tmp_path / "out", tmp_path / "ckpt")


def test_unseen_queries_leave_out_the_sft_set(tmp_path):
    from star.train.grpo import train_grpo

    tasks = [SimpleNamespace(level="hard", idx=1), SimpleNamespace(level="hard", idx=2)]
    unseen = GRPOParams(unseen_queries=True)
    with pytest.raises(ValueError, match="SFT's queries left out"):  # both are in the SFT set
        train_grpo(unseen, str(tmp_path / "no-model"), tasks, str, None, None, "", tmp_path / "out", tmp_path / "ckpt", seen={1, 2})
    with pytest.raises(OSError):  # task 2 is new, so it goes on to load the (missing) model
        train_grpo(unseen, str(tmp_path / "no-model"), tasks, str, None, None, "", tmp_path / "out", tmp_path / "ckpt", seen={1})
    with pytest.raises(OSError):  # off: the SFT set stays in
        train_grpo(GRPOParams(unseen_queries=False), str(tmp_path / "no-model"), tasks, str, None, None, "", tmp_path / "out", tmp_path / "ckpt", seen={1, 2})


def _saved(tiny, directory):
    """The tiny fixture's model and tokenizer written to `directory`, GRPO's starting point."""
    base, tokenizer = tiny[:2]
    base.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _text_length(query, env, step):  # differs between sampled episodes, so every step moves the weights
    said = sum(len(m["content"]) for m in env.history if m["role"] == "assistant")
    return {"reward": said % 5 / 4}


@pytest.mark.slow
def test_a_resumed_run_replays_the_same_rollouts_and_weights(tiny, tmp_path, one_torch_thread):
    """Killed after its first checkpoint and run again, GRPO ends with the uninterrupted run's weights."""
    import torch
    from safetensors.torch import load_file

    from star.travel.env import SYSTEM_PROMPT, TravelEnv

    queries, tools = tiny[2], tiny[3]
    model_dir = _saved(tiny, tmp_path / "sft")
    # dapo: flat groups are replayed with queries the runner's generator draws.
    params = GRPOParams(
        algorithm="dapo", num_generations=2, queries_per_step=1, steps=3, save_steps=1, max_turns=2, max_new_tokens=16, max_total_tokens=512, temperature=1.0, skip_levels=[], unseen_queries=False,
        mask_truncated_completions=False,  # the tiny model never answers within 2 turns
    )

    def make_env(query, seed):
        return TravelEnv(tools, max_turns=params.max_turns, seed=seed + query.idx)

    def run(out, ckpt, log_fn=None):
        return train_grpo(params, str(model_dir), queries, lambda q: q.query, make_env, _text_length, SYSTEM_PROMPT, out, ckpt, log_fn=log_fn)

    run(tmp_path / "whole", tmp_path / "ckpt-whole")

    class Killed(Exception):
        pass

    def die_at_step_2(metrics, step):
        if step == 2:  # logged before checkpoint-2 is saved: only checkpoint-1 is left
            raise Killed

    with pytest.raises(Killed):
        run(tmp_path / "resumed", tmp_path / "ckpt", die_at_step_2)
    assert [p.name for p in (tmp_path / "ckpt").glob("checkpoint-*")] == ["checkpoint-1"]
    run(tmp_path / "resumed", tmp_path / "ckpt")
    whole, resumed = load_file(tmp_path / "whole" / "model.safetensors"), load_file(tmp_path / "resumed" / "model.safetensors")
    start = load_file(model_dir / "model.safetensors")
    assert whole.keys() == resumed.keys() and any(not torch.equal(whole[k], start[k]) for k in whole)
    assert all(torch.equal(whole[k], resumed[k]) for k in whole), "the resumed run trained on other rollouts"


@pytest.mark.slow
def test_a_bf16_step_on_cpu_trains_and_saves_float32_weights(tiny, tmp_path, one_torch_thread):
    import torch
    from safetensors.torch import load_file

    from star.travel.env import SYSTEM_PROMPT, TravelEnv

    queries, tools = tiny[2], tiny[3]
    model_dir = _saved(tiny, tmp_path / "sft")
    params = GRPOParams(
        algorithm="grpo", num_generations=2, queries_per_step=1, steps=1, max_turns=2, max_new_tokens=16, max_total_tokens=512, temperature=1.0, skip_levels=[], unseen_queries=False,
        mask_truncated_completions=False, bf16=True, learning_rate=1e-2,
    )

    make_env = lambda q, seed: TravelEnv(tools, max_turns=2, seed=seed + q.idx)  # noqa: E731
    train_grpo(params, str(model_dir), queries, lambda q: q.query, make_env, _text_length, SYSTEM_PROMPT, tmp_path / "out", tmp_path / "ckpt")
    trained, start = load_file(tmp_path / "out" / "model.safetensors"), load_file(model_dir / "model.safetensors")
    assert {t.dtype for t in trained.values()} == {torch.float32}
    assert any(not torch.equal(trained[k], start[k]) for k in start)


def test_a_changed_sft_model_starts_grpo_afresh(tmp_path):
    """GRPO resumes only from checkpoints under the fingerprint of its inputs: another SFT model, SFT set,
    training task or knob is another directory, so the run starts fresh instead of resuming."""
    from flows.grpo import checkpoint_fingerprint
    from star.config import EnvParams, GRPOStageParams, ModelParams
    from star.travel.domain import TravelDomain

    tasks, sft_set, sft = tmp_path / "train.jsonl", tmp_path / "sft.jsonl", tmp_path / "sft"
    tasks.write_text('{"idx": 0}\n')
    sft_set.write_text('{"query_id": 0}\n')
    sft.mkdir()
    (sft / "model.safetensors").write_bytes(b"weights")
    domain = TravelDomain({"env": EnvParams()}, tmp_path / "world")

    def fingerprint(grpo: GRPOStageParams = GRPOStageParams()) -> str:
        return checkpoint_fingerprint(grpo, EnvParams(), ModelParams(), domain, tasks, sft_set, sft)

    first = fingerprint()
    assert fingerprint() == first
    (sft / "model.safetensors").write_bytes(b"other weights")
    assert fingerprint() != first
    (sft / "model.safetensors").write_bytes(b"weights")
    assert fingerprint() == first
    sft_set.write_text('{"query_id": 1}\n')
    assert fingerprint() != first
    sft_set.write_text('{"query_id": 0}\n')
    assert fingerprint(GRPOStageParams(learning_rate=0.5)) != first


def test_mismatch_figures_cover_the_trained_tokens_only():
    from star.train.offpolicy import mismatch

    trainer = torch.tensor([[-1.0, -2.0, -3.0, -0.5]])
    sampler = torch.tensor([[-1.1, -2.0, float("nan"), -9.0]])  # a NaN (no sampler log-probability) and a masked token
    figures = mismatch(trainer, sampler, torch.tensor([[1, 1, 1, 0]]))
    assert figures["mismatch_abs"] == pytest.approx(0.05)
    assert figures["mismatch_max_ratio"] == pytest.approx(math.exp(0.1))
    assert figures["mismatch_kl"] == pytest.approx((math.exp(0.1) - 1 - 0.1) / 2)
    assert figures["mismatch_tokens"] == 2
    assert mismatch(trainer, sampler, torch.zeros(1, 4)) == {"mismatch_abs": 0.0, "mismatch_kl": 0.0, "mismatch_max_ratio": 1.0, "mismatch_tokens": 0}


@pytest.mark.slow
def test_tis_weights_the_loss_by_the_truncated_ratio(tiny, tmp_path, one_torch_thread, monkeypatch):
    """A sampler that reports every token e times likelier than the trainer finds it: the transformers backend's
    mismatch reads 1 nat exactly, and with tis each token's gradient is scaled by min(1/e, cap), an SGD step by 1/e."""
    from safetensors.torch import load_file

    from star.train import samplers
    from star.travel.env import SYSTEM_PROMPT, TravelEnv

    base, tokenizer, queries, tools, index = tiny
    model_dir = tmp_path / "start"
    base.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    backend = samplers.TrainerSampler.backend

    class Overconfident:
        def __init__(self, inner):
            self.inner, self.token_level = inner, True

        def generate(self, *args, **kwargs):
            gens = self.inner.generate(*args, **kwargs)
            for g in gens:
                g.logprobs = [lp + 1.0 for lp in g.logprobs]
            return gens

    def run(correction: str, shifted: bool) -> tuple[dict, dict]:
        monkeypatch.setattr(samplers.TrainerSampler, "backend", (lambda self, seed: Overconfident(backend(self, seed))) if shifted else backend)
        params = GRPOParams(
            algorithm="grpo", num_generations=4, queries_per_step=1, steps=1, learning_rate=1.0, optimizer="sgd", max_turns=2, max_new_tokens=16, max_total_tokens=512,
            temperature=1.0, skip_levels=[], unseen_queries=False, mask_truncated_completions=False, importance_correction=correction,
        )
        calls = iter(range(100))

        def alternate(query, env, step):
            return {"reward": float(next(calls) % 2 == 0)}

        out = tmp_path / f"{correction}-{shifted}"
        metrics = train_grpo(params, str(model_dir), queries, lambda q: q.query, lambda q, seed: TravelEnv(tools, max_turns=2, seed=seed + q.idx), alternate, SYSTEM_PROMPT, out, tmp_path / f"ckpt-{out.name}")
        return metrics, load_file(out / "model.safetensors")

    start = load_file(model_dir / "model.safetensors")
    plain, plain_weights = run("none", shifted=False)
    assert plain["mismatch_abs"] < 1e-3 and plain["mismatch_max_ratio"] < 1.01  # the sampler is the trainer
    shifted, none_weights = run("none", shifted=True)
    assert shifted["mismatch_abs"] == pytest.approx(1.0, abs=1e-3) and shifted["mismatch_max_ratio"] == pytest.approx(math.exp(-1), rel=1e-2)
    _, tis_weights = run("tis", shifted=True)
    name = next(k for k in start if torch.count_nonzero(none_weights[k] - start[k]) > 0)
    step_none, step_tis = none_weights[name] - start[name], tis_weights[name] - start[name]
    assert torch.equal(none_weights[name], plain_weights[name])  # none: the sampler's numbers do not enter the loss
    assert torch.allclose(step_tis, step_none / math.e, atol=1e-6), (step_tis.abs().max(), step_none.abs().max())
