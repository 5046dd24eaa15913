"""A policy called by name, not through the planner, refuses a trajectory no worker may hold as the planner
does: an ``InvalidInputError`` naming the trajectory's field, its value and why, the same words.

The planner validates first, so the policies assumed a holdable batch; called directly they did anything
but say so: ``lpt`` and ``cpsat`` ordered forever a prompt that fills its worker's cache, every policy
placed a trajectory pinned to a drained worker on another and planned one longer than every cache, and
an unknown pin or a pool all drained raised ``KeyError``, ``ZeroDivisionError`` or ``IndexError`` from
deep inside, as three of them did on an empty batch (edges59). A batch holding one key twice, which each
policy planned by position, one key on two workers, is refused likewise (edges60)."""

from __future__ import annotations

import pytest

from scheduler.devices import device_profile, model_preset
from scheduler.errors import InvalidInputError
from scheduler.planner import plan
from scheduler.policies import POLICY_NAMES, get_policy
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker

CAPACITY = 4_000  # each worker's KV cache, tokens
HOLDABLE = tuple(Trajectory(f"p{i}", 0, 200, 1_000, 500.0) for i in range(4))
WORKERS = tuple(Worker(f"h100-{i}", device_profile("H100"), kv_capacity_tokens=CAPACITY) for i in range(2))


def _with(last: Trajectory, excluded: frozenset[str] = frozenset()) -> PlanRequest:
    return PlanRequest((*HOLDABLE, last), Inventory(WORKERS, model_preset("7b")), excluded_workers=excluded)


CASES = {
    "longer than every cache": (
        _with(Trajectory("long", 0, 200, 8_000, 500.0)),
        "trajectories[4].max_new_tokens",
    ),
    "a prompt filling every cache": (
        _with(Trajectory("wide", 0, CAPACITY, 10, 5.0)),
        "trajectories[4].prompt_tokens",
    ),
    "pinned to no worker": (
        _with(Trajectory("pin", 0, 200, 1_000, 500.0, pinned_worker="h200-9")),
        "trajectories[4].pinned_worker",
    ),
    "pinned to a drained worker": (
        _with(
            Trajectory("pin", 0, 200, 1_000, 500.0, pinned_worker="h100-1"), excluded=frozenset({"h100-1"})
        ),
        "trajectories[4].pinned_worker",
    ),
    "every worker drained": (
        _with(HOLDABLE[0], excluded=frozenset({"h100-0", "h100-1"})),
        "excluded_workers",
    ),
    "no trajectory at all": (
        PlanRequest((), Inventory(WORKERS, model_preset("7b"))),
        "trajectories",
    ),
    "one key twice": (  # every policy planned both, by position: one key on two workers (edges60)
        _with(Trajectory("p1", 0, 200, 1_000, 900.0)),
        "trajectories[4]",
    ),
    "one key twice after a prompt filling every cache": (  # the first rule broken, as the planner says
        PlanRequest(
            (*HOLDABLE, Trajectory("wide", 0, CAPACITY, 10, 5.0), HOLDABLE[0]),
            Inventory(WORKERS, model_preset("7b")),
        ),
        "trajectories[4].prompt_tokens",
    ),
    "a group pinned apart": (
        PlanRequest(
            (
                Trajectory("g", 0, 200, 1_000, 500.0, pinned_worker="h100-0"),
                Trajectory("g", 1, 200, 1_000, 500.0, pinned_worker="h100-1"),
            ),
            Inventory(WORKERS, model_preset("7b")),
            prefix_affinity=True,
        ),
        "trajectories[1].pinned_worker",
    ),
}


@pytest.mark.parametrize("name", POLICY_NAMES)
@pytest.mark.parametrize("case", CASES)
def test_a_policy_called_directly_refuses_it_naming_the_trajectory_as_the_planner_does(
    name: str, case: str
) -> None:
    request, field = CASES[case]
    with pytest.raises(InvalidInputError) as planned:
        plan(request, name)
    with pytest.raises(InvalidInputError) as direct:
        get_policy(name).plan(request)
    assert direct.value.field == field
    assert str(direct.value) == str(planned.value)
