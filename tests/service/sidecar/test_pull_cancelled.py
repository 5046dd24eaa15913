"""A cancelled schedule over the pull API: its reports are refused 409 and each item counted cancelled once.

Apart from ``test_pull_api.py`` (taking and reporting work) because a cancel is the trainer's
word arriving mid-item: what the worker is told, and what the sidecar counts, however often and
however wrongly the worker reports afterwards.
"""

from __future__ import annotations

from typing import Any

import httpx
import redis

from service.delivery.protocol import Delivery
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import done_body, publish_one, session_of, with_api


def test_a_report_for_an_item_of_a_cancelled_schedule_is_refused_with_409_and_counted_cancelled(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = publish_one(redis_url, "cancelled")
    session = session_of(redis_url)

    async def script(client: httpx.AsyncClient) -> tuple[int, int, dict[str, Any]]:
        lease = (await client.get("/next")).json()
        delivery.cancel("cancelled")
        answer = await client.post("/done", json=done_body(lease, 5))
        return lease["token"], answer.status_code, answer.json()

    token, status, answer = with_api(redis_url, script, session=session)
    why = "its schedule was cancelled by the trainer; drop it"
    error = f"key='a#0' (schedule_id='cancelled', token={token}): {why}"
    assert (status, answer) == (409, {"outcome": "stale", "error": error})
    assert (session.stats.cancelled, session.stats.stale, len(session.holdings)) == (1, 0, 0)
    assert delivery.read_results("cancelled") == []


def test_an_item_of_a_cancelled_schedule_is_counted_cancelled_once_however_often_its_end_shows(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Counted per refusal, a heartbeat finding the lease gone and then each ``/done`` of it (a worker
    repeats one whose reply it lost) each added one: a cancel of 7 items read 14."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "cancelled", {"w0": [item("a", 0, 10), item("b", 0, 10)]}, lease_ttl_ms=30_000)
    session = session_of(redis_url)

    async def script(client: httpx.AsyncClient) -> list[int]:
        first, second = (await client.get("/next")).json(), (await client.get("/next")).json()
        delivery.cancel("cancelled")
        await client.post("/done", json=done_body(first, 5))  # refused: its schedule is cancelled
        await client.post("/done", json=done_body(first, 5))  # repeated: its reply was lost
        await session.heartbeat()  # the other lease found gone
        answers = [await client.post("/done", json=done_body(lease, 5)) for lease in (second, first)]
        return [answer.status_code for answer in answers]

    assert with_api(redis_url, script, session=session) == [409, 409]
    assert (session.stats.cancelled, session.stats.stale, session.stats.lost) == (2, 0, 0)


def test_reports_of_keys_never_handed_out_for_a_cancelled_schedule_are_not_counted_cancelled(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """A cancel's count is bounded by the keys this sidecar handed out: a pull worker that reports
    invented keys of a cancelled schedule (its bug; the API has no auth) is refused each time, and
    the sidecar does not count them ``cancelled``: counting keeps each key, so they grew its memory
    without end."""
    delivery = publish_one(redis_url, "cancelled")
    session = session_of(redis_url)

    async def script(client: httpx.AsyncClient) -> list[int]:
        lease = (await client.get("/next")).json()
        delivery.cancel("cancelled")
        statuses = [(await client.post("/done", json=done_body(lease, 5))).status_code]
        for n in range(200):
            invented = {**lease, "key": f"invented#{n}"}
            statuses.append((await client.post("/done", json=done_body(invented, 5))).status_code)
        return statuses

    assert set(with_api(redis_url, script, session=session)) == {409}
    assert (session.stats.cancelled, session.stats.stale) == (1, 0)  # the one item handed out
