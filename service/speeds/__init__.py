"""Per-worker decode speeds learned from actuals and fed back into later plans.

``learner.py`` keeps each worker's learned scale in Redis (``SpeedLearner``) and says why each rule
is as it is; ``model.py`` is the arithmetic it applies (a sample, a batch's ratio, peers' scales),
``kv.py`` what a worker's own KV cache cost a batch, ``groups.py`` which scales differing only by
noise are planned as one.
"""
