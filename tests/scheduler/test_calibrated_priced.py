"""``lpt.calibrated`` prices placing again once the scales are drawn, with the rule ``kind_scales``
asks before its passes (``robust_place.plays_unusable``), against the deadline less the time placing
again itself takes (``PLACE_COST`` lpt phases).

``kind_scales`` prices its at-once pass before it starts, not after: a pass that ran slower than its
priced play returns scales with no room left for the caller's ``REPLAY_PLAYS`` plays. Then the plan is
returned as it is, placing again not begun (it took 70-80 ms of a 1 s plan at 16,384 x 128 for a plan
then dropped: docs/solver.md). Mutation testing of round 64's code (helper mutants65): neither the
check nor its placing time was stated by a test.
"""

from __future__ import annotations

import pytest

from scheduler.policies import lpt as lpt_module
from scheduler.policies import robust_place
from scheduler.policies.lpt import PLACE_COST, REPLAY_PLAYS, calibrated
from scheduler.policies.robust import spreads
from tests.scheduler.fake_clock import count_calls, slow_stage
from tests.scheduler.test_robust_place import _hedged_lpt, _request

PASS_S, PHASE_S = 1.0, 1.0  # the at-once pass's seconds on the planning clock; one lpt phase's


@pytest.mark.parametrize(("deadline", "placed_again"), [(5.9, False), (6.0, True), (6.1, True)])
def test_placing_again_is_not_begun_where_the_drawn_scales_left_no_room_for_its_plays_and_itself(
    monkeypatch: pytest.MonkeyPatch, deadline: float, placed_again: bool
) -> None:
    """Every queue runs at once, so the draws are one closed-form pass, priced before it at nothing
    (the clock moves only in that pass), which then takes a second. Its plays priced as the draws'
    time over ``DRAWS`` each (6 plays: 3 s) and placing again at two lpt phases of a second: 1 + 3
    + 2 = 6 s. A deadline 5.9 s away: the plan as it is, no lpt placement begun; 6 s, exactly the
    time needed, or 6.1 s: placed again. Against the deadline itself (placing's 2 s not counted)
    5.9 s would have placed again."""
    assert (REPLAY_PLAYS / robust_place.DRAWS, PLACE_COST) == (3.0, 2.0)  # the 6 s above
    request = _request(1.6)
    problem, placement = _hedged_lpt(request)
    spread = spreads(request.trajectories)
    slow_stage(monkeypatch, robust_place, "closed_forms", PASS_S)
    placing = count_calls(monkeypatch, lpt_module, "lpt_assignment")
    again = calibrated(problem, request, placement, spread, deadline, lpt_phase_s=PHASE_S)
    assert bool(placing) is placed_again
    if not placed_again:
        assert again is placement
