"""A publishing process killed (SIGKILL: a real subprocess, on the session's real server) after its
publish's script stored the schedule and before its announce listed it, the client never retrying:
a reaper of another process announces the schedule, and its worker claims its items.

Before ops67 nothing in Redis listed such a schedule (the announcing index's entry was written in the
active index's pipeline, after ``BEGIN``; killed before ``BEGIN`` it was not even marked), and the
reapers scan no keys: only the client's retry announced it. Now the publish lists it ahead of its
script (``announcing.list_ahead``) and the script marks it as it stores it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import redis

from service.delivery import Delivery, keys
from service.delivery.reaper import Reaper

pytestmark = pytest.mark.slow
BOUND_S = 20.0  # killed -> the worker finds the schedule in its inbox (entries 2 s old are announced)
ITEMS = 3

# The publishing process: stops at ``point`` (prints "at", then sleeps until killed).
_PUBLISHER = """
import sys, time
from service.delivery import Delivery, announcing
from service.delivery.indexes import DeliveryIndexes
from tests.service.delivery.conftest import schedule
import redis

url, point, items = sys.argv[1], sys.argv[2], int(sys.argv[3])

def stop(*_args, **_kwargs):
    print("at", flush=True)
    time.sleep(600)

if point == "begin":  # the publish's script ran, the announce's opening script not
    announcing.begin = stop
else:  # marked by BEGIN, no index written
    DeliveryIndexes._each_node = stop
Delivery(redis.Redis.from_url(url)).publish(schedule("s", {"w": items}))
"""


def _killed_at(url: str, point: str) -> None:
    """Run the publisher to ``point`` and SIGKILL it there."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen(
        [sys.executable, "-c", _PUBLISHER, url, point, str(ITEMS)], stdout=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"at", "the publisher never reached the point"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("point", ["begin", "writes"])
def test_a_publisher_killed_before_its_announce_listed_the_schedule_leaves_it_to_any_reaper(
    redis_url: str, redis_client: redis.Redis, point: str
) -> None:
    """Killed before ``BEGIN`` (the mark set by the publish's script only) or after it (before any
    index is written): no inbox holds the schedule, the announcing index does; a reaper of another
    process announces it within ``BOUND_S``, the worker claims its items once, and the mark is
    cleared. On main nothing listed it (the announcing index was empty)."""
    _killed_at(redis_url, point)
    delivery = Delivery(redis_client)
    assert delivery.schedules_for("w") == []
    assert delivery.client.zrange(keys.announcing_index(), 0, -1) == ["s"]
    reaper = Reaper(delivery, interval_s=0.2).start()
    try:
        waited = time.monotonic()
        while delivery.schedules_for("w") != ["s"]:
            assert time.monotonic() - waited < BOUND_S, "the worker never learned of the schedule"
            time.sleep(0.1)
    finally:
        reaper.stop()
    assert delivery.active_schedules() == ["s"]
    assert sorted(lease.item.key for lease in delivery.claim("s", "w", 10)) == [
        f"w-{i}#0" for i in range(ITEMS)
    ]
    assert delivery.client.hget(keys.schedule_keys("s").meta, keys.ANNOUNCING) is None
