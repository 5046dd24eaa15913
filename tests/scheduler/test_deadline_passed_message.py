"""``DeadlinePassedError``'s message: the deadline it passed, or 'none' for a plan that had none.

A plan without a caller's deadline runs under the service's ``NEVER`` (``sys.float_info.max``,
``service/api/stopping.py``) and is given up only because the replica stops; its message printed
that deadline as a 316-character number in every traceback.
"""

from __future__ import annotations

import sys

from scheduler.errors import DeadlinePassedError


def test_a_caller_deadline_is_shown_to_the_microsecond() -> None:
    error = DeadlinePassedError("bound", 12.5, 0.25)
    assert str(error) == "hard deadline 12.500000 passed in bound (250.0 ms past it)"


def test_a_plan_without_a_deadline_given_up_at_the_stop_shows_none() -> None:
    error = DeadlinePassedError("placement", sys.float_info.max, 0.001)
    assert str(error) == "hard deadline none passed in placement (1.0 ms past it)"
    assert error.deadline == sys.float_info.max  # the value itself is kept for the service's checks
