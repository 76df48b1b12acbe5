"""Print params profiles (e.g. params.micro.yaml) as `-S key=value` flags for `dvc exp run`.

Several files stack: a key in a later file overrides the same key in an earlier one."""

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


def override(value: object) -> str:
    """A value in DVC's (Hydra's) override grammar, without spaces or quotes, so it
    survives both a shell's word splitting and being passed as one argument."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{override(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(override(v) for v in value) + "]"
    if isinstance(value, str) and value and all(c.isalnum() or c in "._-/" for c in value):
        return value
    return json.dumps(value)


def set_flags(values: dict[str, object]) -> list[str]:
    # One -S per key keeps a mapping's commas from splitting it into a grid.
    return [f"{key}={override(value)}" for key, value in values.items()]


if __name__ == "__main__":
    values: dict[str, object] = {}
    for path in sys.argv[1:]:
        with open(path) as f:
            values.update(flat(yaml.safe_load(f)))
    print(" ".join(f"-S {s}" for s in set_flags(values)))
