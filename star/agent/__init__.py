"""Rollouts of tool-using agents: the batched multi-turn engine and its generation backends.

Import from the submodules (star.agent.rollout, star.agent.backend, ...): this package
imports none of them, so a stage loads, and depends on, only the backend it uses.
"""
