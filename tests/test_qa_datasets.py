"""The QA domain on the public datasets' fixtures (tests/data/qa): the expert, the splits, the stages.

The fixtures are a handful of rows each, written from the published schemas:
HotpotQA's dev JSON list (and its Hugging Face datasets layout as JSON Lines),
2WikiMultihopQA's dev JSON list with the release's id_aliases.json beside it,
and MuSiQue-Full's dev JSON Lines (answerable and unanswerable questions).
"""

import json
import logging
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from star.qa.data import load_questions
from star.qa.domain import QADomain
from star.qa.env import QAEnv
from star.qa.expert import QAExpert, _compare, run_episode
from star.qa.loaders import DatasetError, load_dataset, split_counts
from star.qa.search import QATools, SearchIndex, retrieval_hits
from star.qa.specs import QAParams

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FIXTURES = ROOT / "tests/data/qa"
FILES = {
    "hotpotqa": FIXTURES / "hotpotqa/hotpot_dev_distractor_v1.json",
    "2wiki": FIXTURES / "2wiki/dev.json",
    "musique": FIXTURES / "musique/musique_full_v1.0_dev.jsonl",
}
# The expert's EM on each whole fixture (top_k 3, 8 turns): 2Wiki's date question states
# "June 12, 1516" where the gold answer reads "12 June 1516", so the expert answers unknown.
EXPERT_EM = {"hotpotqa": 1.0, "2wiki": 5 / 6, "musique": 1.0}


def _setup(source, top_k=3, max_words=None):
    data = load_dataset(source, FILES[source])
    return data, QATools(SearchIndex.build(data.passages), top_k=top_k, max_words=max_words)


def _question(data, qid):
    return next(q for q in data.questions if q.qid == qid)


def _shown(row):
    return {line for m in row["messages"] if m["role"] == "tool" for line in m["content"].splitlines()}


@pytest.mark.parametrize("source", FILES)
def test_the_expert_answers_each_fixture(source):
    data, tools = _setup(source)
    rows = [run_episode(QAExpert(), tools, q, 0, seed=0) for q in data.questions]
    assert sum(r["success"] for r in rows) / len(rows) == pytest.approx(EXPERT_EM[source])
    assert all(r["answer"] == "unknown" for r in rows if not r["success"])


def test_a_comparison_without_a_standalone_number_does_not_crash_the_expert():
    """Problem 1: "built in the late 19th century" holds a digit but no number (was AttributeError in _compare)."""
    assert _compare(["St. Alban's Church", "Holy Cross Church"], ["It was built in the late 19th century.", "It was built in 1790."], "Which is older?") == ""
    data, tools = _setup("hotpotqa")
    question = _question(data, "5a7a06935542990198eaf050")
    row = run_episode(QAExpert(), tools, question, 0, seed=0)
    assert row["answer"] == "Holy Cross Church" and row["success"]


def test_the_expert_finds_a_page_that_other_pages_outrank():
    """Problem 2: searched by its title, "Big Hill" is outranked by three pages named after it (the
    expert answered unknown); the title with the question's words finds it."""
    data, tools = _setup("hotpotqa")
    question = _question(data, "5ab3b0bf5542992ade7c6e39")
    page = tools.render(tools.index.by_id[question.supporting[0]])
    assert page not in [tools.render(p) for p in tools.index.search("Big Hill", 3)]
    row = run_episode(QAExpert(), tools, question, 0, seed=0)
    assert row["success"] and page in _shown(row)
    assert json.loads(row["calls"][1])["arguments"]["query"].startswith("Big Hill How high")


def test_the_expert_answers_only_from_passages_it_was_shown():
    """Problem 2: where paragraphs share a title (MuSiQue), a passage with the right title is not the
    supporting one: the expert searches until that very passage is shown, or answers unknown."""
    data, tools = _setup("musique")
    question = _question(data, "2hop__13548_13529")
    marcels = tools.render(tools.index.by_id[question.supporting[0]])
    by_title = [tools.render(p) for p in tools.index.search(question.plan[0], 3)]
    assert marcels not in by_title and all(line.startswith(f"{question.plan[0]}: ") for line in by_title)
    row = run_episode(QAExpert(), tools, question, 0, seed=0)
    assert row["success"] and marcels in _shown(row)
    # Every answer on every fixture, at every budget, comes from shown gold passages that state it.
    for source in FILES:
        for top_k, max_words, max_turns in ((3, None, 8), (1, None, 8), (3, 12, 8), (2, None, 3)):
            data, tools = _setup(source, top_k, max_words)
            for q in data.questions:
                row = run_episode(QAExpert(), tools, q, 0, seed=0, max_turns=max_turns)
                if row["answer"] != "unknown":
                    shown = _shown(row)
                    gold = [tools.render(tools.index.by_id[pid]) for pid in q.supporting]
                    assert all(line in shown for line in gold), (source, q.qid, top_k, max_turns)
                    assert q.answer in ("yes", "no") or any(row["answer"].lower() in line.lower() for line in gold)


