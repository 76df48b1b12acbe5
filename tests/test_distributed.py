"""Multi-process training with accelerate: the SFT and GRPO stages in two processes (DDP
over gloo on CPU), and the GPU configs in configs/accelerate as `accelerate launch` reads them."""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CONFIGS = ROOT / "configs/accelerate"
ROWS = 8  # 2 processes x 2 conversations: one epoch is 2 steps
STEPS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(cwd: Path, module: str, processes: int = 2, **env: str) -> subprocess.CompletedProcess:
    """`accelerate launch` of a stage in `cwd`, on CPU whatever the machine has.

    `--cpu` alone starts a single process (several need mpirun), so the processes are
    started as for GPUs (torchrun) with no GPU visible: accelerate then runs DDP over gloo.
    """
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_", "PREFECT_API"))}
    env = {**base, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(cwd / ".prefect"), "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", **env}
    command = [
        str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", str(processes), "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()), "-m", module,
    ]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, synthetic_sandbox) -> Path:
    """What the training stages read: the world, training queries, SFT conversations from
    the expert, and the built-in tiny model (the stages' `models/copy` and `models/sft`)."""
    from star.models.tiny import TinySpec, corpus_from_trajectories, make_tiny
    from star.travel.planner.distill import ExpertTeacher, run_episode
    from star.travel.planner.expert import Expert
    from star.travel.specs import SynthesisSpec
    from star.travel.world.sandbox_index import index_for
    from star.travel.world.synthesize import Synthesizer
    from star.travel.world.synthetic import entity_names
    from star.travel.world.tools import TravelTools

    root = tmp_path_factory.mktemp("inputs")
    queries = Synthesizer(synthetic_sandbox, SynthesisSpec(sizes={"train": ROWS, "validation": 0, "test": 0})).run()["train"]
    tools, index = TravelTools(synthetic_sandbox), index_for(synthetic_sandbox)
    rows = [run_episode(ExpertTeacher(Expert(0.0)), tools, index, q, 0, seed=0, max_turns=16, fault_rate=0.0) for q in queries]
    corpus = corpus_from_trajectories([r["messages"] for r in rows], json.loads(rows[0]["tools"]))
    spec = TinySpec(vocab_size=1000, hidden_size=64, num_layers=2, num_heads=2)
    make_tiny(root / "models/copy", corpus, entity_names(synthetic_sandbox), spec)
    shutil.copytree(root / "models/copy", root / "models/sft")
    synthetic_sandbox.save(root / "data/world")
    (root / "data/sft").mkdir(parents=True)
    (root / "data/sft/train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "data/queries").mkdir(parents=True)
    (root / "data/queries/train.jsonl").write_text("".join(q.model_dump_json() + "\n" for q in queries))
    return root


def workdir(inputs: Path, tmp_path: Path, params: dict) -> Path:
    shutil.copytree(inputs, tmp_path / "run")
    (tmp_path / "run/params.yaml").write_text(yaml.safe_dump({**params, "model": {"name_or_path": "builtin:tiny"}}))
    return tmp_path / "run"


def stage_runs(cwd: Path) -> tuple:
    """(client, the stage runs) of the MLflow store in `cwd`."""
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    return client, client.search_runs([client.get_experiment_by_name("star").experiment_id], filter_string="tags.`star.role` = 'stage'")


def generates(out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(out), AutoModelForCausalLM.from_pretrained(out)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Plan a trip."}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    generated = model.generate(**prompt, max_new_tokens=8, do_sample=False)
    assert generated.shape[1] > prompt["input_ids"].shape[1]


@pytest.mark.slow
def test_sft_trains_in_two_processes_and_the_first_writes(inputs, tmp_path):
    sft = dict(max_steps=STEPS, per_device_batch_size=2, max_length=1024, logging_steps=1, save_steps=2, cpu_threads=1)
    cwd = workdir(inputs, tmp_path, {"sft": sft})
    batches = tmp_path / "batches"
    proc = launch(cwd, "stages.sft", STAR_RECORD_BATCHES=str(batches))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]

    # Both processes trained, every step, each on its own share of the batch.
    ranks = [[json.loads(line) for line in (batches / f"rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)]
    assert [[b["step"] for b in rank] for rank in ranks] == [list(range(STEPS))] * 2
    for first, second in zip(*ranks):
        assert len(first["sequences"]) == len(second["sequences"]) == 2
        assert not set(first["sequences"]) & set(second["sequences"])
    # Each epoch (2 steps) the two processes cover all the conversations once.
    for epoch in (0, 1):
        seen = [s for rank in ranks for b in rank[2 * epoch : 2 * epoch + 2] for s in b["sequences"]]
        assert len(seen) == len(set(seen)) == ROWS

    # One MLflow run (the first process's), with the tokens of both processes.
    client, runs = stage_runs(cwd)
    assert [(r.data.tags["star.stage"], r.info.status) for r in runs] == [("sft", "FINISHED")]
    assert runs[0].data.metrics["steps"] == STEPS
    tokens = [m.value for m in client.get_metric_history(runs[0].info.run_id, "train/train_tokens")]
    assert tokens[-1] == runs[0].data.metrics["train_tokens"] > 0
    assert not any((cwd / "models/.checkpoints/sft").iterdir())
    assert (cwd / "reports/train/sft.csv").read_text().count("\n") == STEPS + 1
    generates(cwd / "models/sft")


@pytest.mark.slow
def test_grpo_trains_in_two_processes_and_the_first_writes(inputs, tmp_path):
    grpo = dict(
        algorithm="grpo", num_generations=2, queries_per_step=1, steps=2, save_steps=1, max_turns=2, max_new_tokens=16,
        max_total_tokens=512, temperature=1.0, skip_levels=[], unseen_queries=False, mask_truncated_completions=False,
    )
    cwd = workdir(inputs, tmp_path, {"grpo": grpo})
    batches = tmp_path / "batches"
    proc = launch(cwd, "stages.grpo", STAR_RECORD_BATCHES=str(batches))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]

    # Each step each process plays one whole group (2 episodes of one query), not the other's.
    ranks = [[json.loads(line) for line in (batches / f"rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)]
    assert [[b["step"] for b in rank] for rank in ranks] == [[0, 1]] * 2
    for first, second in zip(*ranks):
        assert len(set(first["prompts"])) == len(set(second["prompts"])) == 1 and len(first["prompts"]) == 2
        assert first["prompts"] != second["prompts"]

    _, runs = stage_runs(cwd)
    assert [(r.data.tags["star.stage"], r.info.status) for r in runs] == [("grpo", "FINISHED")]
    assert runs[0].data.metrics["steps"] == 2
    assert not any((cwd / "models/.checkpoints/grpo").iterdir())
    generates(cwd / "models/grpo")


@pytest.mark.parametrize(
    "name, expected",
    [
        ("ddp", {}),
        ("zero2", {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"}),
        ("zero3", {"ACCELERATE_DEEPSPEED_ZERO_STAGE": "3", "ACCELERATE_DEEPSPEED_ZERO3_INIT": "true", "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "true"}),
        ("fsdp", {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT", "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP"}),
    ],
)
def test_accelerate_configs_are_read_as_written(name, expected):
    """Each config loads (accelerate rejects unknown keys), its engine options are options of
    `accelerate launch`, and the launcher turns them into the environment the processes get."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    path = CONFIGS / f"{name}.yaml"
    assert path.read_text().startswith("# ")  # when to use it
    config = load_config_from_file(str(path))
    assert config.mixed_precision == "bf16" and not config.use_cpu
    parser = launch_command_parser()
    options = {action.dest for action in parser._actions}
    engine = config.deepspeed_config or config.fsdp_config
    assert set(engine) <= options, set(engine) - options

    args, defaults, _ = _validate_launch_command(parser.parse_args(["--config_file", str(path), "-m", "stages.sft"]))
    assert (args.multi_gpu, args.use_deepspeed, args.use_fsdp) == (name == "ddp", name.startswith("zero"), name == "fsdp")
    if args.use_deepspeed:
        args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)  # as `launch_command` sets it
        env = prepare_deepspeed_cmd_env(args)[1]
    else:
        env = prepare_multi_gpu_env(args)
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16"
    assert {k: env.get(k) for k in expected} == expected
