"""Loaders on small files written here in each dataset's published format."""

import json

from star.qa.data import passage_id
from star.qa.loaders import load_2wiki, load_hotpotqa, load_musique

ED_WOOD = ["Edward Davis Wood Jr. (October 10, 1924 – December 10, 1978) was an American filmmaker.", " He directed Glen or Glenda."]

HOTPOT = [
    {
        "_id": "5a8b57f25542995d1e6f1371",
        "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
        "answer": "yes",
        "type": "comparison",
        "level": "hard",
        "supporting_facts": [["Scott Derrickson", 0], ["Ed Wood", 0], ["Ed Wood", 1]],
        "context": [
            ["Ed Wood (film)", ["Ed Wood is a 1994 American film directed by Tim Burton."]],
            ["Scott Derrickson", ["Scott Derrickson (born July 16, 1966) is an American director.", " He lives in Los Angeles."]],
            ["Ed Wood", ED_WOOD],
        ],
    },
    {
        "_id": "5a8c7595554299585d9e36b6",
        "question": "Which film by the director of Glen or Glenda came out in 1959?",
        "answer": "Plan 9 from Outer Space",
        "type": "bridge",
        "level": "medium",
        "supporting_facts": [["Ed Wood", 1], ["Plan 9 from Outer Space", 0]],
        "context": [
            ["Ed Wood", ED_WOOD],  # the same paragraph as in the first question
            ["Plan 9 from Outer Space", ["Plan 9 from Outer Space is a 1959 film by Ed Wood."]],
        ],
    },
]

WIKI2 = [
    {
        "_id": "8813f87c0bdd11eba7f7acde48001122",
        "type": "bridge_comparison",
        "question": "Which film has the director born later, Alpha Road or Beta Hill?",
        "answer": "Beta Hill",
        "supporting_facts": [["Alpha Road", 0], ["Ann Lee", 0], ["Beta Hill", 0], ["Bo Chan", 0]],
        "evidences": [["Alpha Road", "director", "Ann Lee"], ["Beta Hill", "director", "Bo Chan"], ["Ann Lee", "date of birth", "1940"], ["Bo Chan", "date of birth", "1962"]],
        "context": [
            ["Bo Chan", ["Bo Chan (born 1962) is a director."]],
            ["Alpha Road", ["Alpha Road is a film directed by Ann Lee."]],
            ["Ann Lee", ["Ann Lee (born 1940) is a director."]],
            ["Beta Hill", ["Beta Hill is a film directed by Bo Chan."]],
            ["Gamma", ["Gamma is a distractor."]],
        ],
    },
    {
        "_id": "cfb1a9d2085d11ebbd48ac1f6bf848b6",
        "type": "inference",
        "question": "Who is the paternal grandfather of Ann Lee?",
        "answer": "Carl Lee",
        "supporting_facts": [["Ann Lee", 1], ["Dan Lee", 0]],
        "evidences": [["Ann Lee", "father", "Dan Lee"], ["Dan Lee", "father", "Carl Lee"]],
        "context": [
            ["Ann Lee", ["Ann Lee (born 1940) is a director.", " Her father was Dan Lee."]],
            ["Dan Lee", ["Dan Lee was the son of Carl Lee."]],
        ],
    },
    {
        "_id": "a1",
        "type": "comparison",
        "question": "Who was born first, Ann Lee or Bo Chan?",
        "answer": "Ann Lee",
        "supporting_facts": [["Ann Lee", 0], ["Bo Chan", 0]],
        "evidences": [],
        "context": [["Ann Lee", ["Ann Lee (born 1940) is a director."]], ["Bo Chan", ["Bo Chan (born 1962) is a director."]]],
    },
]

