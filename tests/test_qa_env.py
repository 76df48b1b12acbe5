"""QAEnv episodes: the scripted expert, rewards on known episodes, evaluation."""

import json
import random

import pytest
from pydantic import ValidationError

from star.env.episode import EpisodeRow
from star.env.parse import parse_action
from star.env.teacher import answer_text, tool_call_text
from star.qa.data import Question
from star.qa.env import BASE_TOOL_CALL_SYSTEM_PROMPT, QA_SYSTEM_PROMPT, BaseToolCallEnv, NaiveRAGEnv, QAEnv, plain_answer
from star.qa.evaluate import aggregate, naive_rag_prompt, score_answer
from star.qa.expert import QAExpert, run_episode, trajectory_row
from star.qa.rewards import Scorer, call_verdicts
from star.qa.search import QATools, SearchIndex
from star.qa.specs import QARewardParams, QAWorldSpec, QuestionSpec
from star.qa.synthesize import synthesize_questions
from star.qa.world import build_world


@pytest.fixture(scope="module")
def world():
    return build_world(QAWorldSpec(seed=0))


@pytest.fixture(scope="module")
def tools(world):
    return QATools(SearchIndex.build(world.passages()), top_k=3)


@pytest.fixture(scope="module")
def questions(world):
    return synthesize_questions(world, QuestionSpec(seed=1, sizes={"train": 200, "validation": 0, "test": 0}))["train"]


def two_hop(questions):
    return next(q for q in questions if q.hops == 2 and q.kind == "bridge")


def search(query):
    return tool_call_text("Look it up.", "Search", {"query": query})


def play(tools, question, turns, max_turns=8):
    env = QAEnv(tools, max_turns=max_turns)
    env.reset(question)
    for text in turns:
        if env.done:
            break
        env.step(text)
    return env


def test_env_prompt_and_tools(tools, questions):
    env = QAEnv(tools)
    first = env.reset(questions[0])
    assert first == questions[0].question and env.question is questions[0]
    assert env.history == [{"role": "system", "content": QA_SYSTEM_PROMPT}, {"role": "user", "content": first}]
    assert [s["function"]["name"] for s in env.tool_schemas()] == ["Search"]
    assert "<tool_call>" in QA_SYSTEM_PROMPT and "<answer>" in QA_SYSTEM_PROMPT and "Search{query}" in QA_SYSTEM_PROMPT


def test_expert_answers_synthetic_questions(tools, questions):
    rows = [run_episode(QAExpert(), tools, q, 0, seed=0) for q in questions]
    stats = aggregate(rows)
    assert stats["n"] == 200 and stats["em"] >= 0.95
    assert all(stats[f"{h}hop/em"] >= 0.95 for h in (2, 3, 4))
    # one search per hop, then the answer
    assert all(r["tool_calls"] == r["hops"] and r["turns"] == r["hops"] + 1 for r in rows)


def test_expert_thoughts_quote_the_context_before_each_name(tools, questions):
    """Every name the expert writes repeats text just before it: a quoted passage sentence or the restated question."""
    import re

    for q in questions:
        row = run_episode(QAExpert(), tools, q, 0, seed=0)
        context, current = q.question, q.question
        for message in row["messages"][2:]:
            if message["role"] == "tool":
                context += "\n" + message["content"]
                continue
            action = parse_action(message["content"])
            thought = action.think
            name = action.answer if action.answer is not None else action.tool_calls[0].arguments["query"]
            assert name in thought, (q.question, thought)
            if "Now: " in thought:  # the question left to answer: the last one with one phrase replaced by a name
                restated = thought.split("Now: ")[1].split(" Look up ")[0]
                if restated != current:
                    assert re.sub(r"the (?:[a-z]+ )?[a-z]+ of [A-Z][a-z]+", name, current, count=1) == restated, (current, restated)
                current = restated
            elif current != q.question and action.answer is not None:
                assert thought.startswith(current), (current, thought)
            # the sentences quoted from passages are copied verbatim
            quoted = re.split(r"Now: |(?:Next, look up|Look up|So the answer is) ", thought.removeprefix(current))[0]
            for sentence in re.split(r"(?<=\.)\s+", quoted.strip()):
                if sentence and not sentence.startswith(("The other one is", "The question asks")) and " or " not in sentence:
                    assert sentence in context, (q.question, sentence)
        if q.kind == "comparison":  # the two years that decide it are quoted and compared before the answer
            years = re.findall(r"\b\d{4}\b", thought)
            assert len(set(years)) == 2, thought
            assert f"The question asks {'earlier' if 'earlier' in q.question else 'later'}: {q.answer}." in thought
        elif not q.answer.isdigit():
            assert thought.count(q.answer) >= 2, thought
        if q.kind == "bridge":  # every phrase resolved: the last restatement names the last entity searched
            assert q.plan[-1] in current and not any(n in current for n in q.plan[:-1]), (q.question, current)


