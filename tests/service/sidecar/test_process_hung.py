"""A stuck sequence: the engine answers ``/health`` and finishes other requests but never returns one.
The engine watch sees life and the item never fails, so its heartbeated lease was held for ever and
its step never finished. Now the push sidecar gives every running item a bound
(``--engine-hang-timeout``, the pull mode's hold rule): past it the request is closed and the item is
reported failed, an attempt spent, so it runs again (and finishes, when the hang was a one-off) or,
hanging at every run, is dead-lettered after ``max_attempts``; nothing lost, nothing accepted twice.

valkey-server, engine-sim threads told to hang an item (``rollout.hang_tries``) and a real sidecar
process.
"""

from __future__ import annotations

import dataclasses
import json
import signal
from pathlib import Path

import httpx
import pytest
import redis

from service.delivery.keys import schedule_keys
from service.delivery.outcomes import CompletionOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import DeliveryItem, LeaseSettings, PublishedSchedule
from tests.service.finished import RESULT
from tests.service.sidecar.procs import PROCESS_START_S, cluster, item, tally, wait_finished, wait_until

pytestmark = pytest.mark.slow
HANG_S = 1  # --engine-hang-timeout: the least it takes
LEASE = LeaseSettings(lease_ttl_ms=30_000, max_attempts=2)  # a lapse would take longer than the test


def _hung(prompt_id: str, tries: int) -> DeliveryItem:
    """An item engine-sim leaves unanswered its first ``tries`` times (then 5 tokens); capped at 16
    tokens, so its bound is ``HANG_S`` (a quarter of the measured rate, 100s of tokens/s, is shorter)."""
    base = dataclasses.replace(item(prompt_id, 0, 5), max_new_tokens=16)
    return dataclasses.replace(
        base, payload={**base.payload, "rollout": {"output_tokens": 5, "hang_tries": tries}}
    )


def _warnings(log: Path) -> list[str]:
    """The sidecar's lines about items the engine never answered."""
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return [line["message"] for line in lines if "got no answer from the engine" in line["message"]]


def test_an_item_the_engine_never_answers_is_handed_back_and_finished_by_its_next_try(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    delivery = Delivery.from_url(redis_url)
    stuck, others = _hung("stuck", tries=1), [item("fine", i, 5) for i in range(5)]
    delivery.publish(PublishedSchedule("hang", queues={"w0": (stuck, *others)}, lease=LEASE))
    with cluster(tmp_path) as procs:
        url = procs.engine_threads({"engine": 0.01})["engine"]
        sidecar = procs.sidecar("w0", url, redis_url, "--engine-hang-timeout", str(HANG_S))
        _started_running(delivery, "hang", stuck.key)
        first = _running_token(delivery, "hang", stuck.key)
        # without the bound the engine never answers it and this times out
        wait_finished(delivery, "hang", 30)
        hanging = httpx.get(f"{url}/sim/stats").json()["hanging"]  # the hung request was closed
        sidecar.signal(signal.SIGTERM)
        stats = sidecar.stats()
    assert tally(delivery, "hang", {i.key for i in (stuck, *others)}) == (0, 0)
    assert hanging == 0
    assert (stats["accepted"], stats["released"], stats["failed"]) == (6, 0, 1)  # the hang spent an attempt
    (warning,) = _warnings(sidecar.log)
    assert warning.startswith(f"item {stuck.key} of schedule hang got no answer from the engine in ")
    assert warning.endswith("s: request closed, reported failed")
    # the closed try's answer, had it come after all, is refused by its lease's token
    assert first is not None
    assert delivery.complete_many("hang", [(stuck.key, first, RESULT)]) == [CompletionOutcome.STALE]


def test_an_item_that_hangs_at_every_run_is_dead_lettered_after_max_attempts_not_looped(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    delivery = Delivery.from_url(redis_url)
    stuck, others = _hung("stuck", tries=1_000), [item("fine", i, 5) for i in range(3)]
    delivery.publish(PublishedSchedule("hangs", queues={"w0": (stuck, *others)}, lease=LEASE))
    with cluster(tmp_path) as procs:
        url = procs.engine_threads({"engine": 0.01})["engine"]
        sidecar = procs.sidecar("w0", url, redis_url, "--engine-hang-timeout", str(HANG_S))
        _started_running(delivery, "hangs", stuck.key)
        wait_finished(delivery, "hangs", 60)
        hanging = httpx.get(f"{url}/sim/stats").json()["hanging"]
        sidecar.signal(signal.SIGTERM)
        stats = sidecar.stats()
    (dead,) = delivery.progress("hangs").dead_letters
    assert (dead.key, dead.attempts) == (stuck.key, LEASE.max_attempts)
    assert dead.reason.startswith("no answer from the engine in ")
    assert tally(delivery, "hangs", {i.key for i in others}) == (0, 0)
    assert hanging == 0  # every hung request was closed
    assert (stats["released"], stats["failed"]) == (0, LEASE.max_attempts)  # every hang spent one
    assert len(_warnings(sidecar.log)) == LEASE.max_attempts


def _started_running(delivery: Delivery, schedule_id: str, key: str) -> None:
    """Return once the sidecar process runs ``key``: its start is in this wait (its imports take
    seconds, a minute at load 30 on 2 cores: a bound against never), so the bounds after it time what
    the test is about. The 60 s of the dead-letter test's wait used to include that start: a run of
    the sidecar's tests beside other work failed it with the stuck item in its first try."""
    wait_until(lambda: _running_token(delivery, schedule_id, key) is not None, PROCESS_START_S, f"{key} runs")


def _running_token(delivery: Delivery, schedule_id: str, key: str) -> int | None:
    """The lease token of ``key`` while it runs, from its packed ``P:st`` record; None otherwise."""
    record = delivery.client.hget(schedule_keys(schedule_id).st, key)
    state, token, *_ = str(record).split("|")
    return int(token) if state == "r" else None
