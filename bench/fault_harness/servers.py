"""The servers section: every client against every faulty server (time to fail, clear or raw failure), then
against a 429 with Retry-After, as a number and as an HTTP date (was the wait honoured)."""

from __future__ import annotations

import os
import time
from typing import Any

from bench.fault_harness.clients import CLIENTS, SERVER_KEY_ENV, outcome_of
from bench.fault_harness.corpus import Corpus
from bench.fault_harness.fault_server import FaultServer

SERVER_FAULTS = ("closed", "http500", "hang", "malformed", "wrong_shape", "truncated", "rate429")


def servers(corpus: Corpus, faults: tuple[str, ...] = SERVER_FAULTS, clients: tuple[str, ...] = tuple(CLIENTS), timeout: float = 1.0, retries: int = 1, retry_after: float = 1.0) -> dict[str, Any]:
    """Every client against every faulty server: time to fail, clear or raw failure, requests made."""
    os.environ.setdefault(SERVER_KEY_ENV, "sk-bench-dummy")
    cases = []
    start = time.perf_counter()
    for fault in faults:
        for client in clients:
            server = FaultServer(fault, retry_after=retry_after)
            try:
                call = CLIENTS[client](server.base_url, corpus, timeout, retries)
                t0 = time.perf_counter()
                outcome, clear, message = outcome_of(call)
                seconds = time.perf_counter() - t0
            finally:
                server.close()
            case = {
                "client": client, "fault": fault, "seconds": round(seconds, 2), "outcome": outcome, "clear": clear,
                "one_line": "\n" not in message, "requests": len(server.requests), "message": message[:240],
            }  # fmt: skip
            if fault == "rate429":
                gaps = server.gaps()
                case["retry_after_s"] = retry_after
                case["min_gap_s"] = round(min(gaps), 2) if gaps else None
            cases.append(case)
            mark = "ok " if clear else "RAW"
            print(f"server {fault:11s} {client:9s} {mark} {seconds:5.2f} s  {case['requests']} request(s)  {outcome}: {message[:150]!r}")
    clear = sum(c["clear"] for c in cases)
    honoured = retry_after_check(corpus, clients, retry_after) if "rate429" in faults else {}
    return {
        "cases": len(cases),
        "clear": clear,
        "raw": len(cases) - clear,
        "clear_rate": clear / max(len(cases), 1),
        "max_seconds_to_fail": max((c["seconds"] for c in cases), default=0.0),
        "retry_after_honoured": sum(all(c["honoured"] for c in by_form.values()) for by_form in honoured.values()),
        "retry_after": honoured,
        "seconds": round(time.perf_counter() - start, 1),
        "timeout_s": timeout,
        "retries": retries,
        "by_case": {f"{c['fault']}/{c['client']}": {k: c[k] for k in ("seconds", "outcome", "clear", "requests")} for c in cases},
    }


def retry_after_check(corpus: Corpus, clients: tuple[str, ...] = tuple(CLIENTS), retry_after: float = 1.0, timeout: float = 5.0) -> dict[str, dict[str, dict]]:
    """Each client against a server whose first reply is a 429 asking to wait `retry_after` seconds (as a number, then
    as an HTTP date), and whose second is good: honoured when the retry came no earlier than asked and the call then succeeded.

    `timeout` is above the delay, since a client waits at most its own timeout.
    """
    out: dict[str, dict[str, dict]] = {}
    for client in clients:
        for form in ("seconds", "http_date"):
            server = FaultServer("rate429", retry_after=retry_after, http_date=form == "http_date", limit=1)
            try:
                outcome, _, message = outcome_of(CLIENTS[client](server.base_url, corpus, timeout, 1))
            finally:
                server.close()
            succeeded = outcome in ("no error", "delivered plan")  # what outcome_of calls a result
            waited = server.waited_as_asked()
            gaps = server.gaps()
            asked = server.requests[0]["until"] - server.requests[0]["wall"] if server.requests and "until" in server.requests[0] else None
            case = {
                "asked_s": round(asked, 2) if asked is not None else None, "gap_s": round(gaps[0], 2) if gaps else None,
                "requests": len(server.requests), "outcome": "reply" if succeeded else outcome, "honoured": bool(waited) and succeeded,
            }  # fmt: skip
            out.setdefault(client, {})[form] = case
            mark = "ok " if case["honoured"] else "NO "
            print(f"server retry-after {form:9s} {client:9s} {mark} asked {case['asked_s']} s, retried after {case['gap_s']} s, {case['requests']} request(s), {case['outcome']}" + ("" if succeeded else f": {message[:120]!r}"))
    return out
