"""End to end: an engine that fails every request of a kind the other engines serve (here a shorter
context: it refuses every long prompt) no longer dead-letters those items. Each failure sends the
item's next attempt to another worker, so the step finishes whole: lost = 0, accepted twice = 0."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import redis

from service.delivery.protocol import Delivery
from service.delivery.records import LeaseSettings, PublishedSchedule
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, SessionStats, WorkerSession
from tests.service.sidecar.procs import cluster, item, tally

WORKERS = ("short", "w1", "w2")  # "short" serves a 2,048-token context, the others 32,768
SLOTS = 4  # each sidecar's concurrency: the others' own queues outlast the short one's failures


def _sidecar(redis_url: str, worker: str, engine: str) -> Sidecar:
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(SLOTS), SessionSettings(worker))
    settings = RunnerSettings(idle_poll_s=0.02, engine_wait_s=0.05)
    return Sidecar(session, EngineClient.open(EngineOptions(engine)), settings)


def _run_all(sidecars: list[Sidecar], delivery: Delivery, sid: str, timeout_s: float) -> list[SessionStats]:
    """Run every sidecar in one event loop until the schedule is finished (or ``timeout_s``), the
    first only once the others have been seen alive (claimed): a failure's retry goes to a worker seen
    within a lease TTL, and at load the first could fail an item before the others' first claim."""

    async def main() -> list[SessionStats]:
        stop = asyncio.Event()
        deadline = time.monotonic() + timeout_s
        others = [asyncio.create_task(s.run(stop)) for s in sidecars[1:]]
        seen = delivery.keys(sid).seen
        alive = lambda: all(delivery.client.zscore(seen, w) for w in WORKERS[1:])  # noqa: E731 (blocking)
        while time.monotonic() < deadline and not await asyncio.to_thread(alive):
            await asyncio.sleep(0.02)
        tasks = [asyncio.create_task(sidecars[0].run(stop)), *others]
        finished = lambda: delivery.progress(sid).finished  # noqa: E731 (blocking: run in a thread)
        while time.monotonic() < deadline and not await asyncio.to_thread(finished):
            await asyncio.sleep(0.05)
        stop.set()
        stats = [await asyncio.wait_for(t, 10.0) for t in tasks]
        for s in sidecars:
            await s.engine.aclose()
        return stats

    return asyncio.run(main())


def test_items_one_engine_always_refuses_are_run_by_the_others_and_none_is_lost(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    long = [replace(item("long", i, 20), prompt_tokens=3_000) for i in range(4)]  # past short's context
    queues = {
        "short": (*long, *(item("s", i, 20) for i in range(4))),
        "w1": tuple(item("a", i, 400) for i in range(3 * SLOTS)),
        "w2": tuple(item("b", i, 400) for i in range(3 * SLOTS)),
    }
    delivery = Delivery.from_url(redis_url)
    lease = LeaseSettings(lease_ttl_ms=5_000, max_attempts=3)
    delivery.publish(PublishedSchedule("mixed", queues, lease=lease))
    with cluster(tmp_path) as procs:
        urls = procs.engine_threads(dict.fromkeys(WORKERS, 0.002), contexts={"short": 2_048})
        stats = _run_all([_sidecar(redis_url, w, urls[w]) for w in WORKERS], delivery, "mixed", 60.0)
    progress = delivery.progress("mixed")
    expected = {i.key for q in queues.values() for i in q}
    assert tally(delivery, "mixed", expected) == (0, 0)
    assert (progress.done, progress.failed) == (len(expected), 0)
    by_worker = {r.key: r.worker_id for r in delivery.read_results("mixed", count=1_000)}
    assert {by_worker[i.key] for i in long} <= {"w1", "w2"}
    assert stats[0].failed == len(long)  # each refused once by short, then run elsewhere
