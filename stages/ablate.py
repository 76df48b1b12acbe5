"""Queue one DVC experiment per combination of a named grid in ablations.yaml, then run them.

    python -m stages.ablate reward                              # queue and run
    python -m stages.ablate reward_x_fault --profile params.micro.yaml --jobs 2
    python -m stages.ablate reward --dry                        # print the commands only
"""

from __future__ import annotations

import argparse
import itertools
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from stages.profile import flat, set_flags


def combinations(grid: dict[str, list] | list[dict[str, object]]) -> list[dict[str, object]]:
    """A grid is a mapping of keys to value lists (every combination), or a list of settings, each one experiment."""
    if isinstance(grid, list):
        return [dict(setting) for setting in grid]
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("grid", help="a grid name in the grids file")
    parser.add_argument("--grids", default="ablations.yaml")
    parser.add_argument("--profile", help="a params profile applied to every experiment, e.g. params.micro.yaml")
    parser.add_argument("--jobs", type=int, default=1, help="experiments run at once")
    parser.add_argument("--dry", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)

    grids = yaml.safe_load(Path(args.grids).read_text())
    if args.grid not in grids:
        print(f"error: no grid {args.grid!r} in {args.grids}; grids: {', '.join(grids)}", file=sys.stderr)
        return 2
    profile = flat(yaml.safe_load(Path(args.profile).read_text())) if args.profile else {}
    commands = []
    for combination in combinations(grids[args.grid]):
        overrides = set_flags({**profile, **combination})  # the grid's value wins over the profile's
        commands.append(["dvc", "exp", "run", "--queue", *(x for s in overrides for x in ("-S", s))])
    commands.append(["dvc", "exp", "run", "--run-all", "--jobs", str(args.jobs)])
    for command in commands:
        print(shlex.join(command), flush=True)
        if not args.dry and subprocess.run(command).returncode != 0:
            print(f"error: {shlex.join(command)} failed", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
