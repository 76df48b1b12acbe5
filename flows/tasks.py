"""The task decorator every flow uses.

Stage outputs are cached by DVC, so Prefect's input hashing (which cannot
hash data frames or models) is turned off.
"""

from functools import partial

from prefect import task as _task
from prefect.cache_policies import NO_CACHE

task = partial(_task, cache_policy=NO_CACHE)
