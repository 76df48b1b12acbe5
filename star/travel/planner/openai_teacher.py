"""A teacher behind any OpenAI-compatible chat endpoint with tool calling.

DeepSeek's API, `vllm serve` and `transformers serve` all work. The episode
is sent as the API expects it: stored assistant turns with a `<tool_call>`
become assistant messages with structured `tool_calls`, and the tool results
after them become `tool` messages with the matching ids. The reply, whether
its tool call is structured or written as `<tool_call>` text, is turned back
into the agent's own format before it reaches the environment, so the
trajectories read exactly as the student will write them.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessage

from star.env.parse import parse_action
from star.env.teacher import answer_text, tool_call_text
from star.llm_client import BACKOFF, error_kind, make_client, retrying, scrub, transient
from star.service import ServiceError
from star.travel.env import TravelEnv
from star.travel.specs import OpenAITeacherParams
from star.travel.world.query import Query

_TOOL_CALL_BLOCK = re.compile(r"<tool_call>.*?(?:</tool_call>|$)", re.S)
_THINK_BLOCK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)
_ANSWER_BLOCK = re.compile(r"<answer>.*?(?:</answer>|$)", re.S)
# Any of the agent's tags left inside a thought would change how the turn parses.
_TAG = re.compile(r"</?(?:think|tool_call|tool_response|answer)>")


class TeacherUnavailable(ServiceError):
    """The teacher server could not be reached or kept failing after retries."""


class TeacherRequestError(ServiceError):
    """The teacher server rejected a request (4xx other than 429); retrying would not help."""


def to_api_messages(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our stored episode as chat messages with structured tool calls and tool ids.

    Real servers (OpenAI, DeepSeek, vLLM) reject a `tool` message that does not
    answer a `tool_calls` entry of the assistant message before it.
    """
    messages: list[dict[str, Any]] = []
    pending: list[str] = []  # ids of calls whose results are still to come, in order
    n_calls = 0
    for message in history:
        role = message["role"]
        content = message.get("content") or ""
        if role == "assistant":
            action = parse_action(content)
            pending = []
            if action.answer is not None or action.error is not None or not action.tool_calls:
                messages.append({"role": "assistant", "content": content})
                continue
            tool_calls = []
            for call in action.tool_calls:
                call_id = f"call_{n_calls}"
                n_calls += 1
                pending.append(call_id)
                arguments = json.dumps(call.arguments, ensure_ascii=False)
                tool_calls.append({"id": call_id, "type": "function", "function": {"name": call.name, "arguments": arguments}})
            text = _TOOL_CALL_BLOCK.sub("", content).strip()
            messages.append({"role": "assistant", "content": text, "tool_calls": tool_calls})
        elif role == "tool":
            if pending:
                messages.append({"role": "tool", "tool_call_id": pending.pop(0), "content": content})
            else:  # a result with no call to answer: keep its text rather than send what servers reject
                messages.append({"role": "user", "content": content})
        else:
            messages.append({"role": role, "content": content})
    return messages


def _join(*parts: str) -> str:
    return _TAG.sub("", "\n".join(p.strip() for p in parts if p.strip())).strip()


def _arguments(raw: str | None) -> Any:
    try:
        return json.loads(raw or "{}")
    except json.JSONDecodeError:
        return raw  # not JSON: the environment reports the call as invalid


def reply_text(message: ChatCompletionMessage) -> str:
    """The reply as one assistant turn in the agent's format.

    One tool call per turn, as the agent format has it: a reply with several
    keeps the first. A reply without a tool call is the final answer.
    """
    content = message.content or ""
    extra = message.model_extra or {}
    # Where servers put a separated <think> block: vLLM, transformers serve, DeepSeek's reasoner.
    reasoning = extra.get("reasoning_content") or extra.get("reasoning") or ""
    think = "\n".join(_THINK_BLOCK.findall(content))
    rest = _THINK_BLOCK.sub("", content)
    calls = [(c.function.name, _arguments(c.function.arguments)) for c in message.tool_calls or [] if hasattr(c, "function")]
    # Tags inside the thought are not acted on.
    action = parse_action(rest)
    if not calls and action.answer is None:
        if action.error is not None:
            # A broken <tool_call>: the environment says what is wrong.
            return f"<think>{_join(reasoning, think)}</think>\n{rest.strip()}"
        calls = [(c.name, c.arguments) for c in action.tool_calls]
    if calls:
        name, arguments = calls[0]
        return tool_call_text(_join(reasoning, think, _TOOL_CALL_BLOCK.sub("", rest)), name, arguments)
    if action.answer is not None:
        return answer_text(_join(reasoning, think, _ANSWER_BLOCK.sub("", rest)), action.answer)
    return answer_text(_join(reasoning, think), rest.strip())


class OpenAITeacher:
    """Plays episodes by asking an OpenAI-compatible chat endpoint, one request per turn."""

    def __init__(self, params: OpenAITeacherParams, backoff: float = BACKOFF):
        self.params = params
        self.name = f"openai:{params.model}"
        self.backoff = backoff
        self.client = make_client(params.base_url, params.api_key_env, params.timeout)

    def episode(self, env: TravelEnv, query: Query, rng: random.Random) -> None:
        tools = env.tool_schemas()
        while not env.done:
            message = self.complete(to_api_messages(env.history), tools, seed=rng.getrandbits(31))
            env.step(reply_text(message))

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int) -> ChatCompletionMessage:
        """One chat completion, retried on transient failures: after the delay a
        Retry-After asks for (at most the timeout), else with exponential backoff."""
        base_url = self.params.base_url
        retries = self.params.retries
        attempts = retrying(f"teacher server {base_url}", retries, self.params.timeout, self.backoff)
        try:
            for attempt in attempts:
                with attempt:
                    # A new seed on each retry: a server error caused by one sampled
                    # reply (a tool call the server cannot parse) is not repeated.
                    n = attempt.retry_state.attempt_number
                    response = self.client.chat.completions.create(
                        model=self.params.model,
                        messages=messages,  # type: ignore[arg-type]
                        tools=tools,  # type: ignore[arg-type]
                        temperature=self.params.temperature,
                        max_tokens=self.params.max_tokens,
                        seed=(seed + n - 1) % 2**31,
                    )
        except openai.APIStatusError as exc:
            if transient(exc):
                raise TeacherUnavailable(f"teacher server {base_url} failed after {retries + 1} attempt(s): {error_kind(exc)}") from None
            # The body helps with a 400 (say, a prompt too long); auth errors may echo part of the key.
            detail = "" if exc.status_code in (401, 403) else f": {scrub(_error_body(exc), self.params.api_key_env)}"
            raise TeacherRequestError(f"teacher server {base_url} rejected the request (HTTP {exc.status_code}){detail}") from None
        except openai.APIConnectionError as exc:
            raise TeacherUnavailable(f"teacher server {base_url} unreachable after {retries + 1} attempt(s): {error_kind(exc)}") from None
        except json.JSONDecodeError:
            raise TeacherUnavailable(f"teacher server {base_url} sent a reply that is not JSON") from None
        if not response.choices:
            raise TeacherUnavailable(f"teacher server {base_url} returned no choices")
        return response.choices[0].message


def _error_body(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        body = body.get("message") or body.get("detail") or body.get("error") or body
    text = body if isinstance(body, str) else json.dumps(body, default=str)
    return " ".join(text.split())[:300]
