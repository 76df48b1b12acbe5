"""The multi-hop QA domain's stages: corpus, questions, distill, base, filter, grpo, infer (scored as it goes).

SFT is the travel stage's flow on QA data. Policies evaluated on the QA test split:
the QA agent (qa_base, qa_sft, qa_grpo), the baselines (naive_rag: one retrieval
then an answer; base_tool_call: the base model with the tool's JSON schema, no
training), the expert (qa_teacher), and the travel agent out of its domain
(travel_base, travel_sft, travel_grpo), whose drop is the alignment tax.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING

from prefect import flow

from star.config import EnvParams, GRPOStageParams, InferParams, ModelParams, QAParams, RunnerParams
from star.io import atomic_dir, content_digest, read_jsonl, write_json
from star.qa.data import Question, load_questions, save_passages, save_questions
from star.tracking import log_episode_traces, log_model

if TYPE_CHECKING:  # each flow imports what it runs, so a stage's deps list only its own code
    from star.qa.search import QATools

SPLITS = ("train", "validation", "test")


def _tools(qa: QAParams, corpus: Path) -> QATools:
    from star.qa.search import QATools, SearchIndex

    return QATools(SearchIndex.load(corpus / "index"), top_k=qa.top_k, max_words=qa.max_words)


@flow(name="qa_world")
def qa_world_flow(qa: QAParams, out: Path) -> dict[str, float]:
    from star.qa.loaders import LOADERS
    from star.qa.search import SearchIndex
    from star.qa.world import build_world

    with atomic_dir(out) as tmp:
        if qa.source == "synthetic":
            world = build_world(qa.world)
            world.save(tmp)
            passages = world.passages()
        else:
            _, passages = LOADERS[qa.source](qa.path)
        save_passages(tmp / "passages.jsonl", passages)
        start = time.perf_counter()
        SearchIndex.build(passages).save(tmp / "index")
        seconds = time.perf_counter() - start
    return {"passages": len(passages), "index_build_seconds": seconds}


@flow(name="qa_synthesize")
def qa_synthesize_flow(qa: QAParams, corpus: Path, out: Path) -> dict[str, float]:
    from star.qa.loaders import LOADERS
    from star.qa.synthesize import synthesize_questions
    from star.qa.world import KnowledgeWorld

    if qa.source == "synthetic":
        splits = synthesize_questions(KnowledgeWorld.load(corpus), qa.questions)
    else:
        # A public file is one pool: shuffled by seed, then cut to the split sizes.
        questions, _ = LOADERS[qa.source](qa.path)
        random.Random(qa.questions.seed).shuffle(questions)
        splits, start = {}, 0
        for split in SPLITS:
            n = qa.questions.sizes.get(split, 0)
            splits[split] = questions[start : start + n]
            start += n
    with atomic_dir(out) as tmp:
        for split in SPLITS:
            save_questions(tmp / f"{split}.jsonl", splits.get(split, []))
    metrics: dict[str, float] = {f"questions_{s}": len(splits.get(s, [])) for s in SPLITS}
    for question in splits.get("train", []):
        metrics[f"train_{question.level}"] = metrics.get(f"train_{question.level}", 0) + 1
    return metrics


def _rows_metrics(rows: list[dict]) -> dict[str, float]:
    n = max(len(rows), 1)
    return {
        "episodes": len(rows),
        "em": sum(r["evaluation"]["em"] for r in rows) / n,
        "f1": sum(r["evaluation"]["f1"] for r in rows) / n,
        "mean_turns": sum(r["turns"] for r in rows) / n,
    }


def _save(rows: list[dict], out: Path, stats: dict | None = None) -> None:
    with atomic_dir(out) as tmp:
        with open(tmp / "trajectories.jsonl", "w") as f:
            for row in rows:
                f.write(json.dumps(row, sort_keys=True) + "\n")
        if stats is not None:
            write_json(tmp / "stats.json", stats)


def play_qa_chunk(items: list[tuple[Question, int]], first: int, qa: QAParams, tools: QATools) -> list[dict]:
    """One task: the expert's episodes of a chunk, each with its own seeds."""
    from star.qa.expert import QAExpert, run_episode

    teacher = QAExpert(qa.teacher.mistake_rate)
    return [run_episode(teacher, tools, q, s, seed=qa.teacher.seed, max_turns=qa.max_turns) for q, s in items]


