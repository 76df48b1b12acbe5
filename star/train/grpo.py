"""Multi-turn GRPO in any ToolEnv (TravelEnv, QAEnv), on TRL's GRPOTrainer with the project's rollout engine.

TRL asks `rollout_func` for one completion per prompt it hands over (each
query already repeated `num_generations` times). Ours plays those episodes
with the batched engine, so the token lists, the chat template and the
masks are exactly those of SFT and evaluation: observation and template
tokens carry mask 0 (`env_mask`) and never enter the loss. Each domain scores
its episodes (star/travel/rewards.py: outcome reward SUM, MACRO, SUCCESS or
CURRICULUM from the evaluator, plus `process.weight` times the process reward of
star/train/process.py; star/qa/rewards.py for QA).

Defaults follow STAR's variant: no KL term (beta 0, no reference model),
clip-higher (epsilon_high > epsilon), and episodes cut by a limit excluded
from the loss but kept in their group's reward statistics
(`mask_truncated_completions`; a cut episode's completion does not end in eos).

Algorithms:
- grpo: the above.
- dapo: DAPO's token-level loss plus reward-guided dynamic sampling: a group
  whose rewards are all equal has zero advantage and teaches nothing, so it is
  replaced by a group for another training query, up to `dapo_max_tries`
  times per group; groups still flat after that are kept (they add no
  gradient) and counted. DAPO's overlong reward shaping is not used.
- arpo: adaptive rollouts in the spirit of ARPO. Half of each group is played
  in full; in each group the episode whose turn after a tool result was the
  least certain (lowest mean log-probability, a proxy for high entropy, since
  the engine keeps sampled-token log-probabilities only) becomes a branch
  point: the other half replays its turns up to that tool result and then
  samples on its own, so the group spends the same number of episodes. ARPO
  itself branches on token entropy measured right after each tool call and
  mixes global and partial samples under a budget; this is a simpler,
  same-budget variant.

Under `accelerate launch` with several processes (DDP or DeepSpeed ZeRO-2) each
process plays and scores its own groups (TRL hands every process whole groups)
with its own rollout generator; the advantages use every process's rewards. Only
the first process logs (its own groups' rollout statistics) and writes files.
FSDP and ZeRO-3 are refused: the rollouts generate with the whole weights.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from star.train.grpo_params import GRPOParams

ROLLOUT_RNG = "rollout_rng.json"  # the EpisodeRunner's generator, saved in each checkpoint
# A directory: when set, each process appends the prompts it plays, step by step, to
# `rank<process index>.jsonl` there (as star/train/sft.py does with its batches).
RECORD_BATCHES = "STAR_RECORD_BATCHES"


def rollout_rng_file(process_index: int) -> str:
    """The checkpoint file of a process's rollout generator (named as the trainer names its RNG states)."""
    return ROLLOUT_RNG if process_index == 0 else f"rollout_rng_{process_index}.json"