def test_the_expert_says_unknown_rather_than_guess():
    data, tools = _setup("2wiki")
    date = _question(data, "0b9c80c00bdb11eba7f7acde48001122")  # "12 June 1516" is written "June 12, 1516"
    row = run_episode(QAExpert(), tools, date, 0, seed=0)
    assert row["answer"] == "unknown" and not row["success"]  # filtered out of the SFT set
    nationality = _question(data, "af8c6722088b11ebbd6fac1f6bf848b6")  # "an American film director": an alias
    row = run_episode(QAExpert(), tools, nationality, 0, seed=0)
    assert row["answer"] == "American" and row["evaluation"] == {"em": 1.0, "f1": 1.0}
    out_of_turns = run_episode(QAExpert(), tools, _question(data, "4e3bd5f40bde11eba7f7acde48001122"), 0, seed=0, max_turns=2)
    assert out_of_turns["answer"] == "unknown" and out_of_turns["turns"] == 2


def test_the_expert_never_crashes_on_a_public_question():
    """Any kind, any budget, faults, mistakes, even passages missing from the index: an answer every time."""
    rng = random.Random(0)
    for source in FILES:
        data, tools = _setup(source, top_k=2, max_words=8)
        broken = data.questions[0].model_copy(update={"supporting": ["not-in-the-index"], "plan": ["Nowhere"]})
        for q in [*data.questions, broken]:
            for max_turns in (1, 2, 5, 12):
                env = QAEnv(tools, max_turns=max_turns, fault_rate=0.3, seed=rng.randrange(100))
                env.reset(q)
                QAExpert(mistake_rate=0.5).episode(env, q, random.Random(rng.randrange(100)))
                assert env.done


def test_retrieval_figures_on_the_fixtures():
    for source in FILES:
        data, tools = _setup(source)
        hits = retrieval_hits(tools.index, data.questions, 3)
        assert hits["retrieval/passages"] == sum(len(q.supporting) for q in data.questions)
        assert hits["retrieval/any_top3"] == 1.0  # every gold passage is reachable by one of the expert's queries
        assert all(hits[f"retrieval/{k}_top3"] <= 1.0 for k in ("title", "title_question", "question"))
    data, tools = _setup("musique")
    assert retrieval_hits(tools.index, data.questions, 3)["retrieval/title_top3"] < 1.0  # the shared Blue Moon title


# ---- splits of a small file (problem 3)


def test_split_counts_keep_the_proportions_and_never_leave_a_split_empty(caplog):
    sizes = {"train": 1000, "validation": 100, "test": 100}
    assert split_counts(2000, sizes) == sizes  # enough questions: the sizes asked for
    with caplog.at_level(logging.WARNING, logger="star.qa.loaders"):
        assert split_counts(8, sizes, "dev.json") == {"train": 6, "validation": 1, "test": 1}
    assert "dev.json has 8 questions, fewer than the 1200 asked for" in caplog.text and "split by proportion: train 6, validation 1, test 1" in caplog.text
    assert split_counts(600, sizes) == {"train": 500, "validation": 50, "test": 50}
    assert split_counts(3, sizes) == {"train": 1, "validation": 1, "test": 1}
    assert split_counts(5, {"train": 10, "test": 10}) == {"train": 3, "validation": 0, "test": 2}  # 0 asked, 0 given
    with pytest.raises(DatasetError, match="dev.json: 2 questions cannot fill the 3 splits asked for"):
        split_counts(2, sizes, "dev.json")


def _domain(tmp_path, source, **questions):
    qa = QAParams(source=source, path=str(FILES[source]), questions=questions)
    return QADomain({"qa": qa}, tmp_path / "corpus")


@pytest.mark.parametrize("source", FILES)
def test_a_small_file_fills_every_split_with_a_warning(tmp_path, caplog, source):
    """With the default sizes (1,000 / 100 / 100) a file of a few questions went all to train."""
    domain = _domain(tmp_path, source)
    with caplog.at_level(logging.WARNING):
        metrics = domain.synthesize(tmp_path / "questions")
    splits = {s: load_questions(tmp_path / f"questions/{s}.jsonl") for s in ("train", "validation", "test")}
    assert all(splits.values()) and sum(map(len, splits.values())) == metrics["questions_available"]
    assert {metrics[f"questions_{s}"] for s in splits} == {len(q) for q in splits.values()}
    assert "split by proportion" in caplog.text
    if source == "musique":
        assert metrics["skipped_unanswerable"] == 2