@flow(name="qa_distill")
def _qa_distill(qa: QAParams, corpus: Path, questions: Path, out: Path, store: Path, size: int) -> dict[str, float]:
    from flows.fanout import fan_out, forget

    items = [(q, s) for q in load_questions(questions) for s in range(qa.teacher.samples)]
    # What determines the rows: the expert, the search tool, the episode length and the inputs.
    settings = qa.teacher.model_dump_json() + json.dumps([qa.top_k, qa.max_words, qa.max_turns])
    fingerprint = hashlib.sha256((settings + content_digest(corpus, questions)).encode()).hexdigest()[:16]
    rows = fan_out(play_qa_chunk, items, size, fingerprint, store, desc="qa_distill", qa=qa, tools=_tools(qa, corpus))
    metrics = {**_rows_metrics(rows), "success_rate": sum(r["success"] for r in rows) / max(len(rows), 1)}
    _save(rows, out, metrics)
    forget(store)
    return metrics


def qa_distill_flow(qa: QAParams, runner: RunnerParams, corpus: Path, questions: Path, out: Path, progress_dir: Path) -> dict[str, float]:
    """The qa_distill flow under the task runner of `runner`; finished chunks wait in progress_dir/qa_distill."""
    from flows.fanout import EXPERT_CHUNK, chunk_size, under

    return under(_qa_distill, runner, threads=1)(qa, corpus, questions, out, progress_dir / "qa_distill", chunk_size(runner, EXPERT_CHUNK))


@flow(name="qa_base")
def qa_base_flow(model: ModelParams, corpus: Path, trajectories: Path, out: Path) -> dict[str, float]:
    from star.models.base import prepare_base
    from star.models.tiny import corpus_from_trajectories
    from star.qa.env import QA_SYSTEM_PROMPT
    from star.qa.evaluate import NAIVE_RAG_SYSTEM_PROMPT
    from star.qa.world import KnowledgeWorld, entity_names

    def texts() -> list[str]:
        rows = read_jsonl(trajectories)
        tools = json.loads(rows[0]["tools"]) if rows else []
        # The baselines' prompts too: the schema (base_tool_call) and the RAG instruction.
        return corpus_from_trajectories([r["messages"] for r in rows], tools, QA_SYSTEM_PROMPT) + [NAIVE_RAG_SYSTEM_PROMPT]

    def names() -> list[str]:
        # Loaded datasets have multi-word titles: only the synthetic world's names become tokens.
        return entity_names(KnowledgeWorld.load(corpus)) if (corpus / "world.json").exists() else []

    prepare_base(out, model.name_or_path, model.tiny, texts, names)
    return {}


@flow(name="qa_filter")
def qa_filter_flow(qa: QAParams, model: ModelParams, trajectories: Path, base: Path, out: Path) -> dict[str, float]:
    from star.models.base import model_source
    from star.train.filtering import chat_token_counter, select, write_selection

    kept, stats = select(
        read_jsonl(trajectories / "trajectories.jsonl"),
        require="final",
        judge=lambda row: bool(row["success"]),
        max_tokens=qa.filter.max_tokens,
        count_tokens=chat_token_counter(model_source(base), model.tool_schemas),
        size=qa.filter.size,
        levels=qa.filter.levels,
        seed=qa.filter.seed,
    )
    return write_selection(kept, dict(stats), out)


@flow(name="qa_grpo")
def qa_grpo_flow(
    grpo: GRPOStageParams, env: EnvParams, qa: QAParams, model: ModelParams, corpus: Path, questions: Path, sft: Path, out: Path, checkpoints: Path, curve: Path
) -> dict[str, float]:
    import mlflow

    from star.models.base import model_source
    from star.qa.env import QA_SYSTEM_PROMPT, QAEnv
    from star.qa.rewards import score_episode
    from star.train.grpo import train_grpo

    grpo = grpo.model_copy(update=qa.grpo.model_dump())
    tools = _tools(qa, corpus)
    tasks = load_questions(questions)

    def make_env(question: Question, seed: int) -> QAEnv:
        return QAEnv(tools, max_turns=qa.max_turns, fault_rate=env.fault_rate, seed=seed + question.idx)

    def score(question: Question, qa_env: QAEnv, step: int) -> dict[str, float]:
        return score_episode(question, qa_env, qa.reward)

    fingerprint = hashlib.sha256((grpo.model_dump_json() + env.model_dump_json() + qa.model_dump_json() + model.model_dump_json() + content_digest(questions, sft)).encode()).hexdigest()[:12]
    metrics = train_grpo(
        grpo, model_source(sft), tasks, lambda q: q.question, make_env, score, QA_SYSTEM_PROMPT,
        out, checkpoints / fingerprint, curve_path=curve, tools_in_prompt=model.tool_schemas,
        log_fn=lambda metrics, step: mlflow.log_metrics(metrics, step=step),
    )
    log_model(out, {"grpo": grpo.model_dump(mode="json"), "model": model.model_dump(mode="json")}, metrics)  # MLflow's Models
    return metrics


