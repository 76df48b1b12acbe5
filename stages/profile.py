"""Print a params profile (e.g. params.micro.yaml) as `-S key=value` flags for `dvc exp run`."""

import json
import sys

import yaml

# params whose value is a mapping (sizes, weights) are set whole
WHOLE = {"sizes", "levels", "days", "budget_factor"}


def flags(data: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in data.items():
        if isinstance(value, dict) and key not in WHOLE:
            out += flags(value, f"{prefix}{key}.")
        else:
            out.append(f"-S {prefix}{key}={json.dumps(value, separators=(',', ':'))}")
    return out


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(" ".join(flags(yaml.safe_load(f))))
