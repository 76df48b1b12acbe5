"""Back-translation of synthesized query texts by any OpenAI-compatible model.

The template text is sent with a request to reword it; the reply is kept only
if every fact the agent must copy (cities or state, dates, budget, people,
cuisines) is still written exactly, else the template text stays. A server
that cannot be reached is an error, not a silent fallback.
"""

from __future__ import annotations

import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from star.service import ServiceError, client_timeout, wait_retry_after
from star.travel.query import Query
from star.travel.specs import ParaphraseSpec

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
    import openai

    client = openai.OpenAI(base_url=spec.base_url, api_key=os.environ.get(spec.api_key_env) or "EMPTY", timeout=client_timeout(spec.timeout), max_retries=0)

    @retry(
        retry=retry_if_exception_type((openai.APIConnectionError, openai.APITimeoutError, openai.InternalServerError, openai.RateLimitError)),
        stop=stop_after_attempt(spec.retries + 1),
        wait=wait_retry_after(wait_exponential(multiplier=0.5, max=10), cap=spec.timeout, name=f"paraphrase server {spec.base_url}"),
        reraise=True,
    )
    def reword(text: str) -> str:
        reply = client.chat.completions.create(
            model=spec.model, temperature=spec.temperature, messages=[{"role": "user", "content": PROMPT.format(text=text)}]
        )
        return (reply.choices[0].message.content or "").strip()

    def one(query: Query) -> tuple[Query, str]:
        try:
            text = reword(query.query)
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise ParaphraseUnavailable(f"paraphrase server {spec.base_url} unreachable: {type(exc).__name__}") from None
        except openai.APIError as exc:
            return query, f"error_{type(exc).__name__}"
        if text and all(fact in text for fact in facts(query)):
            return query.model_copy(update={"query": text}), "paraphrased"
        return query, "rejected"

    with ThreadPoolExecutor(spec.concurrency) as pool:
        results = list(pool.map(one, queries))
    return [q for q, _ in results], Counter(kind for _, kind in results)
