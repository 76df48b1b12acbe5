"""Prefect flows, one per stage, plus `pipeline` for the whole DAG.

Prefect reads its settings at import, so quiet, offline defaults are set
here, before any flow module imports it. Set PREFECT_API_URL to use a
running server instead of a temporary one.
"""

import os
from pathlib import Path

_home = Path(os.environ.get("PREFECT_HOME", Path.home() / ".prefect"))
_home.mkdir(parents=True, exist_ok=True)
for key, value in {
    "PREFECT_HOME": str(_home),
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "PREFECT_CLI_PROMPT": "false",
}.items():
    os.environ.setdefault(key, value)
