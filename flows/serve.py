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


def _start(env: dict[str, str], prefect: str, log) -> tuple[subprocess.Popen | None, str]:
    """One try: a server on a fresh port, and its URL once it answers; None if it exited first."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    server = subprocess.Popen([prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(240):
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            return server, url
        except OSError:
            if server.poll() is not None:
                return None, url
            time.sleep(0.5)
    _stop(server)
    raise RuntimeError(f"prefect server did not answer on {url}; see {log.name}")


def _stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()


@contextlib.contextmanager
def prefect_server(home: Path, env: dict[str, str] | None = None, prefect: str = "prefect", tries: int = 3) -> Iterator[str]:
    """A Prefect server with its files in `home`, up for the block: its API URL.

    A server that exits before answering is started again on a new port: the
    port is picked free but another process can take it before the server binds.
    """
    home.mkdir(parents=True, exist_ok=True)
    env = {**(env or os.environ), "PREFECT_HOME": str(home)}
    with open(home / "server.log", "w") as log:
        for _ in range(tries):
            server, url = _start(env, prefect, log)
            if server is not None:
                break
        else:
            log.flush()
            tail = (home / "server.log").read_text().strip().splitlines()[-5:]
            raise RuntimeError(f"prefect server exited early {tries} times; see {log.name}: " + " | ".join(tail))
        try:
            yield url
        finally:
            _stop(server)


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