def zero_variance_groups(rewards: list[float], group_size: int) -> list[int]:
    """Indices of the groups whose rewards are all equal (no advantage, no signal)."""
    return [g for g in range(len(rewards) // group_size) if len(set(rewards[g * group_size : (g + 1) * group_size])) == 1]


class EpisodeRunner:
    """Plays episodes for GRPO and keeps per-step statistics for logging."""

    def __init__(
        self,
        play: Callable[[list[Any], int, list[list[str]] | None], list[tuple[Any, Any]]],
        queries: list[Any],
        scorer: Callable[[Any, Any, int], dict[str, float]],
        params: GRPOParams,
        text_of: Callable[[Any], str] = lambda query: query.query,
    ):
        self.play = play  # (queries, seed, forced prefixes) -> [(env, trajectory)]
        self.by_text = {text_of(q): q for q in queries}
        self.queries = queries
        self.scorer = scorer
        self.params = params
        self.rng = random.Random(params.seed)
        self.stats: dict[str, list[float]] = defaultdict(list)
        self.seconds: dict[str, float] = defaultdict(float)  # this step's time in playing and in scoring

    def __call__(self, prompts: list[list[dict]], trainer: Any) -> dict[str, Any]:
        step = trainer.state.global_step
        queries = [self.by_text[p[-1]["content"]] for p in prompts]
        if os.environ.get(RECORD_BATCHES):
            directory = Path(os.environ[RECORD_BATCHES])
            directory.mkdir(parents=True, exist_ok=True)
            digests = [hashlib.sha256(p[-1]["content"].encode()).hexdigest()[:16] for p in prompts]
            with open(directory / f"rank{trainer.args.process_index}.jsonl", "a") as f:
                f.write(json.dumps({"step": step, "prompts": digests}) + "\n")
        G = self.params.num_generations
        self.seconds.clear()
        if self.params.algorithm == "arpo":
            results = self._arpo(queries, step)
        else:
            results = self._play_scored(queries, step)
        dropped = 0
        if self.params.algorithm == "dapo":
            results, dropped = self._dynamic_sampling(results, step)
        groups = max(len(results) // G, 1)
        self.stats["groups_dropped_fraction"].append(dropped / groups)
        for part in ("generation", "scoring"):
            self.stats[f"{part}_seconds"].append(self.seconds[part])
        rewards = [r["reward"] for _, _, r in results]
        for name in results[0][2]:
            self.stats[name].append(statistics.fmean(r[name] for _, _, r in results))
        self.stats["reward_std"].append(statistics.pstdev(rewards))
        self.stats["completion_tokens"].append(statistics.fmean(sum(t.completion_mask) for _, t, _ in results))
        eos = trainer.processing_class.eos_token_id
        ends = [episode_end(t, r["truncated"] > 0, eos) for _, t, r in results]
        return {
            "prompt_ids": [t.prompt_ids for _, t, _ in results],
            "completion_ids": [t.completion_ids[:n] for (_, t, _), n in zip(results, ends)],
            "logprobs": [(t.logprobs or [0.0] * len(t.completion_ids))[:n] for (_, t, _), n in zip(results, ends)],
            "env_mask": [t.completion_mask[:n] for (_, t, _), n in zip(results, ends)],
            "reward": rewards,
        }

    def _play_scored(self, queries: list[Any], step: int, prefixes: list[list[str]] | None = None) -> list[tuple]:
        start = time.perf_counter()
        played = self.play(queries, self.params.seed * 100_003 + step * 1_009 + self.rng.randrange(1 << 20), prefixes)
        played_at = time.perf_counter()
        scored = [(q, t, self.scorer(q, env, step)) for q, (env, t) in zip(queries, played)]
        self.seconds["generation"] += played_at - start
        self.seconds["scoring"] += time.perf_counter() - played_at
        return scored

    def _dynamic_sampling(self, results: list[tuple], step: int) -> tuple[list[tuple], int]:
        G = self.params.num_generations
        flat = zero_variance_groups([r["reward"] for _, _, r in results], G)
        for g in flat:
            for _ in range(self.params.dapo_max_tries):
                query = self.rng.choice(self.queries)
                fresh = self._play_scored([query] * G, step)
                if len({r["reward"] for _, _, r in fresh}) > 1:
                    results[g * G : (g + 1) * G] = fresh
                    break
        return results, len(flat)

    def _arpo(self, queries: list[Any], step: int) -> list[tuple]:
        G, half = self.params.num_generations, self.params.num_generations // 2
        firsts = [queries[g * G] for g in range(len(queries) // G)]
        full = self._play_scored([q for q in firsts for _ in range(half)], step)
        prefixes, branch_queries = [], []
        for g, query in enumerate(firsts):
            group = full[g * half : (g + 1) * half]
            prefix = min((branch_point(t) for _, t, _ in group), key=lambda x: x[0])[1]
            prefixes += [prefix] * half
            branch_queries += [query] * half
        branched = self._play_scored(branch_queries, step, prefixes)
        out = []
        for g in range(len(firsts)):
            out += full[g * half : (g + 1) * half] + branched[g * half : (g + 1) * half]
        return out


def episode_end(trajectory: Any, truncated: bool, eos: int) -> int:
    """Length of the completion TRL should see.

    TRL takes a completion that does not end in eos as cut by a limit (and
    masks it with `mask_truncated_completions`). The template writes a newline
    after the final `<|im_end|>`, so a finished episode is cut right after that
    eos; an episode stopped by a limit keeps its end, which is not an eos.
    """
    ids = trajectory.completion_ids
    if truncated:
        return len(ids) - 1 if ids and ids[-1] == eos else len(ids)
    last = max((i for i, t in enumerate(ids) if t == eos), default=len(ids) - 1)
    return last + 1


def branch_point(trajectory: Any) -> tuple[float, list[str]]:
    """(certainty, assistant turns to replay) for the least certain turn after a tool result."""
    turns = [m for m in trajectory.messages if m["role"] == "assistant"]
    certainty = turn_certainties(trajectory)
    best = (math.inf, [])
    for i in range(1, min(len(turns), len(certainty))):
        if certainty[i] < best[0]:
            best = (certainty[i], [m["content"] for m in turns[:i]])
    return best


def turn_certainties(trajectory: Any) -> list[float]:
    """Mean log-probability of the model's tokens in each assistant turn."""
    if not trajectory.logprobs:
        return []
    out, current = [], []
    for mask, lp in zip(trajectory.completion_mask, trajectory.logprobs):
        if mask:
            current.append(lp)
        elif current:
            out.append(statistics.fmean(current))
            current = []
    if current:
        out.append(statistics.fmean(current))
    return out


def grpo_config(params: GRPOParams, output_dir: Path, use_cpu: bool) -> Any:
    from trl import GRPOConfig

    batch = params.num_generations * params.queries_per_step
    return GRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_iterations=1,
        num_generations=params.num_generations,
        max_steps=params.steps,
        learning_rate=params.learning_rate,
        **({"optim": "sgd"} if params.optimizer == "sgd" else {}),  # else TRL's default AdamW
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=0,
        beta=params.beta,
        epsilon=params.epsilon,
        epsilon_high=params.epsilon_high,
        loss_type="dapo" if params.algorithm == "dapo" else params.loss_type,
        scale_rewards=params.scale_rewards,
        mask_truncated_completions=params.mask_truncated_completions,
        max_completion_length=params.max_total_tokens,
        temperature=params.temperature,
        logging_steps=1,
        save_steps=params.save_steps,
        save_total_limit=2,
        report_to=[],
        seed=params.seed,
        bf16=params.bf16,
        gradient_checkpointing=params.gradient_checkpointing,
        use_cpu=use_cpu,
        shuffle_dataset=True,
        remove_unused_columns=False,
    )


def train_grpo(
    params: GRPOParams,
    model_path: str,
    tasks: list[Any],
    text_of: Callable[[Any], str],
    make_env: Callable[[Any, int], Any],
    score: Callable[[Any, Any, int], dict[str, float]],
    system_prompt: str,
    out_dir: Path,
    checkpoint_dir: Path,
    *,
    curve_path: Path | None = None,
    tools_in_prompt: bool = False,
    log_fn: Callable[[dict[str, float], int], None] | None = None,
    seen: Collection[Any] = (),
) -> dict[str, float]:
    """GRPO on `tasks` of any domain; writes the model to `out_dir`, resumes from `checkpoint_dir`.

    `make_env(task, seed)` builds a fresh ToolEnv, `score(task, env, step)`
    judges a finished episode (its "reward" key trains), `text_of(task)` is the
    task's first user message. `log_fn(metrics, step)` gets every step's logs.
    `seen` holds the ids (`task.idx`) of the tasks in the SFT set, left out when
    `params.unseen_queries` is set.
    """
    tasks = [t for t in tasks if getattr(t, "level", None) not in params.skip_levels]
    if params.unseen_queries:
        tasks = [t for t in tasks if getattr(t, "idx", None) not in seen]
    if not tasks:
        raise ValueError(f"no training task is left once levels {params.skip_levels} are skipped" + (" and SFT's queries left out" if params.unseen_queries else ""))
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from transformers.trainer_utils import get_last_checkpoint

    from star.agent.policy import play_tasks
    from star.agent.rollout import RolloutLimits
    from star.io import atomic_dir, write_json
    from star.train.curves import curve, write_curve
    from star.train.offpolicy import SamplerGRPOTrainer
    from star.train.samplers import make_sampler

    torch.manual_seed(params.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    policy = AutoModelForCausalLM.from_pretrained(model_path)
    limits = RolloutLimits(max_turns=params.max_turns, max_new_tokens=params.max_new_tokens, max_total_tokens=params.max_total_tokens)

    sampler = make_sampler(params, policy, tokenizer, model_path)

    def play_batch(batch: list[Any], seed: int, prefixes: list[list[str]] | None) -> list:
        with sampler.rolling():
            backend = sampler.backend(seed)
            played = play_tasks(backend, tokenizer, make_env, batch, limits, batch_size=len(batch), seed=seed, tools_in_prompt=tools_in_prompt, prefixes=prefixes)
        return [(e, t) for _, e, t in played]

    runner = EpisodeRunner(play_batch, tasks, score, params, text_of=text_of)

    def env_reward(prompts, completions, reward, **kwargs):
        return reward

    class LogRollouts(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            rollout = {f"rollout/{k}": v[-1] for k, v in runner.stats.items() if v}
            if state.log_history and "loss" in state.log_history[-1]:
                state.log_history[-1].update(rollout)  # checkpoints keep it: a resumed run has the whole curve
            if log_fn is not None and state.is_world_process_zero:
                metrics = {f"train/{k}": float(v) for k, v in (logs or {}).items() if isinstance(v, (int, float))}
                log_fn({**metrics, **rollout}, state.global_step)

    class KeepRolloutSeeds(TrainerCallback):
        """Save the runner's generator with each checkpoint, so a resumed run replays the same rollouts."""

        def on_save(self, args, state, control, **kwargs):
            write_json(Path(args.output_dir) / f"checkpoint-{state.global_step}" / rollout_rng_file(args.process_index), runner.rng.getstate())

    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    dataset = Dataset.from_list([{"prompt": [*system, {"role": "user", "content": text_of(t)}]} for t in tasks])
    config = grpo_config(params, checkpoint_dir, use_cpu=not torch.cuda.is_available())
    trainer = SamplerGRPOTrainer(
        model=policy, reward_funcs=[env_reward], args=config, train_dataset=dataset, processing_class=tokenizer, rollout_func=runner, callbacks=[LogRollouts(), KeepRolloutSeeds()],
        sync=sampler.sync, correction=params.importance_correction, cap=params.importance_cap, stats=runner.stats,
    )
    if trainer.is_fsdp_enabled or (trainer.is_deepspeed_enabled and trainer.accelerator.state.deepspeed_plugin.zero_stage == 3):
        raise ValueError("GRPO's rollouts generate with the whole weights: train it with DDP or ZeRO-2, not FSDP or ZeRO-3")
    process = trainer.args.process_index
    if process > 0:  # each process plays its own episodes
        runner.rng = random.Random(f"{params.seed}/{process}")
    last = get_last_checkpoint(str(checkpoint_dir)) if Path(checkpoint_dir).is_dir() else None
    if last is not None and (Path(last) / rollout_rng_file(process)).is_file():
        version, internal, gauss = json.loads((Path(last) / rollout_rng_file(process)).read_text())
        runner.rng.setstate((version, tuple(internal), gauss))
    try:
        result = trainer.train(resume_from_checkpoint=last)
    finally:
        sampler.close()
    trainer.accelerator.wait_for_everyone()  # every process is done with the checkpoints
    if trainer.is_world_process_zero():  # the process that writes files
        with atomic_dir(out_dir) as tmp:
            trainer.model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        if curve_path is not None:
            write_curve(curve_path, curve(trainer.state.log_history, "loss"))
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    stats = {k: statistics.fmean(v) for k, v in runner.stats.items() if v}
    first = {f"first_{k}": v[0] for k, v in runner.stats.items() if v}
    last = {f"last_{k}": v[-1] for k, v in runner.stats.items() if v}
    seconds = result.metrics["train_runtime"] / max(result.global_step, 1)
    return {"train_loss": result.training_loss, "steps": result.global_step, "seconds_per_step": seconds, **stats, **first, **last}
