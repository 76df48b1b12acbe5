"""EM/F1 as the official HotpotQA, 2WikiMultihopQA and MuSiQue scripts compute them, on cases worked out by hand."""

import pytest

from star.qa.data import Question
from star.qa.evaluate import score_answer
from star.qa.metrics import answer_scores, exact_match, f1_score, normalize_answer, squad_f1


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  a   cat,  an apple ", "cat apple"),
        ("Theatre of the Absurd", "theatre of absurd"),  # 'the' only as a whole word
        ("U.S.A.", "usa"),
        ("Anne-Marie", "annemarie"),
        ("", ""),
    ],
)
def test_normalize_answer(text, normal):
    assert normalize_answer(text) == normal


def test_exact_match_ignores_case_articles_and_punctuation():
    assert exact_match("the Kastin.", "Kastin") == 1.0
    assert exact_match("Kastin city", "Kastin") == 0.0


def test_f1_token_overlap():
    # pred tokens: barack obama, gold: president barack obama -> P 1, R 2/3, F1 0.8
    assert f1_score("Barack Obama", "President Barack Obama") == pytest.approx(0.8)
    # repeated tokens count once per occurrence on each side: P 1/3, R 1 -> 0.5
    assert f1_score("paris paris paris", "Paris") == pytest.approx(0.5)
    assert f1_score("London", "Paris") == 0.0
    assert f1_score("", "Paris") == 0.0


def test_f1_yes_no_gets_no_partial_credit():
    assert f1_score("yes", "yes") == 1.0
    assert f1_score("no", "no way") == 0.0  # would be 2/3 by token overlap
    assert f1_score("yes it is", "yes") == 0.0
    assert f1_score("noanswer", "no answer") == 0.0


def test_musique_f1_is_squads():
    # no yes/no rule, and two empty answers agree
    assert squad_f1("no", "no way") == pytest.approx(2 / 3)
    assert squad_f1("", "") == 1.0 and f1_score("", "") == 0.0
    assert squad_f1("", "Paris") == 0.0
    assert squad_f1("Barack Obama", "President Barack Obama") == pytest.approx(0.8)


def test_em_and_f1_take_the_best_gold_each():
    # EM from one alias, F1 from another (max over ground truths, each metric on its own)
    scores = answer_scores("Bombardier Aerospace", ["Bombardier Inc.", "Bombardier", "Bombardier Aerospace division"], "musique")
    assert scores["em"] == 0.0 and scores["f1"] == pytest.approx(0.8)
    assert answer_scores("USA", ["United States", "USA"], "2wiki") == {"em": 1.0, "f1": 1.0}
    with pytest.raises(ValueError):
        answer_scores("x", [], "hotpotqa")


@pytest.mark.parametrize("source", ["musique", "2wiki"])
def test_an_alias_scores_as_the_answer(source):
    """MuSiQue's answer_aliases and 2Wiki's aliases count in EM/F1, as in their official scripts."""
    question = Question(idx=0, question="Where?", answer="United States", aliases=["USA", "America"], hops=2, kind="bridge", source=source)
    assert score_answer(question, "the USA") == {"em": 1.0, "f1": 1.0}
    assert score_answer(question, "United States.") == {"em": 1.0, "f1": 1.0}
    assert score_answer(question, "Canada") == {"em": 0.0, "f1": 0.0}
    assert score_answer(question, None) == {"em": 0.0, "f1": 0.0}


def test_scores_by_source():
    hotpot = Question(idx=0, question="q", answer="no way", hops=2, kind="bridge", source="hotpotqa")
    musique = hotpot.model_copy(update={"source": "musique"})
    assert score_answer(hotpot, "no")["f1"] == 0.0  # HotpotQA's yes/no rule
    assert score_answer(musique, "no")["f1"] == pytest.approx(2 / 3)  # MuSiQue's script has none
