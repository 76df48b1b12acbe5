"""Run a command with a Prefect server up for its duration.

Without a server every stage starts its own temporary one (10-20 s each);
with one, a flow costs a second or two and its runs show in the Prefect UI
while the server lives. An existing PREFECT_API_URL is used as it is.

    python -m flows.serve dvc repro
"""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(command: list[str]) -> int:
    if os.environ.get("PREFECT_API_URL") or not command:
        return subprocess.call(command)
    import flows  # noqa: F401  (quiet, offline Prefect settings)

    port = free_port()
    log = open(Path(os.environ["PREFECT_HOME"]) / "server.log", "w")
    server = subprocess.Popen(["prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/api"
    try:
        for _ in range(180):
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                if server.poll() is not None:
                    raise SystemExit(f"prefect server exited early; see {log.name}")
                time.sleep(0.5)
        else:
            raise SystemExit(f"prefect server did not answer on {url}; see {log.name}")
        return subprocess.call(command, env={**os.environ, "PREFECT_API_URL": url})
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
