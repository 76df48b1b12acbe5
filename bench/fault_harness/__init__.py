"""The sections of bench/faults.py, a module each: fuzz (with targets and mutations), servers (with fault_server and
clients), tool_faults, leaks (the secrets search) and kills (with micro_repo, stage_runs and kill_checks); cli runs them."""
