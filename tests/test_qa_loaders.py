"""Loaders on small files written here in each dataset's published format, its common variants, and broken files."""

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from star.qa.data import Question, passage_id, save_questions
from star.qa.loaders import DatasetError, load_2wiki, load_dataset, load_hotpotqa, load_musique

FIXTURES = Path(__file__).parent / "data" / "qa"

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
    data = load_hotpotqa(path)
    questions, passages = data.questions, data.passages
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
    data = load_2wiki(path)
    questions, passages = data.questions, data.passages
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
    data = load_musique(path)
    questions, passages = data.questions, data.passages
    assert [q.qid for q in questions] == ["2hop__13548_13529", "3hop1__9_8_7"]
    assert data.skipped == {"unanswerable": 1}  # skipped, and counted
    two, three = questions
    assert (two.hops, three.hops, two.kind, three.level) == (2, 3, "bridge", "3hop")
    assert two.plan == ["Blue Moon", "Richard Rodgers"]  # hop order, not paragraph order
    assert three.plan == ["Blue Moon", "Richard Rodgers", "Queens"]
    # "Blue Moon ... Rodgers. " with and without the trailing space is one passage
    assert [p.title for p in passages].count("Blue Moon") == 1
    assert len(passages) == 5
    text = {p.id: p.text for p in passages}
    assert "1902" in text[two.supporting[-1]]


# ---- the fixtures under tests/data/qa, as each dataset publishes its dev file


def _dumps(data):
    return [q.model_dump() for q in data.questions], [p.model_dump() for p in data.passages]


def test_the_published_fixtures_load():
    hotpot = load_dataset("hotpotqa", FIXTURES / "hotpotqa/hotpot_dev_distractor_v1.json")
    wiki2 = load_dataset("2wiki", FIXTURES / "2wiki/dev.json")
    musique = load_dataset("musique", FIXTURES / "musique/musique_full_v1.0_dev.jsonl")
    assert (len(hotpot.questions), len(wiki2.questions), len(musique.questions)) == (8, 6, 5)
    assert musique.skipped == {"unanswerable": 2}
    assert sorted({q.hops for q in musique.questions}) == [2, 3, 4]
    for data in (hotpot, wiki2, musique):
        ids = {p.id for p in data.passages}
        assert all(q.supporting and set(q.supporting) <= ids for q in data.questions)


def _hf_rows(rows):
    """HotpotQA rows in the Hugging Face datasets layout: context and supporting facts as columns."""
    return [
        {
            "id": r["_id"], "question": r["question"], "answer": r["answer"], "type": r["type"], "level": r["level"],
            "supporting_facts": {"title": [t for t, _ in r["supporting_facts"]], "sent_id": [i for _, i in r["supporting_facts"]]},
            "context": {"title": [t for t, _ in r["context"]], "sentences": [s for _, s in r["context"]]},
        }
        for r in rows
    ]


def test_hotpotqa_variants_load_the_same_by_content_not_by_name(tmp_path):
    """JSON Lines (was JSONDecodeError: Extra data), the datasets layout (was ValueError: too many values
    to unpack), its parquet and a gzipped copy: each the same questions and passages as the JSON list."""
    published = FIXTURES / "hotpotqa/hotpot_dev_distractor_v1.json"
    rows = json.loads(published.read_text())
    expected = _dumps(load_hotpotqa(published))
    jsonl = tmp_path / "dev.json"  # JSON Lines under a .json name
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    hub_list = tmp_path / "validation.json"  # the datasets layout as one JSON list
    hub_list.write_text(json.dumps(_hf_rows(rows)))
    parquet = tmp_path / "validation.jsonl"  # parquet under a .jsonl name
    pq.write_table(pa.Table.from_pylist(_hf_rows(rows)), parquet)
    gzipped = tmp_path / "dev.txt"
    gzipped.write_bytes(gzip.compress(published.read_bytes()))
    for path in (jsonl, hub_list, FIXTURES / "hotpotqa/hotpot_qa_distractor_validation.jsonl", parquet, gzipped):
        assert _dumps(load_hotpotqa(path)) == expected, path


def test_musique_as_one_json_list_or_parquet(tmp_path):
    """MuSiQue as a JSON list (was AttributeError: 'list' object has no attribute 'get') and as parquet."""
    published = FIXTURES / "musique/musique_full_v1.0_dev.jsonl"
    rows = [json.loads(line) for line in published.read_text().splitlines()]
    expected = load_musique(published)
    as_list = tmp_path / "musique.json"
    as_list.write_text(json.dumps(rows))
    parquet = tmp_path / "musique.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    for path in (as_list, parquet):
        data = load_musique(path)
        assert _dumps(data) == _dumps(expected) and data.skipped == {"unanswerable": 2}, path


def test_2wiki_in_the_datasets_layout(tmp_path):
    """2Wiki's hub copies: context {title, content}, facts {title, sent_id}, evidences {fact, relation, entity}."""
    published = FIXTURES / "2wiki/dev.json"
    rows = json.loads(published.read_text())
    hub = [
        {
            **{k: r[k] for k in ("_id", "type", "question", "answer")},
            "context": {"title": [t for t, _ in r["context"]], "content": [s for _, s in r["context"]]},
            "supporting_facts": {"title": [t for t, _ in r["supporting_facts"]], "sent_id": [i for _, i in r["supporting_facts"]]},
            "evidences": {"fact": [e[0] for e in r["evidences"]], "relation": [e[1] for e in r["evidences"]], "entity": [e[2] for e in r["evidences"]]},
        }
        for r in rows
    ]
    path = tmp_path / "validation.parquet"
    pq.write_table(pa.Table.from_pylist(hub), path)
    expected = [q.model_dump() | {"aliases": []} for q in load_2wiki(published).questions]  # no id_aliases.json beside it
    assert [q.model_dump() | {"aliases": []} for q in load_2wiki(path).questions] == expected


