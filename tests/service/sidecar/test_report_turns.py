"""The turns of one lease's reports (``report_turns.py``): one at a time, each given up once.

A turn's end may be called twice (the hold bound's failure report once gave its turn up once answered
and again in the beat's ``finally``); a worker's report may have taken the turn in between, and must
keep it until its own answer, or a third report of the lease would go to Redis beside it.
"""

from __future__ import annotations

import asyncio

from service.sidecar.report_turns import ReportTurns

LEASE = ("s", "a#0", 7)


def test_a_turn_given_up_again_after_the_next_report_took_it_leaves_that_report_its_turn() -> None:
    turns = ReportTurns()
    end = turns.take(LEASE)
    end()
    turns.take(LEASE)  # the next report's
    end()  # the first one's end, called again
    assert turns.busy(LEASE)


def test_reports_of_one_lease_waiting_for_its_turn_go_one_at_a_time_in_turn() -> None:
    """Three reports at once: each runs alone, so the lease's reports never overlap."""
    turns, inside, order = ReportTurns(), [0], []

    async def report(name: str) -> None:
        async with turns.of(LEASE):
            inside[0] += 1
            assert inside[0] == 1, f"{name} ran beside another report"
            await asyncio.sleep(0.01)
            order.append(name)
            inside[0] -= 1

    async def run() -> None:
        await asyncio.gather(report("first"), report("second"), report("third"))

    asyncio.run(run())
    assert sorted(order) == ["first", "second", "third"]
    assert not turns.busy(LEASE)


def test_a_report_that_raises_gives_its_turn_up() -> None:
    turns = ReportTurns()

    async def run() -> bool:
        try:
            async with turns.of(LEASE):
                raise ConnectionError("no answer")
        except ConnectionError:
            pass
        async with asyncio.timeout(5):
            async with turns.of(LEASE):
                return True

    assert asyncio.run(run())
    assert not turns.busy(LEASE)
