"""Calling OpenAI-compatible servers (teacher, formatter, paraphraser, policy endpoint).

A stage that cannot get what it needs from one reports it in one line and
exits with `ServiceError.exit_code`, not a traceback; a dead address fails
within the connect timeout, however long the read timeout is.
"""

from __future__ import annotations

CONNECT_TIMEOUT = 10.0  # seconds to open a connection; replies may take the whole `timeout`


class ServiceError(RuntimeError):
    """A server failed after its retries, or rejected the request."""

    exit_code = 3


def client_timeout(seconds: float):
    """The timeout for an openai client: `seconds` to reply, at most CONNECT_TIMEOUT to connect."""
    import httpx

    return httpx.Timeout(seconds, connect=min(seconds, CONNECT_TIMEOUT))
