"""A faster memory allocator for PyTorch on CPU, preloaded into the running process.

PyTorch's CPU kernels allocate and free many short-lived buffers; tcmalloc or
jemalloc serve them faster than glibc's malloc (bench/allocator.py measures
by how much). An allocator must be loaded before the process starts, so
`preload` starts the same command again with LD_PRELOAD set, once.

STAR_ALLOCATOR picks it: tcmalloc (the default), jemalloc, or none. Where the
library is not installed (Debian: libtcmalloc-minimal4, libjemalloc2) the
process runs on as it is.
"""

from __future__ import annotations

import ctypes.util
import glob
import os
import sys

ALLOCATORS = {"tcmalloc": "tcmalloc_minimal", "jemalloc": "jemalloc"}
_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")


def find_allocator(name: str) -> str | None:
    """The path of the allocator's shared library, or None when it is not installed."""
    lib = ALLOCATORS[name]
    for directory in _DIRS:
        found = sorted(glob.glob(f"{directory}/lib{lib}.so*"))
        if found:
            return found[0]
    return ctypes.util.find_library(lib)


def preload(env_var: str = "STAR_ALLOCATOR") -> None:
    """Start this command again with the chosen allocator preloaded, unless it already is
    (or none is chosen, or it is not installed). Does not return when it restarts."""
    choice = os.environ.get(env_var, "tcmalloc")
    if choice == "none":
        return
    if choice not in ALLOCATORS:
        raise SystemExit(f"error: {env_var}={choice!r}: expected one of {', '.join([*ALLOCATORS, 'none'])}")
    loaded = os.environ.get("LD_PRELOAD", "")
    if any(lib in loaded for lib in ALLOCATORS.values()):
        return
    path = find_allocator(choice)
    if path is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    env = {**os.environ, "LD_PRELOAD": f"{path} {loaded}".strip()}
    os.execve(sys.executable, sys.orig_argv, env)
