"""EM/F1 with the official HotpotQA normalisation, on cases worked out by hand."""

import pytest

from star.qa.metrics import exact_match, f1_score, normalize_answer


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
