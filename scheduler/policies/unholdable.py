"""A policy called directly on a trajectory no worker may hold refuses it, naming it, as the planner does.

The planner validates a request before any policy sees it (``scheduler.validation``), so the policies
assume every trajectory has an active worker whose KV cache holds it at its cap. Each policy is public
API, chosen by name, and may be called without the planner; on such a trajectory (pinned to a drained
or unknown worker, longer than every cache, a prompt filling its cache, a group pinned apart) they
did anything but say so: ``lpt`` ordered forever a prompt that fills its worker's cache, every policy
placed a trajectory pinned to a drained worker on another, planned one longer than every cache as if
it fitted, and met an unknown pin or a pool all drained with a ``KeyError``, ``ZeroDivisionError`` or
``IndexError`` from deep inside (edges59). ``build_problem``, which every policy builds its problem
with, detects it where it looks for the workers a unit may take, at no cost to a valid request, and
refuses it here in the validation's words. An empty batch is refused here too, the batch-wide case:
``least_loaded``, ``lpt`` and ``cpsat`` raised ``ZeroDivisionError`` on it. So is a batch holding one
key twice (``validation.validate_unique_keys``, called by ``build_problem``): every policy planned
both, one key on two workers (edges60).
"""

from __future__ import annotations

from typing import NoReturn

from scheduler.errors import InvalidInputError
from scheduler.types import PlanRequest
from scheduler.validation import validate_request


class Unholdable(Exception):  # noqa: N818 - a signal to ``build_problem``, answered by ``refuse_unholdable``
    """A unit that no active worker may take: raised where the workers it may take are looked up."""


def refuse_unholdable(request: PlanRequest) -> NoReturn:
    """Raise the validation's ``InvalidInputError`` for ``request``: the first trajectory it refuses,
    by its path (``trajectories[4].pinned_worker``), value and reason, as a planned request is refused.

    The validation finds the trajectory (the unit that raised ``Unholdable`` knows only its workers and
    its largest need). A request it passes raises here too, naming the batch: every trajectory held
    by some worker is what ``Unholdable`` contradicts, so the words say the one thing known."""
    validate_request(request)
    raise InvalidInputError(
        "trajectories", len(request.trajectories), "a trajectory no active worker may hold"
    )
