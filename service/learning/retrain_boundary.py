"""Which step boundary starts an automatic retrain, claimed once across replicas.

With ``retrain_every_steps = N``, the first ``POST /schedule`` of a step at least N past the last
retrained step starts one (``Retrainer.after_step``): by then the actuals of every earlier step are
in, which is the step boundary the trainer sees. ``keys.retrain_step`` holds the step the last
automatic retrain started at (the first step seen, before any; ``POST /models/retrain`` leaves it),
moved by compare-and-set so that of replicas meeting one boundary, one claims it.
"""

from __future__ import annotations

from service.delivery import keys
from service.redis_conn import RedisClient

_COMPARE_AND_SET = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) return 1 end
return 0
"""


class StepBoundary:
    """The shared mark of the last retrained step (module doc)."""

    def __init__(self, client: RedisClient, every_steps: int, prefix: str) -> None:
        self._redis = client
        self._every = every_steps
        self.key = keys.retrain_step(prefix)
        self._advance = client.register_script(_COMPARE_AND_SET)

    def claims(self, step: int) -> bool:
        """Whether ``step`` is at least ``every_steps`` past the last retrained step and this replica
        moved the shared mark (``keys.retrain_step``) to it first. The first step seen only sets the
        mark, and a step below it (a training run started over) moves it back: neither retrains."""
        last = self._redis.get(self.key)
        if last is None:
            self._redis.set(self.key, step)  # the first step seen: nothing earlier to learn from
            return False
        if step < int(last):  # a new training run started over: count from here
            self._advance(keys=[self.key], args=[last, step])
            return False
        if step - int(last) < self._every:
            return False
        return bool(self._advance(keys=[self.key], args=[last, step]))  # False: another replica first
