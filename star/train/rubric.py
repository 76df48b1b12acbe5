"""A reward rubric: named reward functions, each with a weight, summed into the reward that trains.

A domain brings the functions (each reads one graded episode: the domain's own record of the
task, the env and what its evaluator found) and the params bring the weights, so a new reward
is one function and one line of params. Every function with a weight is scored and logged under
its name beside "reward"; one with weight 0 is not computed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

RewardFunction = Callable[[Any], float]


class Rubric:
    def __init__(self, functions: Mapping[str, RewardFunction], weights: Mapping[str, float]):
        unknown = sorted(set(weights) - set(functions))
        if unknown:
            raise ValueError(f"unknown reward function {', '.join(unknown)}; the domain has: {', '.join(functions)}")
        # the functions' own order, so the sum's float rounding never depends on how params list them
        self.weighted = [(name, fn, weights[name]) for name, fn in functions.items() if weights.get(name)]

    def score(self, graded: Any) -> dict[str, float]:
        """Each weighted function's score under its name, and their weighted sum as "reward"."""
        scores = {name: fn(graded) for name, fn, _ in self.weighted}
        reward = 0.0
        for name, _, weight in self.weighted:
            reward += weight * scores[name]
        return {"reward": reward, **scores}
