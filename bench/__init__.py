"""Benchmarks, run as scripts (`python bench/<name>.py`); a package so that tests import the fault harness as bench.fault_harness."""