def test_knobs_a_public_file_ignores_are_warned_about(tmp_path, caplog):
    domain = _domain(tmp_path, "hotpotqa", hops={2: 1.0}, kinds={"bridge": 1.0, "comparison": 0.0})
    with caplog.at_level(logging.WARNING, logger="star.qa.domain"):
        domain.synthesize(tmp_path / "questions")
    assert "qa.questions.hops applies to the synthetic source only" in caplog.text
    assert "qa.questions.kinds applies to the synthetic source only" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="star.qa.domain"):
        _domain(tmp_path, "hotpotqa").synthesize(tmp_path / "questions")  # the defaults: nothing to say
    assert "applies to the synthetic source only" not in caplog.text


def test_check_inputs_reads_a_public_file_before_the_work(tmp_path):
    """What a stage calls before its flow (Domain.check_inputs), so a bad file is one line, and read once."""
    broken = tmp_path / "dev.json"
    broken.write_text(json.dumps([{"_id": "1", "question": "q", "answer": "a", "type": "bridge", "supporting_facts": []}]))
    domain = QADomain({"qa": QAParams(source="hotpotqa", path=str(broken))}, tmp_path / "corpus")
    with pytest.raises(DatasetError, match=r"dev.json: row 1: field context: Field required$"):
        domain.check_inputs()
    checked = _domain(tmp_path, "musique")
    checked.check_inputs()
    assert checked.checked.skipped == {"unanswerable": 2}
    assert checked.synthesize(tmp_path / "questions")["questions_available"] == 5
    two = tmp_path / "two.jsonl"  # two answerable questions for three splits
    two.write_text("".join(line + "\n" for line in FILES["musique"].read_text().splitlines()[2:4]))
    with pytest.raises(DatasetError, match="two.jsonl: 2 questions cannot fill the 3 splits asked for"):
        QADomain({"qa": QAParams(source="musique", path=str(two))}, tmp_path / "corpus").check_inputs()
    synthetic = QADomain({"qa": QAParams()}, tmp_path / "corpus")
    synthetic.check_inputs()
    assert synthetic.checked is None


# ---- the stages on each fixture


def _stages(tmp_path, params, commands, timeout=900):
    for name in ("star", "stages", "flows"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_", "PREFECT_"))}
    env.update(PATH=f"{BIN}:{env['PATH']}", PYTHONPATH=str(tmp_path), HOME=str(tmp_path), PREFECT_HOME=str(tmp_path / ".prefect"))
    script = " && ".join(commands)
    return subprocess.run([sys.executable, "-m", "flows.serve", "bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


def _stage_metrics(tmp_path):
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("star").experiment_id], max_results=100)
    return {r.info.run_name: r.data.metrics for r in runs}


@pytest.mark.slow
@pytest.mark.parametrize("source", FILES)
def test_the_chain_runs_on_each_fixture(tmp_path, source):
    """qa_world -> qa_synthesize -> qa_distill -> qa_infer@qa_teacher on a public file, default split sizes."""
    params = {"qa": {"source": source, "path": str(FILES[source]), "teacher": {"mistake_rate": 0.0}}}
    commands = ["python -m stages.world qa", "python -m stages.synthesize qa", "python -m stages.distill qa", "python -m stages.infer qa qa_teacher"]
    proc = _stages(tmp_path, params, commands)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "split by proportion" in proc.stderr  # the small file, said out loud

    splits = {s: load_questions(tmp_path / f"data/qa/questions/{s}.jsonl") for s in ("train", "validation", "test")}
    assert all(splits.values())
    report = json.loads((tmp_path / "reports/qa/qa_teacher/metrics.json").read_text())
    assert report["n"] == len(splits["test"]) and 0.0 <= report["em"] <= 1.0 and f"{source}/em" in report

    metrics = _stage_metrics(tmp_path)
    world, synthesize, distill = metrics["qa_world"], metrics["qa_synthesize"], metrics["qa_distill"]
    assert world["questions"] == synthesize["questions_available"] == len(load_dataset(source, FILES[source]).questions)
    assert world["retrieval/any_top3"] == 1.0 and 0.0 <= world["retrieval/title_top3"] <= 1.0
    assert distill["episodes"] == len(splits["train"]) and "unknown_rate" in distill
    assert metrics["qa_infer_teacher"]["em"] == report["em"]
    if source == "musique":
        assert world["skipped_unanswerable"] == synthesize["skipped_unanswerable"] == 2


@pytest.mark.slow
def test_a_broken_file_stops_the_stage_with_one_line(tmp_path):
    broken = tmp_path / "dev.json"
    broken.write_text(FILES["musique"].read_text())  # MuSiQue rows given as HotpotQA
    proc = _stages(tmp_path, {"qa": {"source": "hotpotqa", "path": str(broken)}}, ["python -m stages.world qa"], timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(f"error: {broken}: line 1: field ") and "looks like musique" in lines[0]
