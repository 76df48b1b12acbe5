"""Run a command with a Prefect server up for its duration.

Without a server every stage starts its own temporary one (10-20 s each);
with one, a flow costs a second or two and its runs show in the Prefect UI
while the server lives. An existing PREFECT_API_URL is used as it is.

    python -m flows.serve dvc repro
"""

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def prefect_server(home: Path, env: dict[str, str] | None = None, prefect: str = "prefect") -> Iterator[str]:
    """A Prefect server with its files in `home`, up for the block: its API URL."""
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    log = open(home / "server.log", "w")
    server = subprocess.Popen(
        [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)], env={**(env or os.environ), "PREFECT_HOME": str(home)}, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                if server.poll() is not None:
                    raise RuntimeError(f"prefect server exited early; see {log.name}")
                time.sleep(0.5)
        else:
            raise RuntimeError(f"prefect server did not answer on {url}; see {log.name}")
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def main(command: list[str]) -> int:
    if os.environ.get("PREFECT_API_URL") or not command:
        return subprocess.call(command)
    import flows  # noqa: F401  (quiet, offline Prefect settings)

    try:
        with prefect_server(Path(os.environ["PREFECT_HOME"])) as url:
            return subprocess.call(command, env={**os.environ, "PREFECT_API_URL": url})
    except RuntimeError as error:
        raise SystemExit(str(error)) from None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
