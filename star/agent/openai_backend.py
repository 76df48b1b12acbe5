"""OpenAIBackend: chat completions on any OpenAI-compatible server (`vllm serve` included).

It is message based, so it returns text; the engine tokenises it and cannot
know the server's own tokens or log-probabilities.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from star.agent.backend import BackendError, Generation, Prompt
from star.llm_client import make_client, retrying, scrub, transient


class OpenAIBackend:
    """Chat completions on an OpenAI-compatible server, one request per episode.

    Message based: the server renders and tokenises the conversation itself,
    so the trajectory holds our tokenisation of the returned text (all mask 1)
    and no log-probabilities. The tools go with each request with
    `tool_choice="none"`, so the server writes them into the prompt and leaves
    `<tool_call>` text in the content for the environment to parse. Tool
    results go as the env records them, `tool` messages without a
    `tool_call_id`: vLLM's server takes them, OpenAI's own API does not.
    """

    token_level = False

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 1.0,
        max_tokens: int | None = None,
        timeout: float = 60.0,
        retries: int = 2,
        concurrency: int = 16,
        top_p: float = 1.0,
    ):
        self.base_url = base_url
        self.model = model
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.retries = retries
        self.timeout = timeout
        self.concurrency = concurrency
        self.api_key_env = api_key_env
        # The key itself is never logged or put in errors.
        self.client = make_client(base_url, api_key_env, timeout)

    def generate(
        self,
        prompts: Sequence[Prompt],
        max_new_tokens: int,
        stop: Sequence[str] = (),
        temperature: float | None = None,
    ) -> list[Generation]:
        if not prompts:
            return []
        temp = self.temperature if temperature is None else temperature
        limit = min(max_new_tokens, self.max_tokens or max_new_tokens)
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts))) as pool:
            return list(pool.map(lambda p: self._one(p, limit, stop, temp), prompts))

    def _one(self, prompt: Prompt, max_tokens: int, stop: Sequence[str], temperature: float) -> Generation:
        import openai

        request: dict[str, Any] = dict(
            model=self.model,
            messages=prompt.messages,
            temperature=temperature,
            top_p=self.top_p,
            max_tokens=max_tokens,
        )
        if stop:
            request["stop"] = list(stop)
        if prompt.tools:
            request.update(tools=prompt.tools, tool_choice="none")
        attempts = retrying(f"server at {self.base_url}", self.retries, self.timeout)
        try:
            response = attempts(self.client.chat.completions.create, **request)
        except (openai.APIConnectionError, openai.APIStatusError) as exc:
            # A server may echo the request's key in its error body.
            if transient(exc):
                raise BackendError(
                    f"no reply from the OpenAI-compatible server at {self.base_url} after {self.retries + 1} attempts "
                    f"({type(exc).__name__}: {scrub(str(exc), self.api_key_env)}). Is it running?"
                ) from None
            status = getattr(exc, "status_code", None)
            raise BackendError(f"server at {self.base_url} refused the request ({status}): {scrub(exc.message, self.api_key_env)}") from None
        except json.JSONDecodeError:
            raise BackendError(f"server at {self.base_url} sent a reply that is not JSON") from None
        if not response.choices:
            raise BackendError(f"server at {self.base_url} returned no choices")
        choice = response.choices[0]
        text = choice.message.content or ""
        # A server that parsed tool calls out anyway: write them back as the text the env reads.
        for call in choice.message.tool_calls or []:
            call_json = json.dumps({"name": call.function.name, "arguments": call.function.arguments})
            text += f"<tool_call>{call_json}</tool_call>"
        if choice.finish_reason == "length":
            return Generation(None, None, "length", text)
        # Servers drop the matched stop string from the text; put it back so the turn reads as written.
        matched = (choice.model_extra or {}).get("stop_reason")  # vLLM says which one matched
        if isinstance(matched, str):
            return Generation(None, None, "stop", text + matched)
        for s in stop:
            opening = "<" + s[2:] if s.startswith("</") else None
            if opening and text.count(opening) > text.count(s):
                return Generation(None, None, "stop", text + s)
        return Generation(None, None, "eos", text)
