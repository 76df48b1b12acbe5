"""Calling OpenAI-compatible servers (teacher, formatter, paraphraser, policy endpoint).

A stage that cannot get what it needs from one reports it in one line and
exits with `ServiceError.exit_code`, not a traceback; a dead address fails
within the connect timeout, however long the read timeout is.

A failed reply that the client retries (a 429 or a 503, say) and that carries
`Retry-After` (seconds or an HTTP date, or OpenAI's `retry-after-ms`) is tried
again after the delay it asks for, but never later than the client's own reply
timeout: a server asking for more is tried again after that timeout. Without
the header a client keeps its own backoff. `wait_retry_after` is the tenacity
wait strategy that does this for every retrying client.
"""

from __future__ import annotations

import email.utils
import logging
import math
import time
from collections.abc import Mapping

from tenacity import RetryCallState
from tenacity.wait import wait_base

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0  # seconds to open a connection; replies may take the whole `timeout`


class ServiceError(RuntimeError):
    """A server failed after its retries, or rejected the request."""

    exit_code = 3


def client_timeout(seconds: float):
    """The timeout for an openai client: `seconds` to reply, at most CONNECT_TIMEOUT to connect."""
    import openai  # its own Timeout: the SDK's HTTP library is not always `httpx`

    return openai.Timeout(seconds, connect=min(seconds, CONNECT_TIMEOUT))


def retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """The delay in seconds a reply's headers ask for before the next request, or None.

    `retry-after-ms` (OpenAI's) first, then `Retry-After` as seconds or as an
    HTTP date. A date in the past asks for no delay; a value that is neither
    is ignored.
    """
    if not headers:
        return None
    headers = {k.lower(): v for k, v in headers.items()}
    ms = _number(headers.get("retry-after-ms"))
    if ms is not None:
        return ms / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        date = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if date.tzinfo is None:  # not an HTTP date, which is always GMT
        return None
    return max(0.0, date.timestamp() - (time.time() if now is None else now))


def _number(value: str | None) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return max(0.0, number) if math.isfinite(number) else None


def _response_headers(exc: BaseException | None) -> Mapping[str, str] | None:
    # openai.APIStatusError keeps the httpx.Response; connection errors have none.
    response = getattr(exc, "response", None)
    return getattr(response, "headers", None)


class wait_retry_after(wait_base):
    """Tenacity wait: the delay the failed reply's Retry-After asks for, at most `cap` seconds; else `fallback`.

    `cap` is the client's reply timeout: a client never waits longer between
    two tries than it would wait for one reply.
    """

    def __init__(self, fallback: wait_base, cap: float, name: str = "server"):
        self.fallback = fallback
        self.cap = max(0.0, float(cap))
        self.name = name

    def __call__(self, retry_state: RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome is not None else None
        asked = retry_after(_response_headers(exc))
        if asked is None:
            return self.fallback(retry_state)
        if asked > self.cap:
            log.warning("%s asked to wait %.1fs (Retry-After); waiting %.1fs, the client's timeout", self.name, asked, self.cap)
            return self.cap
        return asked

