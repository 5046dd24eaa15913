"""The hold bound's failure report of an item takes the lease's turn, so a worker's late report of it
waits for that answer and the lease counts once, ``failed``, and nothing is ``inherited``.

``PullState.beat`` drops an item held past its bound and reports it failed after the heartbeat. It
took no turn (``report_turns.py``): a worker's ``/done`` sent in between found the lease no longer
held, was accepted as a report of a lease this sidecar never held (``accepted`` and ``inherited``),
and the failure report then refused (``stale``). The counters balanced, but ``inherited`` is for a
killed predecessor's lease, not this one's (docs/sidecar.md, counters). ``abandon`` now takes each
turn as it drops the lease, before any await. Every order of the two is driven here: the first
report to reach the Delivery waits at a gate (before or after it lands in Redis) while the other is
sent, so the order is exact, not a matter of timing.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import redis

from service.delivery.outcomes import CompletionOutcome, ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, SessionStats, WorkerSession
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import report_body, serving, until

COUNTERS = ("inherited", "accepted", "duplicate", "stale", "failed", "released", "lost", "cancelled")
WAITS = "waits for the report in flight"  # report_turns.py's DEBUG line


class _Gate(Delivery):
    """A real ``Delivery`` whose first report (completion or failure, the sidecar's or the worker's)
    stops at a gate until ``go``: before it reaches Redis (``lands`` false) or after (its answer held
    back); ``reached`` says it is there. Later reports pass."""

    def __init__(self, client: redis.Redis, lands: bool) -> None:
        super().__init__(client)
        self.lands = lands
        self.reached, self.go = threading.Event(), threading.Event()
        self._lock = threading.Lock()

    def _gated(self, send: Callable[[], Any]) -> Any:
        with self._lock:
            first = not self.reached.is_set()
            self.reached.set()
        if first and not self.lands:
            self.go.wait(timeout=60)
        answer = send()
        if first and self.lands:
            self.go.wait(timeout=60)
        return answer

    def complete_many(self, *args: Any, **kwargs: Any) -> list[CompletionOutcome]:
        outcomes: list[CompletionOutcome] = self._gated(
            lambda: super(_Gate, self).complete_many(*args, **kwargs)
        )
        return outcomes

    def fail(self, lease: Lease, reason: str, now_ms: int | None = None) -> ReleaseOutcome:
        outcome: ReleaseOutcome = self._gated(lambda: super(_Gate, self).fail(lease, reason, now_ms))
        return outcome

    def fail_key(self, *args: Any, **kwargs: Any) -> ReleaseOutcome:
        outcome: ReleaseOutcome = self._gated(lambda: super(_Gate, self).fail_key(*args, **kwargs))
        return outcome


def _counted(stats: SessionStats) -> dict[str, int]:
    """The counters of a lease's end that are not zero, and ``inherited``: each lease ends once."""
    return {name: getattr(stats, name) for name in COUNTERS if getattr(stats, name)}


# (which comes first, whether the first lands before the gate holds it, the worker's report):
# the worker's answer, and the one counter the lease ends in
ORDERS = {
    # the beat drops the item, and the worker's report comes before its failure reaches Redis (the
    # bug: before, accepted + inherited for a /done, failed + inherited for a /fail, then stale)
    ("beat", False, "done"): ((409, "stale"), {"failed": 1}),
    ("beat", False, "fail"): ((200, "duplicate"), {"failed": 1}),  # the beat's failure of this token
    # ... or while that failure, landed, is being answered
    ("beat", True, "done"): ((409, "stale"), {"failed": 1}),
    ("beat", True, "fail"): ((200, "duplicate"), {"failed": 1}),
    # the worker's report is in flight (not landed, or landed) when the beat finds the item overdue:
    # the report decides, and nothing is abandoned
    ("report", False, "done"): ((200, "accepted"), {"accepted": 1}),
    ("report", True, "done"): ((200, "accepted"), {"accepted": 1}),
    ("report", False, "fail"): ((200, "requeued"), {"failed": 1}),
    ("report", True, "fail"): ((200, "requeued"), {"failed": 1}),
}


@pytest.mark.parametrize(("first", "lands", "kind"), list(ORDERS))
def test_a_report_of_an_item_past_its_hold_bound_and_the_bounds_failure_report_count_the_lease_once(
    redis_client: redis.Redis,
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
    first: str,
    lands: bool,
    kind: str,
) -> None:
    publish(Delivery.from_url(redis_url), "held", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=600_000)
    delivery = _Gate(redis.Redis.from_url(redis_url), lands)
    clock = [0.0]
    session = WorkerSession(delivery, Holdings(1, clock=lambda: clock[0]), SessionSettings("w0"))

    async def run() -> tuple[int, str]:
        async with serving(session, hold_timeout_s=100.0) as (client, state):
            lease = (await client.get("/next")).json()
            clock[0] = 101.0  # past the bound

            def send() -> asyncio.Task[httpx.Response]:
                return asyncio.create_task(client.post(f"/{kind}", json=report_body(kind, lease)))

            if first == "beat":
                beat = asyncio.create_task(state.beat())
                await until(delivery.reached.is_set, "failure report at the gate")
                report = send()
                await until(lambda: report.done() or WAITS in caplog.text, "report answered or waiting")
                delivery.go.set()
                await beat
            else:
                report = send()
                await until(delivery.reached.is_set, "worker's report at the gate")
                await state.beat()
                delivery.go.set()
            answer = await report
            return answer.status_code, answer.json()["outcome"]

    with caplog.at_level(logging.DEBUG, logger="service.sidecar"):
        got = asyncio.run(run())
    answer, ended = ORDERS[(first, lands, kind)]
    assert (got, _counted(session.stats)) == (answer, ended)
    assert session.stats.claimed == 1
    assert len(session.holdings) == 0