def test_expert_compares_years_digit_by_digit():
    from star.qa.expert import _compare

    a, b = "Dakus is a city in Filpum, founded in 1122.", "Melzus is a city in Somul, founded in 1773."
    assert _compare(["Dakus", "Melzus"], [a, b], "Which city was founded later, Dakus or Melzus?") == (
        "Dakus 1122 or Melzus 1773? 1 = 1, 1 < 7: earlier Dakus, later Melzus. The question asks later: Melzus. "
    )
    a, b = "Silcar was born in 1946 in Vomrar.", "Sorhes was born in 1943 in Vomrar."
    assert _compare(["Silcar", "Sorhes"], [a, b], "Who was born earlier, Silcar or Sorhes?").endswith(
        "1 = 1, 9 = 9, 4 = 4, 6 > 3: earlier Sorhes, later Silcar. The question asks earlier: Sorhes. "
    )
    assert _compare(["A", "B"], ["A: 1946.", "B: 946."], "Who was born earlier, A or B?") == ""  # lengths differ: no digit steps


def test_expert_retries_faults_and_mistakes_spoil_answers(tools, questions):
    faulty = [run_episode(QAExpert(), tools, q, 0, seed=0, max_turns=12, fault_rate=0.2) for q in questions]
    assert sum(r["tool_errors"] for r in faulty) > 20
    assert aggregate(faulty)["em"] >= 0.95
    spoiled = aggregate([run_episode(QAExpert(mistake_rate=0.3), tools, q, 0, seed=0) for q in questions])["em"]
    assert 0.55 <= spoiled <= 0.85


def test_distillation_is_byte_deterministic(tools, questions):
    def rows(seed):
        out = [run_episode(QAExpert(mistake_rate=0.2), tools, q, s, seed=seed, fault_rate=0.1) for q in questions[:40] for s in range(2)]
        return "".join(json.dumps(r, sort_keys=True) + "\n" for r in out)

    assert rows(0) == rows(0) != rows(1)


def test_trajectory_row(tools, questions):
    q = two_hop(questions)
    env = QAEnv(tools)
    env.reset(q)
    QAExpert().episode(env, q, random.Random(0))
    row = trajectory_row(env, q, "expert", 3)
    assert list(row) == [  # the order every row is written in (star/env/episode.py); a field not given is left out
        "query_id", "level", "hops", "kind", "source", "sample", "teacher", "messages", "tools", "turns",
        "tool_calls", "tool_errors", "truncated", "answer", "evaluation", "success", "calls",
    ]
    with pytest.raises(ValidationError, match="evaluaton"):
        EpisodeRow.of(env, q.idx, q.level, "expert", evaluaton={})
    assert (row["query_id"], row["level"], row["sample"], row["source"]) == (q.idx, "2hop", 3, "synthetic")
    assert row["evaluation"] == {"em": 1.0, "f1": 1.0} and row["success"] and row["answer"] == q.answer
    assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    last = parse_action(row["messages"][-1]["content"])
    assert last.think and last.answer == q.answer
    assert json.loads(row["calls"][0]) == {"name": "Search", "arguments": {"query": q.plan[0]}, "kind": "ok"}


def test_rewards_correct_wrong_and_format_failure(tools, questions):
    q = two_hop(questions)
    score = Scorer(QARewardParams())  # f1, 0.1 format, 0.1 process
    good = score(q, play(tools, q, [search(q.plan[0]), search(q.plan[1]), answer_text("Done.", q.answer)]), 0)
    assert good == {
        "reward": pytest.approx(1.2), "em": 1.0, "f1": 1.0, "format": 1.0, "process": 1.0,
        "success": 1.0, "turns": 3.0, "tool_error_rate": 0.0,
        "fault_rate": 0.0, "invalid_rate": 0.0, "error_rate": 0.0, "recovery_rate": 0.0,
    }
    wrong = score(q, play(tools, q, [search(q.plan[0]), search(q.plan[1]), answer_text("Done.", "Nowhere")]), 0)
    assert (wrong["f1"], wrong["em"], wrong["format"], wrong["process"]) == (0.0, 0.0, 1.0, 1.0)
    assert wrong["reward"] == pytest.approx(0.2)
    # never answers: cut at max_turns, no format credit, no outcome
    cut = score(q, play(tools, q, [search(q.plan[0])] + [search(f"{q.plan[1]} {i}") for i in range(9)], max_turns=4), 0)
    assert (cut["format"], cut["f1"], cut["turns"]) == (0.0, 0.0, 4.0)
    empty = score(q, play(tools, q, [search(q.plan[0]), "<answer> </answer>"]), 0)
    assert (empty["format"], empty["f1"]) == (0.0, 0.0)


