"""flows.serve: a Prefect server that dies before answering is started again, and a clear error names why."""

import stat
import sys
import urllib.request
from pathlib import Path

import pytest

from flows.serve import prefect_server

PREFECT = Path(sys.executable).parent / "prefect"


def _wrapper(path: Path, body: str) -> str:
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.mark.slow
def test_a_server_that_exits_early_once_is_started_again(tmp_path):
    marker = tmp_path / "failed_once"
    prefect = _wrapper(tmp_path / "prefect", f'if [ ! -e {marker} ]; then touch {marker}; echo "address already in use"; exit 1; fi\nexec {PREFECT} "$@"')
    with prefect_server(tmp_path / "home", prefect=prefect) as url:
        assert urllib.request.urlopen(f"{url}/health", timeout=5).status == 200
    assert marker.exists()
    assert "address already in use" in (tmp_path / "home" / "server.log").read_text()


def test_a_server_that_always_exits_early_stops_with_its_last_words(tmp_path):
    prefect = _wrapper(tmp_path / "prefect", 'echo "tries" >> "$PREFECT_HOME/count"; echo "database is locked"; exit 1')
    with pytest.raises(RuntimeError, match="exited early 3 times.*database is locked"):
        with prefect_server(tmp_path / "home", prefect=prefect):
            pass
    assert (tmp_path / "home" / "count").read_text().count("tries") == 3