def test_2wiki_aliases_from_the_release_file_or_the_rows(tmp_path):
    by_qid = {q.qid: q for q in load_2wiki(FIXTURES / "2wiki/dev.json").questions}
    # id_aliases.json lines {Q_id, aliases, demonyms}, looked up by answer_id; the answer itself is not repeated
    assert by_qid["af8c6722088b11ebbd6fac1f6bf848b6"].aliases == ["United States", "USA", "the US", "America", "American"]
    assert by_qid["028eaef60bdb11eba7f7acde48001122"].aliases == ["Mask of Fu Manchu", "The Mask of Fu Manchu"]
    assert by_qid["0b9c80c00bdb11eba7f7acde48001122"].aliases == []
    rows = json.loads((FIXTURES / "2wiki/dev.json").read_text())
    rows[0]["answer_aliases"] = ["M. Braunek"]  # inlined by some redistributions
    (tmp_path / "dev.json").write_text(json.dumps(rows))
    (tmp_path / "id_aliases.json").write_text(json.dumps({"Q274254": ["Malgorzata Braunek"]}))  # one {Q_id: [aliases]} object
    assert load_2wiki(tmp_path / "dev.json").questions[0].aliases == ["Malgorzata Braunek", "M. Braunek"]


def test_questions_without_aliases_save_as_before(tmp_path):
    """Synthetic data files stay byte-identical: no aliases key unless there are aliases."""
    plain = Question(idx=0, question="q", answer="a", hops=2, kind="bridge", source="synthetic")
    assert "aliases" not in plain.model_dump() and "aliases" not in plain.model_dump_json()
    aliased = plain.model_copy(update={"aliases": ["b"], "source": "musique"})
    save_questions(tmp_path / "q.jsonl", [plain, aliased])
    lines = (tmp_path / "q.jsonl").read_text().splitlines()
    assert "aliases" not in lines[0] and json.loads(lines[1])["aliases"] == ["b"]
    assert Question.model_validate_json(lines[1]).golds == ["a", "b"]


def _hotpot_with(change):
    rows = json.loads((FIXTURES / "hotpotqa/hotpot_dev_distractor_v1.json").read_text())
    change(rows)
    return json.dumps(rows)


def _musique_lines(change):
    rows = [json.loads(line) for line in (FIXTURES / "musique/musique_full_v1.0_dev.jsonl").read_text().splitlines()]
    change(rows)
    return "".join(json.dumps(r) + "\n" for r in rows)


BROKEN = [
    ("hotpotqa", _hotpot_with(lambda rows: rows[1].pop("context")), "row 2: field context: Field required"),
    ("hotpotqa", _hotpot_with(lambda rows: rows[2]["context"].__setitem__(0, ["T", "not a list of sentences"])), "row 3: field context.0.1: Input should be a valid list"),
    ("hotpotqa", _hotpot_with(lambda rows: rows[0].__setitem__("type", "inference")), "row 1: field type: Input should be 'bridge' or 'comparison'"),
    ("hotpotqa", _hotpot_with(lambda rows: rows[0].__setitem__("context", {"title": ["A", "B"], "sentences": [["a"]]})), "row 1: field context: Value error, 2 titles but 1 sentences"),
    ("hotpotqa", _hotpot_with(lambda rows: None)[:-300], "not valid JSON at line"),
    ("hotpotqa", (FIXTURES / "musique/musique_full_v1.0_dev.jsonl").read_text(), "the row looks like musique: set qa.source: musique"),
    ("musique", _musique_lines(lambda rows: None).replace("}\n{", "}\n\n{x", 1), "line 3: not valid JSON"),
    ("musique", _musique_lines(lambda rows: rows[3]["question_decomposition"][1].__setitem__("paragraph_support_idx", 17)),
     "line 4: field question_decomposition: paragraph_support_idx 17 names no paragraph"),
    ("musique", _musique_lines(lambda rows: rows[4]["paragraphs"][0].pop("paragraph_text")), "line 5: field paragraphs.0.paragraph_text: Field required"),
    ("musique", _musique_lines(lambda rows: [r.__setitem__("answerable", False) for r in rows]), "no questions left to use (7 unanswerable skipped)"),
    ("2wiki", "id,question,answer\n1,q,a\n", "neither a JSON list, JSON Lines nor parquet"),
    ("2wiki", "[1, 2]", "row 1: expected a question object, got int 1"),
    ("2wiki", "", "an empty file"),
]


@pytest.mark.parametrize(("source", "content", "message"), BROKEN, ids=[f"{s}-{i}" for i, (s, _, _) in enumerate(BROKEN)])
def test_a_broken_file_is_one_line_naming_the_file_the_row_and_the_field(tmp_path, source, content, message):
    path = tmp_path / "data.json"
    path.write_text(content)
    with pytest.raises(DatasetError) as error:
        load_dataset(source, path)
    text = str(error.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text, text


def test_a_missing_or_unreadable_file_is_one_line(tmp_path):
    with pytest.raises(DatasetError, match=r"nope.json: no such file$"):
        load_dataset("hotpotqa", tmp_path / "nope.json")
    with pytest.raises(DatasetError, match="a directory, not a dataset file"):
        load_dataset("musique", tmp_path)
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(DatasetError, match="a parquet file that cannot be read"):
        load_dataset("2wiki", tmp_path / "broken.parquet")
    assert issubclass(DatasetError, ValueError)  # what the stages report as `error: ...`
