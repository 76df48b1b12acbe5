"""Print a params profile (e.g. params.micro.yaml) as `-S key=value` flags for `dvc exp run`."""

import json
import sys

import yaml

# params whose value is a mapping (sizes, weights) are set whole
WHOLE = {"sizes", "levels", "days", "budget_factor"}


def flat(data: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in data.items():
        if isinstance(value, dict) and key not in WHOLE:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def set_flags(values: dict[str, object]) -> list[str]:
    # JSON is YAML, and one -S per key keeps a mapping's commas from splitting it.
    return [f"{key}={json.dumps(value, separators=(',', ':'))}" for key, value in values.items()]


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(" ".join(f"-S {s}" for s in set_flags(flat(yaml.safe_load(f)))))