def play_policy_chunk(items: list[Question], first: int, infer: InferParams, qa: QAParams, model: ModelParams, policy: str, corpus: Path, model_dir: Path | None) -> list[dict]:
    """One task: a chunk of questions played by `policy`; a model loads once per task."""
    from flows.infer import load_policy
    from star.agent.policy import play_tasks
    from star.agent.rollout import RolloutLimits
    from star.qa.env import NaiveRAGEnv, QAEnv
    from star.qa.expert import QAExpert, run_episode, trajectory_row

    tools = _tools(qa, corpus)
    if policy == "qa_teacher":  # the reference: the expert without deliberate mistakes
        return [run_episode(QAExpert(0.0), tools, q, 0, seed=qa.teacher.seed, max_turns=qa.max_turns) for q in items]

    def make_env(question: Question, seed: int):
        return NaiveRAGEnv(tools) if policy == "naive_rag" else QAEnv(tools, max_turns=qa.max_turns)

    backend, tokenizer = load_policy(infer, model_dir)
    limits = RolloutLimits(max_turns=min(infer.max_turns, qa.max_turns), max_new_tokens=infer.max_new_tokens, max_total_tokens=infer.max_total_tokens, max_invalid_turns=infer.max_invalid_turns)
    # base_tool_call: the model's native function calling, its tools' JSON schemas in the prompt.
    schemas = model.tool_schemas or policy == "base_tool_call"
    played = play_tasks(backend, tokenizer, make_env, items, limits, batch_size=infer.batch_size, seed=infer.seed, tools_in_prompt=schemas)
    return [trajectory_row(env, q, policy, 0) for q, env, _ in played]


@flow(name="qa_infer")
def _qa_infer(
    infer: InferParams, qa: QAParams, model: ModelParams, policy: str, corpus: Path, questions: Path, model_dir: Path | None, out: Path, report: Path, store: Path, size: int | None
) -> dict[str, float]:
    from flows.fanout import fan_out, forget
    from flows.infer import model_fingerprint, save_rows
    from star.qa.evaluate import aggregate

    items = load_questions(questions)
    inputs = (corpus, questions) + ((model_dir,) if model_dir else ())
    fingerprint = model_fingerprint(infer, qa, model, policy, inputs=inputs)
    shared = dict(infer=infer, qa=qa, model=model, policy=policy, corpus=corpus, model_dir=model_dir)
    rows = fan_out(play_policy_chunk, items, size or max(len(items), 1), fingerprint, store, desc=f"qa_infer {policy}", **shared)
    metrics = save_rows(rows, out)
    forget(store)
    log_episode_traces(rows)  # the first episodes, to browse in MLflow's Traces tab
    summary = aggregate(rows)
    flat = {k: v for k, v in summary.items() if isinstance(v, (int, float))}
    write_json(report / "summary.json", summary)
    write_json(report / "metrics.json", flat)
    return {**metrics, **flat}


def qa_infer_flow(
    infer: InferParams, qa: QAParams, model: ModelParams, runner: RunnerParams, policy: str, corpus: Path, questions: Path, model_dir: Path | None, out: Path, report: Path, progress_dir: Path
) -> dict[str, float]:
    """Play the policy on the questions, then score it (EM/F1 are cheap, so one stage does both), under
    the task runner of `runner`; finished chunks wait in progress_dir/qa_infer_POLICY."""
    from flows.fanout import under

    flow_ = under(_qa_infer, runner, threads=1)
    return flow_(infer, qa, model, policy, corpus, questions, model_dir, out, report, progress_dir / f"qa_infer_{policy}", runner.episodes_per_task)
