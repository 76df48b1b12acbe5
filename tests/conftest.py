import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Each test process (pytest-xdist runs two) gets its own Prefect home, so their temporary
# servers never share one SQLite database, and the user's ~/.prefect is left alone.
if "PREFECT_HOME" not in os.environ:
    os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix=f"star-prefect-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-")
    atexit.register(shutil.rmtree, os.environ["PREFECT_HOME"], ignore_errors=True)
# The public TravelPlanner database lives beside the project, never inside it.
TP_DATABASE = Path(os.environ.get("STAR_TRAVELPLANNER_DB", ROOT.parent / "shared/data/travelplanner/database"))


@pytest.fixture(scope="session")
def tp_database() -> Path:
    # Fail, never skip: a missing database must turn CI red.
    assert (TP_DATABASE / "flights").is_dir(), f"TravelPlanner database not found at {TP_DATABASE}"
    return TP_DATABASE


@pytest.fixture(scope="session")
def real_sandbox(tp_database):
    from star.travel.world.sandbox import load_travelplanner

    return load_travelplanner(tp_database)


@pytest.fixture(scope="session")
def synthetic_sandbox():
    from star.travel.specs import WorldSpec
    from star.travel.world.synthetic import generate_world

    return generate_world(WorldSpec(seed=0))


@pytest.fixture(scope="module")
def one_torch_thread():
    # Tiny models gain nothing from a second thread, and on a busy machine
    # two OpenMP threads waiting on each other run several times slower.
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def reply_server():
    """`start(answer)` -> the /v1 URL of a local server that answers every POST with `answer(request json) -> (status, body)`
    or `(status, body, headers)`."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    servers = []

    def start(answer) -> str:
        class Reply(BaseHTTPRequestHandler):
            def do_POST(self):
                request = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, body, *headers = answer(json.loads(request or b"null"))
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers[0] if headers else {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Reply)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def fixed_reply_server(reply_server):
    """`start(status, body)` -> the /v1 URL of a local server that answers every POST with that reply."""
    return lambda status, body: reply_server(lambda request: (status, body))


# The two pipeline runs take most of the suite's time: start them first, one per pytest-xdist
# process (`--dist loadscope` keeps a module's tests, and its module fixtures, in one process).
LONGEST_FIRST = ("test_pipeline_micro.py", "test_pipeline_smollm2.py")


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.path.name not in LONGEST_FIRST)
