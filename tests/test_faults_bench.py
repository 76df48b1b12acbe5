"""bench/faults.py in miniature: the fuzz counters, one failing server, the search for a planted key."""

from __future__ import annotations

import json
import logging
import random
import time

import pytest

from bench.fault_harness import clients, fuzz, leaks, servers, targets
from bench.fault_harness.corpus import build_corpus


@pytest.fixture(scope="module")
def corpus():
    return build_corpus(n_queries=8, n_questions=8)


def test_garbled_expert_outputs_crash_no_target(corpus):
    result = fuzz.fuzz(corpus, 500, seed=0)
    assert result["inputs"] == 500 and set(result["targets"]) == set(targets.fuzz_targets(corpus))
    assert result["crashes"] == 0, result["targets"]
    assert result["violations"] == 0, result["targets"]


def test_the_counters_count_crashes_violations_and_hangs(monkeypatch):
    monkeypatch.setattr(fuzz, "HANG_S", 0.2)

    def run(x):
        if x < 0.3:
            raise ZeroDivisionError("boom")
        if x < 0.5:
            return False  # a broken promise
        if x > 0.995:
            time.sleep(1)
        return True

    result = fuzz.run_target("deliberate", lambda rng: rng.random(), run, 300, seed=0)
    rng = random.Random("0:deliberate")  # the generator run_target seeds by (seed, name)
    xs = [rng.random() for _ in range(300)]
    assert result.inputs == 300
    assert result.crashes == sum(x < 0.3 for x in xs) > 0
    assert result.violations == sum(0.3 <= x < 0.5 for x in xs) > 0
    assert result.hangs == sum(x > 0.995 for x in xs)
    (crash,) = [s for s in result.problems if s.startswith("ZeroDivisionError")]
    assert result.problems[crash] == result.crashes
    assert any(e["signature"] == crash and "boom" in e["message"] and e["traceback"] for e in result.examples)

    # through fuzz(): a deliberately crashing target turns up in the totals
    summary = fuzz.fuzz(None, 40, seed=0, targets={"always": (lambda rng: "x", lambda x: {}["missing"])})
    assert summary["crashes"] == 40 and summary["crash_rate"] == 1.0
    assert list(summary["targets"]["always"]["problems"].values()) == [40]


def test_a_dead_teacher_server_fails_fast_with_the_projects_error(corpus):
    result = servers.servers(corpus, faults=("closed",), clients=("teacher",))
    assert result["cases"] == 1 and result["clear"] == 1 and result["raw"] == 0
    assert result["by_case"]["closed/teacher"]["outcome"] == "TeacherUnavailable"
    assert result["max_seconds_to_fail"] < 5
    # a raw exception is not counted as clear
    outcome, clear, _ = clients.outcome_of(lambda: json.loads("{"))
    assert outcome == "raw JSONDecodeError" and not clear


@pytest.mark.slow
def test_the_planted_key_is_found_only_where_it_was_planted(corpus):
    def leak(key, outputs):
        (outputs / "oops.log").write_text(f"key={key}\n")
        logging.getLogger("star.deliberate").warning("key %s", key)

    result = leaks.secrets(corpus, leak=leak)
    # Found exactly where this test put it: the search works, and nothing else leaked.
    assert result["leaks_by_place"] == {"outputs/oops.log": 1, "logs": 1}
    assert result["authorization_headers"] == result["requests"] >= 3
    assert result["files_scanned"] >= 4  # the outputs and the MLflow store


@pytest.mark.slow
def test_retry_after_counts_the_clients_that_waited_as_asked(corpus, monkeypatch):
    def impatient(base_url, corpus, timeout, retries, **kw):
        """Retries at once, whatever the 429 asked."""
        import urllib.error
        import urllib.request

        def call():
            for _ in range(retries + 1):
                request = urllib.request.Request(f"{base_url}/chat/completions", data=b"{}", headers={"Content-Type": "application/json"})
                try:
                    return urllib.request.urlopen(request, timeout=timeout).read()
                except urllib.error.HTTPError:
                    continue
            raise RuntimeError("gave up")

        return call

    monkeypatch.setitem(clients.CLIENTS, "impatient", impatient)
    result = servers.retry_after_check(corpus, ("teacher", "impatient"))
    for form in ("seconds", "http_date"):
        teacher, hasty = result["teacher"][form], result["impatient"][form]
        assert teacher["honoured"] and teacher["requests"] == 2 and teacher["gap_s"] >= teacher["asked_s"] >= 1.0, teacher
        assert not hasty["honoured"] and hasty["requests"] == 2 and hasty["gap_s"] < 0.5, hasty
