"""GRPO with `backend: vllm` on the tiny model, checked from the outside; run by tests/test_vllm.py in .venv-vllm.

1. A 3-step GRPO run whose rollouts vLLM generates in float32: the sampler's
   log-probabilities of the trained tokens against the trainer's, per step.
   Were the engine not synced after a step, it would sample from older
   weights than the trainer holds, and the mismatch would jump.
2. The sync itself: an engine made from the starting weights, then given the
   trained model's weights in place, decodes greedily the tokens the
   transformers backend decodes from the saved trained model, and not the
   tokens it decoded before.
3. Resume: a run killed after its first checkpoint and started again ends
   with the weights of the uninterrupted run (the rollouts depend on the
   pushed weights and each step's seed only).

Prints one JSON object as its last line.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import polars as pl  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from vllm_engine import tiny_model  # noqa: E402  the built-in model's default shape with large random weights

STEPS = 3


def main() -> None:
    from star.agent.backend import Prompt, make_backend
    from star.agent.rollout import STOP_STRINGS
    from star.agent.vllm_backend import VLLMBackend
    from star.train.grpo import train_grpo
    from star.train.grpo_params import GRPOParams, VLLMRolloutParams
    from star.travel.env import SYSTEM_PROMPT, TravelEnv
    from star.travel.specs import SynthesisSpec, WorldSpec
    from star.travel.world.synthesize import Synthesizer
    from star.travel.world.synthetic import generate_world
    from star.travel.world.tools import TravelTools

    torch.set_num_threads(1)
    world = generate_world(WorldSpec(seed=0))
    queries = Synthesizer(world, SynthesisSpec(sizes={"train": 24, "validation": 0, "test": 0})).run()["train"]
    tools = TravelTools(world)
    tmp = Path(tempfile.mkdtemp())
    start = tiny_model(tmp / "start")
    params = GRPOParams(
        algorithm="grpo", backend="vllm", vllm=VLLMRolloutParams(dtype="float32", enforce_eager=True), num_generations=4, queries_per_step=2, steps=STEPS, save_steps=1,
        learning_rate=3e-3, max_turns=2, max_new_tokens=16, max_total_tokens=1024, temperature=1.0, skip_levels=[], unseen_queries=False, mask_truncated_completions=False,
    )

    def make_env(query, seed):
        return TravelEnv(tools, max_turns=params.max_turns, seed=seed + query.idx)

    def text_length(query, env, step):  # differs between sampled episodes, so every step moves the weights
        said = sum(len(m["content"]) for m in env.history if m["role"] == "assistant")
        return {"reward": said % 5 / 4}

    def run(out: Path, ckpt: Path, log_fn=None) -> dict:
        return train_grpo(params, str(start), queries, lambda q: q.query, make_env, text_length, SYSTEM_PROMPT, out, ckpt, curve_path=out.with_suffix(".csv"), log_fn=log_fn)

    metrics = run(tmp / "whole", tmp / "ckpt-whole")
    curve = pl.read_csv(tmp / "whole.csv")

    # 2. The sync: fresh engine, starting weights, then the trained ones pushed in place.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(start)
    prompts = []
    for q in queries[:16]:
        env = TravelEnv(tools)
        env.reset(q)
        prompts.append(Prompt(tokenizer.encode(tokenizer.apply_chat_template(env.history, tools=env.tool_schemas(), tokenize=False, add_generation_prompt=True), add_special_tokens=False)))

    def greedy(backend) -> list[list[int]]:
        return [g.token_ids for g in backend.generate(prompts, 24, STOP_STRINGS, temperature=0.0)]

    engine = VLLMBackend(str(start), dtype="float32", enforce_eager=True, trainable=True, max_model_len=2048)
    before = greedy(engine)
    trained = AutoModelForCausalLM.from_pretrained(tmp / "whole")
    engine.load_weights(trained)
    after = greedy(engine)
    reference = greedy(make_backend("transformers", model=str(tmp / "whole"), temperature=0.0))
    engine.close()

    # 3. Resume.
    class Killed(Exception):
        pass

    def die_at_step_2(logged, step):
        if step == 2:  # logged before checkpoint-2 is saved: only checkpoint-1 is left
            raise Killed

    try:
        run(tmp / "resumed", tmp / "ckpt", die_at_step_2)
        raise SystemExit("the run that should have been killed at step 2 finished")
    except Killed:
        pass
    checkpoints = sorted(p.name for p in (tmp / "ckpt").glob("checkpoint-*"))
    run(tmp / "resumed", tmp / "ckpt")
    from safetensors.torch import load_file

    whole, resumed, first = (load_file(tmp / d / "model.safetensors") for d in ("whole", "resumed", "start"))
    result = {
        "steps": int(metrics["steps"]),
        "mismatch_abs": curve["rollout_mismatch_abs"].to_list(),
        "mismatch_kl": curve["rollout_mismatch_kl"].to_list(),
        "mismatch_max_ratio": curve["rollout_mismatch_max_ratio"].to_list(),
        "prompts": len(prompts),
        "synced_equal_transformers": sum(a == b for a, b in zip(after, reference)),
        "synced_differ_from_start": sum(a != b for a, b in zip(after, before)),
        "checkpoints_after_kill": checkpoints,
        "trained_moved": any(not torch.equal(whole[k], first[k]) for k in whole),
        "resumed_equal_whole": whole.keys() == resumed.keys() and all(torch.equal(whole[k], resumed[k]) for k in whole),
    }
    print(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # vLLM's in-process engine leaves threads that can hold the interpreter's exit


if __name__ == "__main__":
    main()
