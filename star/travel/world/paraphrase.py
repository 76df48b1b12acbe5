"""Back-translation of synthesized query texts by any OpenAI-compatible model.

The template text is sent with a request to reword it; the reply is kept only
if every fact the agent must copy (cities or state, dates, budget, people,
cuisines) is still written exactly, else the template text stays. A server
that cannot be reached, or keeps failing, is an error, not a silent fallback.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from star.llm_client import error_kind, make_client, retrying, transient
from star.service import ServiceError
from star.travel.specs import ParaphraseSpec
from star.travel.world.query import Query

PROMPT = (
    "Rewrite this travel request in different words, as a traveller would write it. "
    "Keep every name, date and number exactly as written. Reply with the request only.\n\n{text}"
)


class ParaphraseUnavailable(ServiceError):
    pass


def facts(query: Query) -> list[str]:
    """Strings a faithful rewording must keep verbatim."""
    out = [query.org, query.dest, query.date[0], query.date[-1], str(query.budget), str(query.people_number)]
    return out + list(query.local_constraint.get("cuisine") or [])


def paraphrase(queries: list[Query], spec: ParaphraseSpec) -> tuple[list[Query], Counter]:
    """The queries, each reworded where the reply keeps its facts, and how many were reworded, rejected or refused.

    A server still unreachable, rate limited or failing (5xx) after `spec.retries`
    retries stops the run; one that refuses a single request (another 4xx) only
    leaves that query as composed.
    """
    import openai

    client = make_client(spec.base_url, spec.api_key_env, spec.timeout)
    name = f"paraphrase server {spec.base_url}"

    def reword(text: str) -> str:
        reply = client.chat.completions.create(
            model=spec.model, temperature=spec.temperature, messages=[{"role": "user", "content": PROMPT.format(text=text)}]
        )
        return (reply.choices[0].message.content or "").strip()

    def one(query: Query) -> tuple[Query, str]:
        try:
            text = retrying(name, spec.retries, spec.timeout)(reword, query.query)
        except openai.APIConnectionError as exc:  # timeouts included
            raise ParaphraseUnavailable(f"{name} unreachable: {type(exc).__name__}") from None
        except openai.APIError as exc:
            if transient(exc):
                raise ParaphraseUnavailable(f"{name} failed after {spec.retries + 1} attempt(s): {error_kind(exc)}") from None
            return query, f"error_{type(exc).__name__}"
        if text and all(fact in text for fact in facts(query)):
            return query.model_copy(update={"query": text}), "paraphrased"
        return query, "rejected"

    with client, ThreadPoolExecutor(spec.concurrency) as pool:
        results = list(pool.map(one, queries))
    return [q for q, _ in results], Counter(kind for _, kind in results)
