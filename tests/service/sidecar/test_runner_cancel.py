"""A sidecar and a cancelled schedule: it stops the engine requests and moves on to the next one, and
says so once (INFO), not once per item: a deliberate cancel is not a fault, and per-item warnings
would bury the stale results and lost leases that are (a lapsed lease still warns).

Against real Redis and a real engine-sim server on loopback, as ``test_runner``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from service.delivery.protocol import Delivery
from tests.service.polling import poller
from tests.service.sidecar.procs import cluster, item, publish, run_until, tally
from tests.service.sidecar.push_runner import push_sidecar

CANCEL_LINE = "cancelled by the trainer"
HEARTBEAT_S = 30.0  # no heartbeat while these items run (the first comes one interval after start)
WITHIN_S = 20.0  # the tail test's run: short of the first heartbeat, so a stop inside it is not its doing


def _engine_cancelled(engine_url: str, expected: int, within_s: float = 10.0) -> int:
    """The engine's count of withdrawn requests once it is at least ``expected``, or after ``within_s``. The
    engine sees a client's disconnect by watching the request (``engine_sim.app._unless_disconnected``),
    after the sidecar has counted its own cancel: read at once, a loaded CI host read 0 (round 64)."""
    deadline = time.monotonic() + within_s
    with poller(5.0) as http:
        while True:
            cancelled = int(http.get(f"{engine_url}/sim/stats").json()["cancelled"])
            if cancelled >= expected or time.monotonic() > deadline:
                return cancelled
            time.sleep(0.05)


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


def test_a_cancelled_step_stops_its_engine_requests_and_the_sidecar_takes_the_next_step(
    redis_client: redis.Redis, redis_url: str, engine_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    delivery = Delivery.from_url(redis_url)
    old = [item("old", i, 6000) for i in range(4)]  # ~0.5 s each, one slot: ~2 s of engine time
    publish(delivery, "old", {"w0": old}, lease_ttl_ms=60_000)
    publish(delivery, "new", {"w0": [item("new", i, 50) for i in range(3)]}, lease_ttl_ms=60_000)

    def cancelled_mid_item() -> bool:
        if delivery.progress("old").running == 1 and delivery.progress("old").cancelled_at_ms is None:
            delivery.cancel("old")
        return delivery.progress("new").finished

    sidecar = push_sidecar(redis_url, engine_url, slots=1, heartbeat_s=0.05)
    with caplog.at_level(logging.INFO, logger="service.sidecar"):
        stats = run_until(sidecar, cancelled_mid_item)

    assert delivery.progress("new").done == 3
    assert stats.claimed == 1 + 3  # of the old step only the item running at the cancel
    # the running item stopped, counted as cancelled: neither a lost lease nor a late completion
    assert (stats.cancelled, stats.lost, stats.stale) == (1, 0, 0)
    assert _engine_cancelled(engine_url, 1) == 1  # its request was aborted
    assert [m for m in _messages(caplog, logging.INFO) if CANCEL_LINE in m] == [
        "schedule old cancelled by the trainer: dropping its results"
    ]
    assert _messages(caplog, logging.WARNING) == []
    assert delivery.read_results("old") == []
    assert tally(delivery, "new", {f"new#{i}" for i in range(3)}) == (0, 0)


def test_results_of_a_cancelled_step_finished_before_a_heartbeat_are_dropped_with_one_info_line(
    redis_client: redis.Redis, redis_url: str, engine_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The walk-through's case: items finish between the cancel and the next heartbeat (a third of the
    lease TTL), so their completions are refused; that used to be one WARNING per item."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "step", {"w0": [item("step", i, 6000) for i in range(4)]}, lease_ttl_ms=60_000)
    sidecar = push_sidecar(redis_url, engine_url, slots=4, heartbeat_s=HEARTBEAT_S)  # completions come first

    def cancelled_while_all_run() -> bool:
        if delivery.progress("step").running == 4 and delivery.progress("step").cancelled_at_ms is None:
            delivery.cancel("step")
        return sidecar.session.stats.cancelled + sidecar.session.stats.stale == 4

    with caplog.at_level(logging.INFO, logger="service.sidecar"):
        stats = run_until(sidecar, cancelled_while_all_run)

    assert (stats.cancelled, stats.stale, stats.accepted) == (4, 0, 0)
    assert [m for m in _messages(caplog, logging.INFO) if CANCEL_LINE in m] == [
        "schedule step cancelled by the trainer: dropping its results"
    ]
    assert _messages(caplog, logging.WARNING) == []
    assert delivery.read_results("step") == []


def test_a_completion_refused_because_its_lease_lapsed_still_warns_and_counts_stale(
    redis_client: redis.Redis, redis_url: str, engine_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "lapsed", {"w0": [item("p", 0, 6000)]}, lease_ttl_ms=60_000)  # ~0.5 s
    sidecar = push_sidecar(redis_url, engine_url, heartbeat_s=HEARTBEAT_S)  # the completion comes first

    def lapsed_mid_item() -> bool:
        if delivery.progress("lapsed").running == 1 and not getattr(lapsed_mid_item, "done", False):
            delivery.reap("lapsed", now_ms=int(time.time() * 1000) + 3_600_000)  # the lease "lapses"
            lapsed_mid_item.done = True  # type: ignore[attr-defined]
        return sidecar.session.stats.stale == 1 and delivery.progress("lapsed").finished

    with caplog.at_level(logging.INFO, logger="service.sidecar"):
        stats = run_until(sidecar, lapsed_mid_item)

    assert (stats.stale, stats.cancelled, stats.accepted) == (1, 0, 1)  # redelivered, run again
    assert _messages(caplog, logging.WARNING) == ["completion of p#0 refused as stale (lease lost)"]
    assert not any(CANCEL_LINE in m for m in _messages(caplog, logging.INFO))


def test_a_refused_completion_of_a_cancelled_step_stops_its_other_engine_requests_at_once(
    redis_client: redis.Redis, redis_url: str, engine_url: str
) -> None:
    """The first refusal says the step is cancelled: the requests still running for it are closed
    then, not at the next heartbeat (up to a third of the lease TTL later), which would leave
    their slots generating results nobody takes."""
    delivery = Delivery.from_url(redis_url)
    # ~0.9 s, ~3.9 s: the short one outlasts the test's poll and cancel even on a loaded host (at ~0.3 s
    # it had ended, accepted, before a cancel polled late at load 16 landed), the long ones its refusal
    short, long = item("step", 0, 12_000), [item("step", i, 48_000) for i in range(1, 4)]
    publish(delivery, "step", {"w0": [short, *long]}, lease_ttl_ms=60_000)
    sidecar = push_sidecar(redis_url, engine_url, slots=4, heartbeat_s=HEARTBEAT_S)

    def cancelled_while_all_run() -> bool:
        if delivery.progress("step").running == 4 and delivery.progress("step").cancelled_at_ms is None:
            delivery.cancel("step")
        return sidecar.session.stats.cancelled + sidecar.session.stats.stale == 4

    stats = run_until(sidecar, cancelled_while_all_run)

    assert (stats.cancelled, stats.stale, stats.lost, stats.accepted) == (4, 0, 0, 0)
    assert _engine_cancelled(engine_url, 3) == 3  # the long ones, aborted
    assert len(sidecar.session.holdings) == 0


@pytest.fixture
def slow_engine_url(tmp_path: Path) -> Iterator[str]:
    """An engine-sim at 0.2 (20 times the shared fixture's 0.01): a 32,000-token item runs a minute+."""
    with cluster(tmp_path) as procs:
        yield procs.engine_threads({"engine": 0.2})["engine"]


def test_a_cancel_while_only_long_items_run_stops_them_at_the_sidecars_next_look_not_its_heartbeat(
    redis_client: redis.Redis, redis_url: str, slow_engine_url: str
) -> None:
    """DAPO's cancel: the trainer has the groups it needs and cancels while only the long tail runs.
    No completion comes to be refused, so the requests ran on until the next heartbeat (a third of
    the lease TTL, 10 s by default), decoding for nobody beside the next step; a sidecar with free
    slots reads its schedules every idle poll, and a held schedule gone from them is asked about.

    What tells the look from the heartbeat and from the items' own end is that the stop comes while
    neither can have come: inside ``WITHIN_S`` of the start, short of the first heartbeat
    (``HEARTBEAT_S``) and of the items' minute, and the engine aborted both. Not a bound on the stop's
    pace: on the 0.01 engine (items ~3 s) with a 1 s bound, a test thread starved for 1.2 s after the
    cancel, or for 4 s before it, failed the test with the sidecar doing right."""
    delivery = Delivery.from_url(redis_url)
    # the model's context (32,768) caps them; the first heartbeat 30 s after the claim
    tail = [dataclasses.replace(item("tail", i, 32_000), max_new_tokens=32_000) for i in range(2)]
    publish(delivery, "tail", {"w0": tail}, lease_ttl_ms=60_000)
    # a short drain: a sidecar that missed the cancel stops at the test's end, not after ~20 s more
    sidecar = push_sidecar(redis_url, slow_engine_url, slots=4, heartbeat_s=HEARTBEAT_S, drain_timeout_s=1.0)
    running_since: list[float] = []
    stopped: list[bool] = []  # seen by the run, not by the shutdown after it (which asks too)

    def cancelled_while_both_run() -> bool:
        # running on the engine, not only leased: a loaded host's sidecar may not have sent them yet,
        # and a cancel before the send withdraws them unsent (the engine then aborts nothing)
        if not running_since and httpx.get(f"{slow_engine_url}/sim/stats").json()["running"] == 2:
            running_since.append(time.monotonic())
            delivery.cancel("tail")
        if sidecar.session.stats.cancelled == 2:
            stopped.append(True)
        return bool(stopped)

    stats = run_until(sidecar, cancelled_while_both_run, timeout_s=WITHIN_S)

    assert running_since, "the items never ran together"
    assert stopped, "the cancelled requests ran on to the end of the test"
    assert (stats.cancelled, stats.stale, stats.lost, stats.accepted) == (2, 0, 0, 0)
    assert httpx.get(f"{slow_engine_url}/sim/stats").json()["cancelled"] == 2  # aborted, not run out
    assert len(sidecar.session.holdings) == 0
