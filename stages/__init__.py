"""DVC's stages, one module each: `python -m stages.NAME`."""

import sys

# A stage started as `python -m stages.NAME` restarts at once with a faster allocator
# preloaded (star/allocator.py), before its imports; the outputs are the same bytes.
_argv = sys.orig_argv
if "-m" in _argv[:-1] and _argv[_argv.index("-m") + 1].startswith("stages."):
    from star.allocator import preload

    preload()
