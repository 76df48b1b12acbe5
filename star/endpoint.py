"""The params of an OpenAI-compatible server, shared by every section that calls one.

Kept apart from `star.llm_client`, which does the calling: reading params loads
only pydantic, and a stage's code dependencies stay the modules that call servers.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

RETRIES_HELP = "retries after the first attempt of a request that failed on connection, timeout, 429 or 5xx (0: one attempt)"


class OpenAIEndpoint(BaseModel):
    """Any OpenAI-compatible server; the key is read from `api_key_env`, never from params."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field("http://127.0.0.1:8000/v1", description="the OpenAI-compatible server's URL")
    model: str = Field("policy", description="the model name sent to the server")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable that holds the API key")
    timeout: float = Field(120.0, gt=0, description="seconds to wait for one reply")
    retries: int = Field(3, ge=0, le=20, description=RETRIES_HELP)