def test_outcome_em_or_f1():
    q = Question(idx=0, question="When?", answer="1954", hops=2, kind="bridge", source="synthetic")
    assert score_answer(q, "in 1954 maybe") == {"em": 0.0, "f1": 0.5}
    assert score_answer(q, "The 1954.") == {"em": 1.0, "f1": 1.0}
    assert score_answer(q, None) == {"em": 0.0, "f1": 0.0}


def test_partial_answers_score_by_the_chosen_outcome(tools, questions):
    q = next(q for q in questions if q.answer.isdigit())
    env = play(tools, q, [search(p) for p in q.plan] + [answer_text("Done.", f"in {q.answer} maybe")])
    assert Scorer(QARewardParams(weights={"f1": 1.0}))(q, env, 0)["reward"] == 0.5
    assert Scorer(QARewardParams(weights={"em": 1.0}))(q, env, 0)["reward"] == 0.0


def test_repeated_invalid_and_useless_calls_lower_the_process_term(tools, questions, world):
    q = two_hop(questions)
    score = Scorer(QARewardParams(weights={"f1": 1.0, "process": 1.0}))
    other = next(p.title for p in world.passages() if p.title not in q.plan and p.title not in q.question)
    cases = {
        "clean": [search(q.plan[0]), search(q.plan[1])],
        "repeated": [search(q.plan[0]), search(q.plan[0]), search(q.plan[1])],
        "invalid": [search(q.plan[0]), "I will just guess.", search(q.plan[1])],
        "bad_args": [search(q.plan[0]), tool_call_text("x", "Search", {"query": " "}), search(q.plan[1])],
        "unknown_tool": [search(q.plan[0]), tool_call_text("x", "Lookup", {"query": "x"}), search(q.plan[1])],
        "useless": [search(q.plan[0]), search(other), search(q.plan[1])],
    }
    verdicts, process = {}, {}
    for name, turns in cases.items():
        env = play(tools, q, turns + [answer_text("Done.", q.answer)])
        verdicts[name] = call_verdicts(q, env)
        process[name] = score(q, env, 0)["process"]
    assert verdicts["clean"] == ["informative", "informative"]
    assert verdicts["repeated"] == ["informative", "repeated", "informative"]
    assert verdicts["invalid"] == verdicts["bad_args"] == verdicts["unknown_tool"] == ["informative", "invalid", "informative"]
    assert verdicts["useless"] == ["informative", "uninformative", "informative"]
    assert process["clean"] == 1.0
    assert process["repeated"] == pytest.approx(0.5)  # (1 - 0.5 + 1) / 3
    assert process["invalid"] == pytest.approx(1 / 3)  # (1 - 1 + 1) / 3
    assert process["useless"] == pytest.approx(2 / 3)
    # a search that shows a supporting passage again is not informative twice
    again = play(tools, q, [search(q.plan[0]), search(f"{q.plan[0]} {q.plan[0]}"), answer_text("Done.", q.answer)])
    assert call_verdicts(q, again) == ["informative", "uninformative"]


def test_without_supporting_passages_new_results_count(tools, questions):
    q = two_hop(questions).model_copy(update={"supporting": []})
    env = play(tools, q, [search(q.plan[0]), search(q.plan[0] + " " + q.plan[0]), search(q.plan[1]), answer_text("Done.", q.answer)])
    assert call_verdicts(q, env) == ["informative", "uninformative", "informative"]


def test_aggregate_by_hops_and_source():
    def row(hops, source, em, f1):
        return {"hops": hops, "source": source, "evaluation": {"em": em, "f1": f1}}

    rows = [row(2, "synthetic", 1.0, 1.0), row(2, "hotpotqa", 0.0, 0.5), row(3, "synthetic", 0.0, 0.0), row(10, "musique", 1.0, 1.0)]
    stats = aggregate(rows)
    assert (stats["n"], stats["em"], stats["f1"]) == (4, 0.5, 0.625)
    assert list(stats["by_hops"]) == ["2", "3", "10"]
    assert stats["by_hops"]["2"] == {"em": 0.5, "f1": 0.75, "n": 2}
    assert stats["by_source"]["synthetic"] == {"em": 0.5, "f1": 0.5, "n": 2}
    assert (stats["2hop/em"], stats["2hop/n"], stats["hotpotqa/f1"], stats["10hop/em"]) == (0.5, 2, 0.5, 1.0)


