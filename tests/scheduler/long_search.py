"""A CP-SAT model whose search runs to its limit (seconds, not milliseconds), and a clock that jumps
past every deadline while it runs: the stand-ins for a solve still searching when its caller's hard
deadline passes, or its replica stops (``scheduler/policies/sat_watch.py``)."""

from __future__ import annotations

import math
import random
import threading

from ortools.sat.python import cp_model

LIMIT_S = 10.0  # the search's deterministic limit: ~14 s of one core here, if nothing stops it
JUMP_S = 0.3  # when the clock jumps, after the search started: well inside it


def long_search(items: int = 400, dims: int = 20, seed: int = 3) -> cp_model.CpModel:
    """A 400-item, 20-dimension knapsack: a feasible answer at once, and no proof of the best one
    within ``LIMIT_S`` (CP-SAT 9.15, one worker: still FEASIBLE at 30 deterministic seconds)."""
    rng = random.Random(seed)
    model = cp_model.CpModel()
    x = [model.new_bool_var(f"x[{i}]") for i in range(items)]
    for _ in range(dims):
        weights = [rng.randint(10, 1000) for _ in range(items)]
        model.add(sum(w * v for w, v in zip(weights, x, strict=True)) <= sum(weights) // 3)
    model.maximize(sum(rng.randint(10, 1000) * v for v in x))
    return model


class JumpLater:
    """A wall clock that reads 0 until ``jump`` (or ``JUMP_S`` after ``start``), then ``inf``."""

    def __init__(self) -> None:
        self.jumped = threading.Event()

    def __call__(self) -> float:
        return math.inf if self.jumped.is_set() else 0.0

    def start(self) -> threading.Timer:
        """Jump ``JUMP_S`` from now, on a timer thread."""
        timer = threading.Timer(JUMP_S, self.jumped.set)
        timer.start()
        return timer
