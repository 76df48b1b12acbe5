"""Select SFT data from teacher trajectories, in any domain.

A trajectory is kept when its plan passes the evaluator at the required
level, it fits the token limit, and every turn was well formed; duplicates
are dropped; then the training set is drawn by size and difficulty mix.
Every drop is counted under its reason.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from star.io import atomic_dir, write_json, write_jsonl

BAD_CALLS = ("invalid", "unknown_tool")


def quotas(total: int, weights: dict) -> dict:
    """Split `total` by weights exactly (largest remainder)."""
    norm = sum(weights.values())
    raw = {k: total * w / norm for k, w in weights.items()}
    out = {k: int(v) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: (out[k] - raw[k], str(k)))[: total - sum(out.values())]:
        out[k] += 1
    return out


def passes(row: dict, require: str) -> bool:
    evaluation = row.get("evaluation")
    if not evaluation:
        return False
    if require == "delivered":
        return bool(evaluation["delivered"])
    if require == "commonsense":
        return bool(evaluation["commonsense_pass"])
    return bool(evaluation["final_pass"])


def malformed(row: dict) -> bool:
    if row.get("truncated") or not row.get("answer"):
        return True
    return any(json.loads(call)["kind"] in BAD_CALLS for call in row.get("calls", []))


def select(
    rows: list[dict],
    *,
    max_tokens: int,
    count_tokens: Callable[[dict], int],
    size: int,
    levels: dict[str, float],
    seed: int,
    require: str = "final",
    judge: Callable[[dict], bool] | None = None,
) -> tuple[list[dict], Counter]:
    """`judge(row)` (a domain's: e.g. QA's exact match) replaces the evaluator's check of `require`."""
    judge = judge or (lambda row: passes(row, require))
    stats: Counter = Counter(total=len(rows))
    seen: set[str] = set()
    pool: dict[str, list[dict]] = {level: [] for level in levels}
    for row in rows:
        level = row["level"]
        if not judge(row):
            reason = "failed_evaluation"
        elif malformed(row):
            reason = "malformed"
        elif (tokens := count_tokens(row)) > max_tokens:
            reason = "too_long"
        else:
            digest = hashlib.sha256(json.dumps(row["messages"], sort_keys=True).encode()).hexdigest()
            reason = "duplicate" if digest in seen else ""
            seen.add(digest)
        if reason:
            stats[f"dropped_{reason}"] += 1
            stats[f"dropped_{reason}_{level}"] += 1
            continue
        if level not in pool:
            stats["dropped_level_not_selected"] += 1
            continue
        pool[level].append({**row, "tokens": tokens})

    rng = random.Random(seed)
    kept: list[dict] = []
    for level, quota in quotas(size, levels).items():
        candidates = pool[level]
        rng.shuffle(candidates)
        take = candidates[:quota]
        kept += take
        stats[f"kept_{level}"] = len(take)
        stats[f"dropped_over_quota_{level}"] = len(candidates) - len(take)
        stats["dropped_over_quota"] += len(candidates) - len(take)
        if len(take) < quota:
            stats[f"short_{level}"] = quota - len(take)
    kept.sort(key=lambda r: (r["query_id"], r["sample"]))
    stats["kept"] = len(kept)
    return kept, stats


def chat_token_counter(model_dir: str, tool_schemas: bool) -> Callable[[dict], int]:
    """The length of a trajectory row in tokens, as SFT renders it with the model's chat
    template (its tools' JSON schemas in the prompt when `tool_schemas`)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)

    def count_tokens(row: dict) -> int:
        tools = json.loads(row["tools"]) if tool_schemas else None
        return len(tokenizer.apply_chat_template(row["messages"], tools=tools, tokenize=True, return_dict=False))

    return count_tokens


def write_selection(kept: list[dict], stats: dict, out: Path) -> dict[str, float]:
    """Write the SFT set to out/train.jsonl and its counts to out/stats.json, atomically; its metrics."""
    with atomic_dir(out) as tmp:
        write_jsonl(tmp / "train.jsonl", kept)
        write_json(tmp / "stats.json", stats)
    tokens = [r["tokens"] for r in kept]
    return {**stats, "mean_tokens": sum(tokens) / max(len(tokens), 1), "max_tokens": max(tokens, default=0)}
