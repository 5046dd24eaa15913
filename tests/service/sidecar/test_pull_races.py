"""A worker's ``/done`` and ``/fail`` for the same lease, sent together: one of them decides."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import httpx
import redis

from service.delivery.protocol import Delivery
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import serving

# (the /done's outcome, the /fail's): accepted and then the fail is stale, or failed and then the done is
ALLOWED = {("accepted", "stale"), ("stale", "requeued"), ("stale", "dead_lettered")}


def test_a_fail_racing_a_done_for_one_lease_never_leaves_the_item_both_accepted_and_requeued(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Each item is raced until it settles (accepted, or dead-lettered by attempts): every race has
    one winner, the stream holds each accepted item once, and no accepted item runs again."""
    delivery = Delivery.from_url(redis_url)
    keys = {f"p{n}#0" for n in range(12)}
    publish(delivery, "race", {"w0": [item(f"p{n}", 0, 10) for n in range(12)]})
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(4), SessionSettings("w0"))

    async def race(client: httpx.AsyncClient, lease: dict[str, Any], fail_first: bool) -> tuple[str, str]:
        ids = {field: lease[field] for field in ("schedule_id", "key", "token")}
        done = client.post("/done", json=ids | {"output_tokens": 10})
        fail = client.post("/fail", json=ids | {"reason": "engine error"})
        if fail_first:  # sent first, each usually wins: both orders are raced
            failed, completed = await asyncio.gather(fail, done)
        else:
            completed, failed = await asyncio.gather(done, fail)
        return completed.json()["outcome"], failed.json()["outcome"]

    async def run() -> list[tuple[str, tuple[str, str]]]:
        raced: list[tuple[str, tuple[str, str]]] = []
        async with serving(session) as (client, _):
            while (answer := await client.get("/next")).status_code == 200:
                lease = answer.json()
                raced.append((lease["key"], await race(client, lease, len(raced) % 2 == 1)))
        return raced

    raced = asyncio.run(run())
    print(Counter(outcome for _, outcome in raced))
    accepted = Counter(key for key, (done, _) in raced if done == "accepted")
    streamed = Counter(record.key for record in delivery.read_results("race", count=1_000_000))
    progress = delivery.progress("race")
    assert {outcome for _, outcome in raced} <= ALLOWED
    assert streamed == accepted
    assert max(streamed.values(), default=1) == 1  # each accepted result streamed once
    last = {key: n for n, (key, _) in enumerate(raced)}  # an accepted item is never handed out again
    assert all(last[key] == n for n, (key, (done, _)) in enumerate(raced) if done == "accepted")
    assert (progress.done, progress.done + progress.failed) == (len(accepted), len(keys))