def test_naive_rag_prompt(tools, questions):
    q = next(q for q in questions if q.kind == "comparison" and q.hops == 2)
    messages = naive_rag_prompt(q, tools.index, 3)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "<answer>" in messages[0]["content"]
    user = messages[1]["content"]
    assert user.endswith(f"Question: {q.question}")
    assert len(user.splitlines()) == 1 + 3 + 1
    # both compared entities are named in the question, so one retrieval finds both
    assert all(f"\n{name}: " in user for name in q.plan)


@pytest.mark.parametrize(
    "reply, answer",
    [
        ("The answer is: Kamve.", "Kamve."),
        ("So the final answer is Nurfur.", "Nurfur."),
        ("**Answer:** 1834\nBecause Dicu was founded in 1199.", "1834"),
        ("Tavin", "Tavin"),
        ("The answer to this is not in the passages.", "The answer to this is not in the passages."),
    ],
)
def test_plain_answer_reads_an_untagged_reply(reply, answer):
    assert plain_answer(reply) == answer


def test_baselines_take_a_reply_without_a_tool_call_as_the_answer(tools, questions):
    q = two_hop(questions)
    rag = NaiveRAGEnv(tools)
    rag.reset(q)
    rag.step(f"The answer is: {q.answer}.")
    assert rag.done and not rag.truncated and score_answer(q, rag.answer)["em"] == 1.0
    tagged = NaiveRAGEnv(tools)
    tagged.reset(q)
    tagged.step(f"<answer>{q.answer}</answer>")
    assert tagged.answer == q.answer

    env = BaseToolCallEnv(tools, max_turns=4)
    env.reset(q)
    assert env.history[0] == {"role": "system", "content": BASE_TOOL_CALL_SYSTEM_PROMPT}
    env.step(search(q.plan[0]))  # a call goes to the tool
    assert not env.done and env.history[-1]["role"] == "tool"
    env.step(f"It is {q.answer}, I think. The answer is {q.answer}")
    assert env.done and env.turns == 2 and score_answer(q, env.answer)["em"] == 1.0
    # The project's own prompt keeps its format: an untagged reply there is an invalid turn.
    strict = play(tools, q, [f"The answer is {q.answer}"])
    assert strict.answer is None and not strict.done


def test_a_policy_row_is_cut_as_the_rollout_engine_decided(tools, questions, tmp_path):
    """The engine also ends episodes the env would let go on (token limits, a run of invalid turns): the row says so."""
    from star.agent.rollout import EnvInfo, Trajectory
    from star.qa.domain import QADomain
    from star.qa.specs import QAParams

    q = two_hop(questions)
    env = play(tools, q, ["no call here", "nor here"])
    assert not env.truncated and not env.done
    cut = Trajectory(env.history, [1, 2], [3, 4, 5], [1, 1, 0], None, None, True, 2, EnvInfo())
    row = QADomain({"qa": QAParams()}, tmp_path).policy_row(q, env, cut, "qa_sft")
    assert row["truncated"] is True and row["completion_tokens"] == 2 and row["teacher"] == "qa_sft"


def test_another_domains_model_is_asked_as_a_baseline_asks(tools, questions, tmp_path):
    """travel_sft_naive_rag: the travel agent's model, in Naive RAG's episode (the alignment tax on that prompt)."""
    from pathlib import Path

    from stages.infer import model_dir
    from star.qa.domain import QADomain
    from star.qa.results import alignment_tax
    from star.qa.specs import QAParams

    assert model_dir("qa", "travel_sft_naive_rag") == Path("models/sft") and model_dir("qa", "travel_grpo") == Path("models/grpo")
    assert model_dir("qa", "naive_rag") == Path("models/qa/base")
    domain = QADomain({"qa": QAParams()}, tmp_path)
    domain.tools = tools
    q = two_hop(questions)
    assert type(domain.make_env(q, 0, max_turns=4, policy="travel_sft_naive_rag")) is NaiveRAGEnv
    assert type(domain.make_env(q, 0, max_turns=4, policy="travel_sft")) is QAEnv
    assert domain.tool_schemas("travel_grpo_base_tool_call", False) and not domain.tool_schemas("travel_grpo", False)
    results = {"travel_base": {"em": 0.1}, "travel_sft": {"em": 0.1}, "travel_base_naive_rag": {"em": 0.3}, "travel_sft_naive_rag": {"em": 0.2}}
    assert alignment_tax(results) == {"alignment_tax_sft": 0.0, "alignment_tax_sft_naive_rag": pytest.approx(0.1)}
