"""Fault tolerance: garbled model output, failing servers, failing tools, leaked secrets, killed stages.

Five sections, one function each; every count lands in the JSON line printed last.

- fuzz: seeded mutations of real expert outputs (byte flips, truncation, tag
  soup, random JSON, huge numbers, unicode, splices, repeats) fed to the
  tool-call parser, TravelEnv and QAEnv (step, then the trajectory row distill
  would write), the rules formatter, the evaluator, and the reward functions.
  A crash is any exception; a violation is a reward outside its range.
- servers: real local HTTP servers that refuse, fail (HTTP 500), hang, send
  malformed JSON, cut the body short or rate-limit (429 + Retry-After), against
  the OpenAI teacher, the llm formatter and the OpenAI backend. Records the
  time to fail and whether the failure is the project's own error (a
  `star.service.ServiceError`; for the formatter, whose contract is never to
  raise, an undelivered plan with the reason) rather than a raw exception.
  Then each client against a server whose first reply is a 429 with
  Retry-After (1 s, as a number and as an HTTP date) and whose second is
  good: `server_retry_after_honoured` counts the clients whose retry came no
  earlier than asked, in both forms, and got the reply.
- tool_faults: the scripted expert in TravelEnv at fault rates 0 to 0.9:
  episodes completed, injected faults, recoveries (as `call_breakdown` counts them).
- secrets: a planted OPENAI_API_KEY, a teacher, formatter and backend against
  a local server that records requests, a stage run logged to a temporary
  MLflow store and, in the full mode, the real distill stage in a subprocess
  with its own Prefect home; then every byte written is searched for the key.
  The key belongs only in the Authorization header the server receives.
- kills: `kill -9` at random points of the work (while the stage's MLflow run is
  open) of distill, sft, grpo, infer and their QA counterparts in a fresh
  git+DVC repo on the micro profile, then a rerun:
  resumed, identical to the uninterrupted run, half outputs, MLflow runs left RUNNING.

The sections live in bench/fault_harness/, a module each (tests import them from there); this
script only runs bench.fault_harness.cli.

Usage:
    python bench/faults.py              # fuzz 10,000, servers, tool faults, secrets; no kills (under a minute)
    python bench/faults.py --full       # fuzz 100,000 and 10 kills (about 25 minutes on 2 shared cores)
    python bench/faults.py --fuzz 2000 --kills 0 --seed 3
    python bench/faults.py --only kills --kills 2                      # the kills section alone
    python bench/faults.py --only kills --kills 1 --kill-stages sft    # one kill of one stage
"""

import os
import sys
from pathlib import Path

# Before anything imports the Hugging Face hub or tokenizers: the bench runs offline, and its subprocesses fork.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Run as a script, Python puts bench/ on sys.path; the package is imported from the repository root.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.fault_harness.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
