"""The plan's first cell replay in ``blind_draws.least_drawn`` is priced at the pace measured so far
(a draw of one plan), as every later one is at the slowest play seen: where less than that is left
before the deadline, the bar gives up (None) rather than start a play that would end past it.

Why: the plan's estimates are priced as one pass over every draw, and they may take that whole
share; a replay started with less than a draw's time left ends past the plan's budget, which the bar
exists to keep (hedge49: a bar that ended 109 ms past its budget).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from scheduler import clock
from scheduler.devices import device_profile, model_preset
from scheduler.policies import blind_draws
from scheduler.policies.problem import build_problem
from scheduler.policies.robust import SAMPLES, draw_matrix, least_mean, makespans, spreads
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker
from tests.scheduler.fake_clock import ManualClock

ESTIMATES_S = float(SAMPLES)  # the plan's estimates take their whole price: a draw's pace per draw


def _waves() -> PlanRequest:
    """Six samples of a wide spread on one H100 of two slots: its queue runs in waves, so the plan's
    cells start at their floors and must be played."""
    batch = tuple(Trajectory("p0", s, 40, 4_096, 300.0, {0.5: 300.0, 0.9: 1_200.0}) for s in range(6))
    inventory = Inventory((Worker("h", device_profile("H100"), max_num_seqs=2),), model_preset("7b"))
    return PlanRequest(batch, inventory, kv_admission=False, seed=1)


def _paced(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a clock that moves only so: a play of a blind plan takes a second (the pace), the plan's
    estimates ``ESTIMATES_S``, a cell's replay nothing."""
    fake = ManualClock()
    monkeypatch.setattr(clock, "now", fake.now)
    for name, seconds in (("makespans", 1.0), ("estimated_finishes", ESTIMATES_S)):
        original = getattr(blind_draws, name)

        def slow(*args: Any, _original: Any = original, _seconds: float = seconds, **kwargs: Any) -> Any:
            fake.seconds += _seconds
            return _original(*args, **kwargs)

        monkeypatch.setattr(blind_draws, name, slow)


@pytest.mark.parametrize(("left_s", "played"), [(0.5, False), (1.5, True)])
def test_the_first_replay_needs_a_draws_pace_left(
    monkeypatch: pytest.MonkeyPatch, left_s: float, played: bool
) -> None:
    request = _waves()
    problem, spread = build_problem(request), spreads(request.trajectories)
    assert spread is not None
    draws = draw_matrix(spread, np.random.default_rng(request.seed), SAMPLES)
    queues, blinds = [[0, 1, 2, 3, 4, 5]], [[[5, 4, 3, 2, 1, 0]]]
    points = problem.finishes(queues, False)
    every = [makespans(problem, q, draws, False) for q in (queues, *blinds)]
    _paced(monkeypatch)
    chunks = -(-(SAMPLES - 1) // blind_draws.CHUNK)
    estimated = 1.0 + chunks + ESTIMATES_S  # the blind plan's first draw, its chunks, the estimates
    chosen = blind_draws.least_drawn(problem, queues, points, blinds, draws, False, estimated + left_s)
    assert clock.now() == estimated  # the estimates were priced and run; nothing after took time
    assert chosen == (least_mean(every) if played else None)
