"""Multi-hop questions over a KnowledgeWorld, with answers and supporting passages.

A question is a chain of relations read off one passage per hop:

    bridge      "In which city was the founder of Kastin born?"
                (Kastin -> its founder -> the founder's birthplace: 2 hops)
    comparison  "Who was born earlier, Velora or the founder of Kastin?"
                (each side resolved to an entity, then their years compared:
                 one hop per passage read, here Velora, Kastin, the founder)

`hops` is the number of passages the answer needs, and `plan` lists the
search queries (entity names) that reach them in order. Entities along a
question are distinct, so its supporting passages are exactly `hops`.
"""

from __future__ import annotations

import random

from star.qa.data import Question
from star.qa.specs import SPLITS, QuestionSpec
from star.qa.world import RELATIONS, YEARS, KnowledgeWorld

# noun phrase for "relation of x", used inside a longer question
PHRASE = {
    "born_in": "the birthplace of {x}",
    "works_for": "the employer of {x}",
    "founded_by": "the founder of {x}",
    "based_in": "the home city of {x}",
    "country": "the country of {x}",
    "capital": "the capital of {x}",
}
# the question when a relation is the last hop
ASK = {
    "born_in": "In which city was {x} born?",
    "works_for": "Which company does {x} work for?",
    "founded_by": "Who founded {x}?",
    "based_in": "In which city is {x} based?",
    "country": "In which country is {x}?",
    "capital": "What is the capital of {x}?",
}
ASK_YEAR = {"person": "In which year was {x} born?", "org": "In which year was {x} founded?", "city": "In which year was {x} founded?"}
COMPARE = {
    "person": "Who was born {when}, {a} or {b}?",
    "org": "Which company was founded {when}, {a} or {b}?",
    "city": "Which city was founded {when}, {a} or {b}?",
}
MAX_TRIES = 1000  # per question, before concluding the world is too small


def _walk(world: KnowledgeWorld, rng: random.Random, length: int, start_kinds: list[str]) -> list[tuple[str, str]] | None:
    """A chain [(entity, relation to the next), ..., (last entity, "")] of distinct entities."""
    kind = rng.choice(start_kinds)
    name = rng.choice(world.names_by_kind[kind])
    chain: list[tuple[str, str]] = []
    seen = {name}
    for _ in range(length):
        relation = rng.choice(sorted(r for r, (subject, _, _) in RELATIONS.items() if subject == world.kind(name)))
        chain.append((name, relation))
        name = world.follow(name, relation)
        if name in seen:
            return None
        seen.add(name)
    chain.append((name, ""))
    return chain


def _phrase(chain: list[tuple[str, str]]) -> str:
    text = chain[0][0]
    for _, relation in chain[:-1]:
        text = PHRASE[relation].format(x=text)
    return text


def _bridge(world: KnowledgeWorld, rng: random.Random, hops: int) -> tuple[str, str, list[str], str] | None:
    if rng.random() < 0.5:
        # "the r_h of ... of e0": the answer is named in the last passage read
        chain = _walk(world, rng, hops, ["person", "org", "city", "country"])
        if chain is None:
            return None
        text = ASK[chain[-2][1]].format(x=_phrase(chain[:-1]))
        return text, chain[-1][0], [e for e, _ in chain[:-1]], text
    # "In which year was <chain> born/founded?": the last passage gives the year
    chain = _walk(world, rng, hops - 1, ["person", "org", "city", "country"])
    if chain is None or world.kind(chain[-1][0]) not in YEARS:
        return None
    text = ASK_YEAR[world.kind(chain[-1][0])].format(x=_phrase(chain))
    return text, str(world.year(chain[-1][0])), [e for e, _ in chain], text


def _comparison(world: KnowledgeWorld, rng: random.Random, hops: int) -> tuple[str, str, list[str], str] | None:
    a_len = rng.randint(0, hops - 2)
    a = _walk(world, rng, a_len, ["person", "org", "city", "country"] if a_len else list(YEARS))
    if a is None or world.kind(a[-1][0]) not in YEARS:
        return None
    kind = world.kind(a[-1][0])
    b_len = hops - 2 - a_len
    b = _walk(world, rng, b_len, ["person", "org", "city", "country"] if b_len else [kind])
    if b is None or world.kind(b[-1][0]) != kind:
        return None
    names = [e for e, _ in a] + [e for e, _ in b]
    ya, yb = world.year(a[-1][0]), world.year(b[-1][0])
    if len(set(names)) != len(names) or ya == yb:
        return None
    when = rng.choice(["earlier", "later"])
    pa, pb = _phrase(a), _phrase(b)
    text = COMPARE[kind].format(when=when, a=pa, b=pb)
    a_wins = (ya < yb) == (when == "earlier")
    answer = a[-1][0] if a_wins else b[-1][0]
    # "A or B" and "B or A", earlier or later, ask about the same fact.
    key = f"{kind}|{'|'.join(sorted((pa, pb)))}"
    return text, answer, names, key


def synthesize_questions(world: KnowledgeWorld, spec: QuestionSpec) -> dict[str, list[Question]]:
    """Questions per split, unique across splits; same world and spec, same questions."""
    rng = random.Random(spec.seed)
    hop_keys = sorted(spec.hops)
    kind_keys = sorted(spec.kinds)
    seen: set[str] = set()
    out: dict[str, list[Question]] = {}
    idx = 0
    for split in SPLITS:
        questions = []
        for _ in range(spec.sizes.get(split, 0)):
            hops = rng.choices(hop_keys, weights=[spec.hops[h] for h in hop_keys])[0]
            kind = rng.choices(kind_keys, weights=[spec.kinds[k] for k in kind_keys])[0]
            make = _bridge if kind == "bridge" else _comparison
            for _ in range(MAX_TRIES):
                made = make(world, rng, hops)
                if made is not None and made[3] not in seen:
                    break
            else:
                raise ValueError(f"the world is too small for more unique {hops}-hop {kind} questions ({idx} made)")
            text, answer, names, key = made
            seen.add(key)
            questions.append(
                Question(
                    idx=idx, question=text, answer=answer, hops=hops, kind=kind, source="synthetic",
                    supporting=[world.passage(n).id for n in names], plan=names,
                )
            )
            idx += 1
        out[split] = questions
    return out
