"""The llm formatter: an itinerary turned into an official TravelPlanner plan by
any OpenAI-compatible endpoint with structured output.

The model is given the terse layout described in `star.travel.plans.format` and asked
for the plan JSON. It never raises: a failure becomes an undelivered plan with
the reason. `format_itinerary` (in `star.travel.plans.format`) then checks the plan
against the official format rules.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from star.llm_client import BACKOFF, make_client, retrying, scrub
from star.travel.plans.plan import Day, Plan
from star.travel.world.query import Query


class PlanDay(BaseModel):
    model_config = ConfigDict(extra="forbid")

    days: int
    current_city: str
    transportation: str
    breakfast: str
    attraction: str
    lunch: str
    dinner: str
    accommodation: str


class PlanReply(BaseModel):
    """The structured reply the llm formatter asks for."""

    model_config = ConfigDict(extra="forbid")

    plan: list[PlanDay]


LLM_INSTRUCTIONS = """\
Convert the travel itinerary into the official TravelPlanner plan JSON.
Return {"plan": [one object per day]} with the keys days, current_city,
transportation, breakfast, attraction, lunch, dinner, accommodation.
- current_city: "City" on a stay day, "from A to B" on a travel day.
- transportation: "Flight Number: F0012, from A to B", "Self-driving, from A to B",
  "Taxi, from A to B", or "-".
- breakfast, lunch, dinner, accommodation: "Name, City" or "-". An entry without a
  city is in the day's current city (the destination on a travel day).
- attraction: every attraction as "Name, City;" joined without spaces,
  e.g. "Old Mill, Brint;Harbor Park, Brint;", or "-".
Copy names exactly; do not invent or drop anything. Use "-" for anything missing.
"""


def _llm_messages(text: str, query: Query | None) -> list[dict[str, str]]:
    user = f"Itinerary:\n{text}"
    if query is not None:
        user = f"Query ({query.days} days): {query.query}\n\n" + user
    return [{"role": "system", "content": LLM_INSTRUCTIONS}, {"role": "user", "content": user}]


def _response_format() -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {"name": "travel_plan", "schema": PlanReply.model_json_schema(), "strict": True},
    }


def format_llm(
    text: str,
    query: Query | None,
    *,
    base_url: str,
    model: str,
    api_key_env: str = "OPENAI_API_KEY",
    timeout: float = 60,
    retries: int = 3,
    backoff: float = BACKOFF,
    idx: int = 0,
) -> Plan:
    """Ask an OpenAI-compatible endpoint for the plan JSON; never raises.

    Besides the transient failures every client retries, an unusable reply
    (not JSON, or not the plan's shape) is tried again too.
    """
    if query is not None and not idx:
        idx = query.idx
    plan = Plan(idx=idx, query=query.query if query else "")
    tries = 0

    def attempt() -> PlanReply:
        nonlocal tries
        tries += 1
        reply = client.chat.completions.create(
            model=model,
            messages=_llm_messages(str(text), query),  # type: ignore[arg-type]
            response_format=_response_format(),  # type: ignore[arg-type]
            temperature=0,
        )
        content = reply.choices[0].message.content if reply.choices else None
        if not content:
            raise ValueError("empty reply")
        return PlanReply.model_validate_json(content)

    try:
        with make_client(base_url, api_key_env, timeout) as client:
            reply = retrying(f"llm formatter server {base_url}", retries, timeout, backoff, also=(ValueError,))(attempt)
    except Exception as exc:
        plan.error = scrub(f"llm formatter failed after {tries} attempts: {type(exc).__name__}: {exc}", api_key_env)
        return plan
    if not reply.plan:
        plan.error = "llm formatter returned no day"
        return plan
    plan.days = [
        Day(**{k: (v if isinstance(v, int) or v.strip() else "-") for k, v in d.model_dump().items()})
        for d in reply.plan
    ]
    return plan
