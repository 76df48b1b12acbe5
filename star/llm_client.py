"""The one way this project calls an OpenAI-compatible server: its params, its client, its retries.

`retries` is the number of tries after the first: retries=2 sends a request at
most three times. Only failures that may pass are retried: connection errors,
timeouts, 429 and 5xx (a caller may add its own, such as an unusable reply).
A Retry-After sets the wait before the next try (`star.service.wait_retry_after`,
at most the client's timeout); without one the waits are backoff, 2*backoff,
... seconds, at most MAX_BACKOFF. The SDK's own retries are off, so these are
the only ones.

Its params are `star.endpoint.OpenAIEndpoint`. Only tenacity and star.service load
with this module; openai is imported when a client is made.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from star.service import client_timeout, wait_retry_after

log = logging.getLogger(__name__)

BACKOFF = 0.5  # seconds before the first retry when the server sets no Retry-After
MAX_BACKOFF = 30.0
def api_key(api_key_env: str) -> str:
    # Local servers (vLLM, transformers serve) take any key.
    return os.environ.get(api_key_env) or "EMPTY"


def make_client(base_url: str, api_key_env: str, timeout: float) -> Any:
    """An openai.OpenAI client for `base_url`, with the key from `api_key_env` and no retries of its own."""
    import openai

    return openai.OpenAI(base_url=base_url, api_key=api_key(api_key_env), timeout=client_timeout(timeout), max_retries=0)


def scrub(text: str, api_key_env: str) -> str:
    """`text` without the API key: a server may echo it in an error body."""
    key = os.environ.get(api_key_env) or ""
    return text.replace(key, "***") if len(key) >= 4 else text


def transient(exc: BaseException) -> bool:
    """A failure that may pass: connection error, timeout (a connection error in the SDK), 429 or 5xx."""
    import openai

    if isinstance(exc, openai.APIConnectionError):
        return True
    return isinstance(exc, openai.APIStatusError) and (exc.status_code == 429 or exc.status_code >= 500)


def error_kind(exc: BaseException) -> str:
    """What went wrong, in a few words and without anything from the request."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        return f"connection error ({type(cause).__name__})" if cause is not None else "connection error"
    if isinstance(exc, openai.RateLimitError):
        return "rate limited (HTTP 429)"
    if isinstance(exc, openai.APIStatusError):
        return f"server error (HTTP {exc.status_code})"
    return type(exc).__name__


def retrying(name: str, retries: int, timeout: float, backoff: float = BACKOFF, also: tuple[type[BaseException], ...] = ()) -> Retrying:
    """Tenacity's Retrying for requests to the server `name` (a URL with a word of what it is).

    Transient failures, and those of the types in `also`, are tried again up to
    `retries` times; the last failure is re-raised as it came.
    """

    def retry_on(exc: BaseException) -> bool:
        return isinstance(exc, also) or transient(exc)

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        n = state.attempt_number
        log.warning("%s: attempt %d failed (%s); retry %d/%d in %.1fs", name, n, error_kind(exc) if exc else "error", n, retries, wait)

    return Retrying(
        retry=retry_if_exception(retry_on),
        stop=stop_after_attempt(retries + 1),
        wait=wait_retry_after(wait_exponential(multiplier=backoff, max=max(backoff, MAX_BACKOFF)), cap=timeout, name=name),
        before_sleep=before_sleep,
        reraise=True,
    )
