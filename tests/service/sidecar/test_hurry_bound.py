"""``Hurry``, the second signal's end on the shutdown's waits (``service/sidecar/hurry.py``), alone:
the grace counts from the first hurry, a hurry that comes while a step waits moves its end sooner,
and a step cut has run its own handlers (a release counts its leases ``lost``) when the cut is raised.
The sidecar's processes play the same through signals in ``test_second_signal.py``."""

from __future__ import annotations

import asyncio
import time

import pytest

from service.sidecar import hurry as hurry_module
from service.sidecar.hurry import Hurry

NEVER_S = 3600.0  # a step's planned end the test never reaches
WAIT_S = 60.0  # a bound against never; met at once when right


def test_a_second_hurry_does_not_restart_the_grace() -> None:
    """A loop's death after the second signal (or a third signal) keeps the first one's end."""
    hurry = Hurry(grace_s=2.0)
    hurry.set()
    first = hurry.at
    hurry.set()
    assert hurry.at == first
    assert first is not None
    assert hurry.ends(first + NEVER_S) == first + 2.0


def test_a_hurry_that_comes_while_a_step_waits_cuts_it_at_the_grace_and_its_handlers_have_run() -> None:
    """The step planned to end an hour later is cut by the hurry's grace, not by that plan (the
    outer bound, against never, did not expire), and its own ``CancelledError`` handler finished
    before ``bound`` raised."""
    ended: list[str] = []

    async def step() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # a release counting what it leaves takes a turn of the loop
            ended.append("counted")
            raise

    async def run() -> bool:
        hurry = Hurry(grace_s=0.2)
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, hurry.set)
        async with asyncio.timeout(WAIT_S) as outer:
            with pytest.raises(TimeoutError):
                await hurry.bound(step(), planned=time.monotonic() + NEVER_S)
            assert ended == ["counted"]
        return outer.expired()

    assert asyncio.run(run()) is False


def test_a_step_cut_at_its_planned_end_without_a_hurry_is_cancelled_and_its_handlers_have_run() -> None:
    """No second signal: the step's own end cuts it while ``bound`` still watches for a hurry, and the
    step does not run on, detached, past the shutdown that gave up on it."""
    ended: list[str] = []

    async def step() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0)
            ended.append("counted")
            raise

    async def run() -> None:
        async with asyncio.timeout(WAIT_S):
            with pytest.raises(TimeoutError):
                await Hurry(grace_s=2.0).bound(step(), planned=time.monotonic() + 0.2)

    asyncio.run(run())
    assert ended == ["counted"]


def test_a_step_whose_end_has_passed_still_gets_its_first_try(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hand-back started after the grace ran out is still given ``MIN_TRY_S``: one that needs a
    single turn of the loop finishes (and counts what it hands back) rather than being cut unstarted.
    The floor is stretched to ``WAIT_S`` here: at its 0.1 s a loaded host that stalls the process for
    as long between the step's turns cut it (helper review44c: a 0.15 s stall, TimeoutError)."""
    monkeypatch.setattr(hurry_module, "MIN_TRY_S", WAIT_S)

    async def step() -> str:
        await asyncio.sleep(0)
        return "handed back"

    async def run() -> str:
        hurry = Hurry(grace_s=0.0)
        hurry.set()
        return await hurry.bound(step(), planned=time.monotonic() - 1.0)

    assert asyncio.run(run()) == "handed back"


def test_a_hand_back_is_always_given_some_time() -> None:
    """The floor the test above stretches is there at its own size too: no hand-back is cut unstarted."""
    assert hurry_module.MIN_TRY_S > 0
