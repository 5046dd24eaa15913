"""The at-once hedge's candidate (``fastest_first``) exists only where the pool has a slot for every
trajectory: with one fewer, some queue runs in waves and there is nothing at once to weigh. The count
is of trajectories, exactly: a batch of as many trajectories as slots has its candidate, and a batch
placed by groups (``prefix_affinity``: a prompt's samples on one worker) counts each group's samples,
not its one unit, against the slots."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.policies import robust_fast
from scheduler.policies.base import Placement
from scheduler.policies.problem import build_problem
from scheduler.policies.robust import spreads
from scheduler.policies.robust_fast import at_once_hedge, fastest_first
from tests.scheduler.fake_clock import SteppingClock
from tests.scheduler.mixed_requests import grouped_request


def test_a_batch_of_exactly_as_many_trajectories_as_slots_has_a_candidate() -> None:
    problem = build_problem(grouped_request(slots=16))  # 64 trajectories, 4 workers of 16 slots
    placed = fastest_first(problem)
    assert placed is not None
    assert sorted(i for queue in placed for i in queue) == list(range(64))
    assert max(len(queue) for queue in placed) <= 16


def test_grouped_samples_count_each_against_the_slots() -> None:
    request = dataclasses.replace(
        grouped_request(slots=15), prefix_affinity=True
    )  # 16 groups of 4 on 60 slots
    problem = build_problem(request)
    assert (len(problem.units), len(problem.steps)) == (16, 64)
    assert fastest_first(problem) is None


def test_a_grouped_batch_past_its_slots_is_not_asked_even_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its queues run in waves whatever the hedge would find, so it is no judgment the deadline cut
    short: the plan says it was not asked, as an ungrouped batch past its slots does, not ``unjudged``."""
    request = dataclasses.replace(grouped_request(slots=15), prefix_affinity=True)  # 64 samples, 60 slots
    problem = build_problem(request)
    queues = tuple(tuple(range(w, len(problem.units), 4)) for w in range(4))
    placement = Placement(queues, "HEURISTIC", finish_s=tuple(problem.finishes(queues, True)))
    monkeypatch.setattr(robust_fast, "clock", SteppingClock(start=10.0))  # past the deadline of 1.0
    hedged = at_once_hedge(problem, request, placement, spreads(request.trajectories), 1.0)
    assert (hedged.queues, hedged.at_once) == (queues, robust_fast.NOT_ASKED)
