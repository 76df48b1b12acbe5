"""BM25 search over the synthetic world, and the Search tool."""

import pytest

from star.qa.data import Passage
from star.qa.search import QATools, SearchIndex, tokenize
from star.qa.specs import QAWorldSpec, QuestionSpec
from star.qa.synthesize import synthesize_questions
from star.qa.world import build_world


@pytest.fixture(scope="module")
def world():
    return build_world(QAWorldSpec(seed=0))


@pytest.fixture(scope="module")
def index(world):
    return SearchIndex.build(world.passages())


def test_a_name_finds_its_own_passage_first(world, index):
    for passage in world.passages():
        assert index.search(passage.title, 3)[0] == passage


def test_search_reaches_every_supporting_passage(world, index):
    questions = synthesize_questions(world, QuestionSpec(sizes={"train": 200}))["train"]
    for q in questions:
        for name, pid in zip(q.plan, q.supporting):
            assert pid in [p.id for p in index.search(name, 3)]


def test_ranking_is_by_score_then_corpus_order():
    passages = [Passage(id=str(i), title=f"T{i}", text=text) for i, text in enumerate(
        ["alpha beta", "gamma delta", "alpha beta", "alpha beta", "alpha alpha beta", "gamma"]
    )]
    index = SearchIndex.build(passages)
    assert [p.id for p in index.search("alpha", 3)] == ["4", "0", "2"]  # ties (0, 2, 3) in corpus order
    assert [p.id for p in index.search("alpha", 10)] == ["4", "0", "2", "3"]  # only matching passages
    assert index.search("zeta", 3) == [] and index.search("the of", 3) == []  # unknown words, stopwords
    assert tokenize("The capital of Somul, founded in 1844.") == ["capital", "somul", "founded", "1844"]


def test_saved_index_answers_the_same_and_saves_the_same_bytes(world, index, tmp_path):
    index.save(tmp_path / "a")
    SearchIndex.build(world.passages()).save(tmp_path / "b")
    loaded = SearchIndex.load(tmp_path / "a")
    queries = [p.title for p in world.passages()[:50]] + ["born 1954", "company founded", "city country capital"]
    for q in queries:
        assert loaded.search(q, 5) == index.search(q, 5)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert len(files) >= 5
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_search_tool(world, index):
    (tool,) = QATools(index, top_k=3).as_tools()
    assert tool.schema()["function"]["name"] == "Search"
    assert tool.schema()["function"]["parameters"]["required"] == ["query"]
    country = world.countries[0]
    result = tool.execute({"query": country.name})
    assert result.ok and result.kind == "ok"
    lines = result.content.splitlines()
    assert len(lines) == 3 and lines[0] == f"{country.name}: {country.name} is a country. Its capital is {country.capital}."
    for blank in ("", "   "):
        assert tool.execute({"query": blank}).kind == "invalid"
    assert tool.execute({"query": 3}).kind == "invalid"
    assert tool.execute({"q": "x"}).kind == "invalid"
    nothing = tool.execute({"query": "Atlantis"})
    assert nothing.ok and nothing.kind == "empty"


def test_observations_are_short(world, index):
    (tool,) = QATools(index, top_k=3).as_tools()
    queries = [p.title for p in world.passages()] + ["born in 1954", "company founded by"]
    longest = max(len(tool.execute({"query": q}).content.split()) for q in queries)
    assert longest <= 60  # whitespace words; a 150-token budget with room to spare


def test_long_passages_are_cut():
    index = SearchIndex.build([Passage(id="a", title="Long", text=" ".join(["word"] * 100))])
    (tool,) = QATools(index, top_k=3, max_words=10).as_tools()
    content = tool.execute({"query": "long"}).content
    assert content == "Long: " + " ".join(["word"] * 10) + " ..."
