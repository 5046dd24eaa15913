"""Fixtures of the scheduler's tests: counting the projected-peak tests a play makes, the give-up
tests' wall clock, and the check that a module run beside others never plans on the wall clock."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from scheduler import clock, giveup
from scheduler.admission import RunningPeak
from tests.scheduler.jumping_wall import DEADLINE, JumpingWall
from tests.scope_costs import SOLVER_SCOPE, scope_of


@pytest.fixture
def peak_tests(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The step of every ``RunningPeak.overflow`` call made while the test runs, in order.

    The projected-peak test costs a pass over the running set, and the engines and the worker
    model skip it where it cannot change the answer; tests of those skips count what still runs.
    """
    steps: list[int] = []
    overflow = RunningPeak.overflow

    def counted(self: RunningPeak, *args: int) -> tuple[int, int] | None:
        steps.append(args[0])
        return overflow(self, *args)

    monkeypatch.setattr(RunningPeak, "overflow", counted)
    return steps


@pytest.fixture
def wall() -> Iterator[JumpingWall]:
    """The hard deadline's clock: 10 s before it until a stage jumps it 0.25 s past; the budget's clock
    frozen, so only the hard deadline can stop a stage."""
    jumping = JumpingWall(DEADLINE - 10.0, DEADLINE + 0.25)
    with clock.frozen(), giveup.reading(jumping):
        yield jumping


@pytest.fixture(autouse=True)
def off_the_clock(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test of a module listed ``tests.scope_costs.OFF_THE_CLOCK`` fails if the code it runs reads the
    wall clock a budget is spent on: the planning clock unfrozen, a CP-SAT solve under its wall-clock
    limit, or a hard deadline on the real clock.

    Why: those modules run beside others under ``--dist loadscope`` (tests/conftest.py), which is
    safe only while their answers cannot depend on the CPU a budget buys. The list is the checked
    claim; a test's own stand-in clock (``monkeypatch.setattr(clock, "now", ...)``) replaces this
    watch and is deterministic by design."""
    if scope_of(request.node.nodeid) == SOLVER_SCOPE:
        yield
        return
    reads: list[str] = []
    now, on_wall = clock.now, clock.solves_on_wall_clock
    check_at, deadline_and_clock = giveup.check_at, giveup.deadline_and_clock

    def watched_now() -> float:
        if on_wall():  # not frozen
            reads.append("scheduler.clock.now() unfrozen")
        return now()

    def watched_on_wall() -> bool:
        answer = on_wall()
        if answer:
            reads.append("a CP-SAT solve under its wall-clock limit")
        return answer

    def watched_deadline_and_clock() -> tuple[float, Callable[[], float]] | None:
        hard = deadline_and_clock()
        if hard is not None and hard[1] is time.perf_counter:
            reads.append("a hard deadline on the real clock")
        return hard

    def watched_check_at(name: str) -> None:
        watched_deadline_and_clock()
        check_at(name)

    monkeypatch.setattr(clock, "now", watched_now)
    monkeypatch.setattr(clock, "solves_on_wall_clock", watched_on_wall)
    monkeypatch.setattr(giveup, "check_at", watched_check_at)
    monkeypatch.setattr(giveup, "deadline_and_clock", watched_deadline_and_clock)
    yield
    assert not reads, (
        f"{request.node.nodeid} is listed off the budget's clock (tests/scope_costs.py, OFF_THE_CLOCK) "
        f"but read it: {sorted(set(reads))}; unlist its module, or freeze its clock"
    )