MUSIQUE = [
    {
        "id": "2hop__13548_13529",
        "question": "When was the person who wrote Blue Moon born?",
        "answer": "1902",
        "answer_aliases": [],
        "answerable": True,
        "paragraphs": [
            {"idx": 0, "title": "Richard Rodgers", "paragraph_text": "Richard Rodgers was born in 1902.", "is_supporting": True},
            {"idx": 1, "title": "Moon", "paragraph_text": "The Moon is a satellite.", "is_supporting": False},
            {"idx": 2, "title": "Blue Moon", "paragraph_text": "Blue Moon was written by Richard Rodgers. ", "is_supporting": True},
        ],
        "question_decomposition": [
            {"id": 13548, "question": "Who wrote Blue Moon?", "answer": "Richard Rodgers", "paragraph_support_idx": 2},
            {"id": 13529, "question": "When was #1 born?", "answer": "1902", "paragraph_support_idx": 0},
        ],
    },
    {
        "id": "2hop__1_2",
        "question": "Unanswerable in the full version?",
        "answer": "x",
        "answerable": False,
        "paragraphs": [{"idx": 0, "title": "T", "paragraph_text": "t", "is_supporting": False}],
        "question_decomposition": [{"id": 1, "question": "q", "answer": "a", "paragraph_support_idx": None}] * 2,
    },
    {
        "id": "3hop1__9_8_7",
        "question": "What country is the birthplace of the writer of Blue Moon in?",
        "answer": "United States",
        "answerable": True,
        "paragraphs": [
            {"idx": 0, "title": "Blue Moon", "paragraph_text": "Blue Moon was written by Richard Rodgers.", "is_supporting": True},
            {"idx": 1, "title": "Queens", "paragraph_text": "Queens is in the United States.", "is_supporting": True},
            {"idx": 2, "title": "Richard Rodgers", "paragraph_text": "Richard Rodgers was born in Queens.", "is_supporting": True},
        ],
        "question_decomposition": [
            {"id": 9, "question": "Who wrote Blue Moon?", "answer": "Richard Rodgers", "paragraph_support_idx": 0},
            {"id": 8, "question": "Where was #1 born?", "answer": "Queens", "paragraph_support_idx": 2},
            {"id": 7, "question": "#2 is in what country?", "answer": "United States", "paragraph_support_idx": 1},
        ],
    },
]


def test_hotpotqa(tmp_path):
    path = tmp_path / "hotpot_dev_distractor_v1.json"
    path.write_text(json.dumps(HOTPOT))
    questions, passages = load_hotpotqa(path)
    # 3 + 2 paragraphs, the shared Ed Wood paragraph once
    assert [p.title for p in passages] == ["Ed Wood (film)", "Scott Derrickson", "Ed Wood", "Plan 9 from Outer Space"]
    ed_wood = passages[2]
    assert ed_wood.text == "Edward Davis Wood Jr. (October 10, 1924 – December 10, 1978) was an American filmmaker. He directed Glen or Glenda."
    assert ed_wood.id == passage_id("Ed Wood", ed_wood.text)
    first, second = questions
    assert (first.idx, first.qid, first.answer, first.kind, first.hops, first.level, first.source) == (
        0, "5a8b57f25542995d1e6f1371", "yes", "comparison", 2, "2hop", "hotpotqa",
    )
    assert first.supporting == [passages[1].id, ed_wood.id]
    assert first.plan == ["Scott Derrickson", "Ed Wood"]
    assert second.kind == "bridge" and second.supporting == [ed_wood.id, passages[3].id]


def test_2wiki(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(WIKI2))
    questions, passages = load_2wiki(path)
    assert [(q.kind, q.hops) for q in questions] == [("comparison", 4), ("bridge", 2), ("comparison", 2)]
    by_title = {}
    for p in passages:
        by_title.setdefault(p.title, []).append(p)
    # Ann Lee has two different paragraphs (one or two sentences): both kept
    assert len(by_title["Ann Lee"]) == 2 and len(passages) == 7
    bridge_comparison = questions[0]
    assert bridge_comparison.plan == ["Alpha Road", "Ann Lee", "Beta Hill", "Bo Chan"]
    assert [next(p.title for p in passages if p.id == i) for i in bridge_comparison.supporting] == bridge_comparison.plan
    assert questions[1].supporting[0] == by_title["Ann Lee"][1].id  # the paragraph of that question


def test_musique(tmp_path):
    path = tmp_path / "musique_ans_v1.0_dev.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in MUSIQUE))
    questions, passages = load_musique(path)
    assert [q.qid for q in questions] == ["2hop__13548_13529", "3hop1__9_8_7"]  # unanswerable skipped
    two, three = questions
    assert (two.hops, three.hops, two.kind, three.level) == (2, 3, "bridge", "3hop")
    assert two.plan == ["Blue Moon", "Richard Rodgers"]  # hop order, not paragraph order
    assert three.plan == ["Blue Moon", "Richard Rodgers", "Queens"]
    # "Blue Moon ... Rodgers. " with and without the trailing space is one passage
    assert [p.title for p in passages].count("Blue Moon") == 1
    assert len(passages) == 5
    text = {p.id: p.text for p in passages}
    assert "1902" in text[two.supporting[-1]]
