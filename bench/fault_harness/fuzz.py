"""The fuzz section: inputs shared out to the targets (bench.fault_harness.targets), counted as crashes, violations and hangs.

A crash is any exception; a violation is a False from the target (a broken promise, such as a reward out of range);
a hang is an input running over HANG_S, stopped by a timer signal.
"""

from __future__ import annotations

import random
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import ROOT
from bench.fault_harness.corpus import Corpus
from bench.fault_harness.targets import fuzz_targets

HANG_S = 1.0  # one fuzz input running longer than this is a hang (the slowest normal ones take ~0.1 s)


def fuzz(corpus: Corpus, n: int, seed: int = 0, targets: dict | None = None) -> dict[str, Any]:
    """`n` inputs shared evenly by the targets; crashes, violations and hangs per target."""
    targets = targets or fuzz_targets(corpus)
    share, extra = divmod(n, len(targets))
    results: dict[str, TargetResult] = {}
    start = time.perf_counter()
    for i, (name, (make, run)) in enumerate(targets.items()):
        t0 = time.perf_counter()
        results[name] = r = run_target(name, make, run, share + (i < extra), seed)
        print(f"fuzz {name:16s} {r.inputs:7,d} inputs  crashes {r.crashes}  violations {r.violations}  hangs {r.hangs}  slowest {r.slowest_s * 1000:7.1f} ms  ({time.perf_counter() - t0:.1f} s)")
        for signature, count in r.problems.items():
            print(f"  {count:5d} x {signature}")
        for example in r.examples:
            print(f"  first: input #{example['input']} (seed {seed}): {example['message']}\n    {example['item']}")
            if example["traceback"]:
                print("    " + example["traceback"].strip().replace("\n", "\n    "))
    inputs = sum(r.inputs for r in results.values())
    crashes = sum(r.crashes for r in results.values())
    return {
        "inputs": inputs,
        "crashes": crashes,
        "violations": sum(r.violations for r in results.values()),
        "hangs": sum(r.hangs for r in results.values()),
        "crash_rate": crashes / max(inputs, 1),
        "seconds": round(time.perf_counter() - start, 1),
        "targets": {k: {"inputs": r.inputs, "crashes": r.crashes, "violations": r.violations, "hangs": r.hangs, "slowest_ms": round(r.slowest_s * 1000, 1), "problems": r.problems} for k, r in results.items()},
    }


@dataclass
class TargetResult:
    inputs: int = 0
    crashes: int = 0
    violations: int = 0  # ran, but broke a promise (a reward outside its range)
    hangs: int = 0
    slowest_s: float = 0.0
    problems: dict[str, int] = field(default_factory=dict)  # signature -> count
    examples: list[dict] = field(default_factory=list)  # the first input of each signature


def run_target(name: str, make: Callable[[random.Random], Any], run: Callable[[Any], bool | None], n: int, seed: int, keep: int = 5) -> TargetResult:
    """`make` draws an input, `run` exercises the target on it: any exception is a crash, a False return a violation,
    an input running over HANG_S a hang. Problems are grouped by signature (what, and where in star/)."""
    rng = random.Random(f"{seed}:{name}")
    result = TargetResult()
    use_alarm = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    previous = signal.signal(signal.SIGALRM, _alarm) if use_alarm else None
    try:
        for i in range(n):
            item = make(rng)
            start = time.perf_counter()
            signature = message = trace = None
            try:
                if use_alarm:
                    signal.setitimer(signal.ITIMER_REAL, HANG_S)
                try:
                    ok = run(item)
                finally:
                    if use_alarm:
                        signal.setitimer(signal.ITIMER_REAL, 0)
                if ok is False:
                    result.violations += 1
                    signature = message = "violation"
            except Hang as exc:
                result.hangs += 1
                signature, message = f"hang in {_where(exc)}", f"over {HANG_S:g} s"
            except Exception as exc:  # any exception is what we count
                result.crashes += 1
                signature, message, trace = f"{type(exc).__name__} at {_where(exc)}", f"{type(exc).__name__}: {str(exc)[:200]}", traceback.format_exc()[-1500:]
            result.slowest_s = max(result.slowest_s, time.perf_counter() - start)
            if signature is not None:
                if signature not in result.problems and len(result.examples) < keep:
                    result.examples.append({"input": i, "signature": signature, "message": message, "item": repr(item)[:400], "traceback": trace})
                result.problems[signature] = result.problems.get(signature, 0) + 1
            result.inputs += 1
    finally:
        if use_alarm:
            signal.signal(signal.SIGALRM, previous)
    return result


class Hang(BaseException):
    """Raised by the alarm inside a fuzz input that runs too long (not an Exception: the code under test must not catch it)."""


def _alarm(signum, frame):
    raise Hang()


def _where(exc: BaseException) -> str:
    """The deepest frame in the project's library (else the deepest frame) of an exception's traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if Path(f.filename).resolve().is_relative_to(ROOT / "star")]
    frame = (ours or frames)[-1]
    path = Path(frame.filename).resolve()
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    return f"{name}:{frame.lineno} in {frame.name}"
