"""The local pull API: a worker process that drives its own engine takes and reports work over HTTP."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import httpx
import pytest
import redis

from service.delivery.protocol import Delivery
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish, tally
from tests.service.sidecar.pullclient import done_body, publish_one, serving, with_api


def test_a_worker_pulls_items_in_plan_order_and_reports_them_once(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    items = [item("a", 0, 10), item("b", 0, 20)]
    publish(delivery, "pull", {"w0": items}, lease_ttl_ms=30_000)

    async def script(client: httpx.AsyncClient) -> list[Any]:
        first = (await client.get("/next")).json()
        second = (await client.get("/next")).json()
        done = await client.post("/done", json=done_body(first, 11))
        again = await client.post("/done", json=done_body(first, 11))  # the reply was lost: retried
        await client.post("/done", json=done_body(second, 22))
        empty = await client.get("/next")
        return [first["key"], second["key"], done.json(), again.json(), empty.status_code]

    assert with_api(redis_url, script) == [
        "a#0",
        "b#0",
        {"outcome": "accepted"},
        {"outcome": "duplicate"},
        204,
    ]
    assert {r.key: r.result.output_tokens for r in delivery.read_results("pull")} == {"a#0": 11, "b#0": 22}
    assert tally(delivery, "pull", {i.key for i in items}) == (0, 0)


def test_a_pulled_item_comes_with_the_sampling_fields_for_its_sample(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    params = {"seed": 40, "top_p": 0.95}
    seeded = [
        dataclasses.replace(one, payload={**one.payload, "params": params})
        for one in (item("s", 0, 10), item("s", 1, 10))
    ]
    publish(delivery, "pull-params", {"w0": seeded}, lease_ttl_ms=30_000)

    async def script(client: httpx.AsyncClient) -> list[Any]:
        return [(await client.get("/next")).json()["params"] for _ in seeded]

    assert with_api(redis_url, script) == [{"seed": 40, "top_p": 0.95}, {"seed": 41, "top_p": 0.95}]


def test_a_report_carries_the_sidecars_measured_concurrency_unless_the_worker_states_one(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "conc", {"w0": [item("a", 0, 10), item("b", 0, 20)]}, lease_ttl_ms=30_000)

    async def script(client: httpx.AsyncClient) -> None:
        first = (await client.get("/next")).json()
        second = (await client.get("/next")).json()
        await client.post("/done", json=done_body(first, 11))
        await client.post("/done", json={**done_body(second, 22), "extra": {"concurrency": 7}})

    with_api(redis_url, script)
    extra = {r.key: dict(r.result.extra) for r in delivery.read_results("conc")}
    assert 1.0 <= extra["a#0"]["concurrency"] <= 2.0  # a and b were out together part of the time
    assert extra["b#0"]["concurrency"] == 7
    assert {e["max_new_tokens"] for e in extra.values()} == {16_000}  # the actuals' cap, from the lease
    assert all(e["prompt_tokens"] > 0 for e in extra.values())


def test_a_measured_concurrency_comes_with_the_wall_time_it_was_measured_over(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """A worker that queues items inside itself and reports only their generation time would pair a
    short wall time with the sidecar's count of everything handed out: a worker learned 40x too fast.
    Without a stated concurrency the sidecar's own span (/next to /done) is reported; with one, the
    worker's pair is kept as it is."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "span", {"w0": [item("a", 0, 10), item("b", 0, 20)]}, lease_ttl_ms=30_000)

    async def script(client: httpx.AsyncClient) -> None:
        first = (await client.get("/next")).json()
        second = (await client.get("/next")).json()
        await asyncio.sleep(0.3)
        await client.post("/done", json={**done_body(first, 11), "wall_time_s": 0.01})
        stated = {**done_body(second, 22), "wall_time_s": 0.01, "extra": {"concurrency": 1}}
        await client.post("/done", json=stated)

    with_api(redis_url, script)
    wall = {r.key: r.result.wall_time_s for r in delivery.read_results("span")}
    assert wall["a#0"] >= 0.3
    assert wall["b#0"] == 0.01


def test_a_report_of_a_lease_never_handed_out_is_refused_with_409_naming_it_and_not_called_lost(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    delivery = publish_one(redis_url, "stale")

    async def script(client: httpx.AsyncClient) -> list[Any]:
        lease = (await client.get("/next")).json()
        wrong = {**done_body(lease, 5), "token": lease["token"] + 1000}
        answers = [await client.post("/done", json=wrong)]
        failed = {k: lease[k] for k in ("schedule_id", "token")} | {"key": "nope#0", "reason": "x"}
        answers.append(await client.post("/fail", json=failed))
        return [lease["token"], *((answer.status_code, answer.json()) for answer in answers)]

    not_held = (
        "not a lease this sidecar holds (lost, held past its hold bound, already reported, or never"
        " handed out by /next; GET /leases lists those held); drop it"
    )
    with caplog.at_level(logging.WARNING, logger="service.sidecar"):
        token, done, failed = with_api(redis_url, script)
    wrong = token + 1000
    assert done == (
        409,
        {"outcome": "stale", "error": f"key='a#0' (schedule_id='stale', token={wrong}): {not_held}"},
    )
    assert failed == (
        200,
        {"outcome": "stale", "error": f"key='nope#0' (schedule_id='stale', token={token}): {not_held}"},
    )
    assert delivery.progress("stale").done == 0
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [  # the failure is tried against Redis as the completion is, and warned alike
        f"completion of a#0 refused as stale (token {wrong} is no lease this sidecar holds)",
        f"failure report of nope#0 refused as stale (token {token} is no lease this sidecar holds)",
    ]


def test_a_report_for_a_schedule_that_is_gone_is_refused_with_404(
    redis_client: redis.Redis, redis_url: str
) -> None:
    publish_one(redis_url, "gone")

    async def script(client: httpx.AsyncClient) -> list[tuple[int, str]]:
        lease = (await client.get("/next")).json()
        unknown = await client.post("/done", json={**done_body(lease, 5), "schedule_id": "never-published"})
        redis_client.delete(*redis_client.keys("*gone*"))  # retention passed while the worker ran it
        expired = await client.post("/done", json=done_body(lease, 5))
        return [(r.status_code, r.json()["outcome"]) for r in (unknown, expired)]

    assert with_api(redis_url, script) == [(404, "unknown_schedule"), (404, "unknown_schedule")]


def test_a_result_for_a_schedule_gone_from_redis_is_counted_stale_with_one_warning(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """As the push mode counts it: the lease ends there, so it is counted once (claimed = ended)."""
    publish_one(redis_url, "gone")

    async def script(client: httpx.AsyncClient) -> tuple[int, str]:
        lease = (await client.get("/next")).json()
        redis_client.flushdb()  # Redis restarted without its data while the worker ran the item
        done = await client.post("/done", json=done_body(lease, 5))
        return done.status_code, (await client.get("/metrics")).text

    with caplog.at_level(logging.WARNING, logger="service.sidecar"):
        status, metrics = with_api(redis_url, script)
    assert status == 404
    assert 'rollout_sidecar_claimed_total{worker_id="w0"} 1.0' in metrics
    assert 'rollout_sidecar_stale_total{worker_id="w0"} 1.0' in metrics
    assert 'rollout_sidecar_held{worker_id="w0"} 0.0' in metrics
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == ["completion of a#0 refused: schedule gone is gone from Redis; result dropped"]


def test_a_report_of_a_predecessors_current_lease_carries_the_items_token_counts_and_cap(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """A sidecar restarted under a worker that outlived it takes a /done of the dead process's lease
    until its hand-back; without the item's prompt_tokens the trainer's report_results raised."""
    delivery = publish_one(redis_url, "heir")

    async def take(client: httpx.AsyncClient) -> dict[str, Any]:
        return dict((await client.get("/next")).json())

    lease = with_api(redis_url, take)  # the process that died holding it

    async def report(client: httpx.AsyncClient) -> Any:
        return (await client.post("/done", json=done_body(lease, 5))).json()

    assert with_api(redis_url, report) == {"outcome": "accepted"}  # a new process: it never held it
    (result,) = delivery.read_results("heir")
    assert (result.result.extra["prompt_tokens"], result.result.extra["max_new_tokens"]) == (
        lease["item"]["prompt_tokens"],
        lease["item"]["max_new_tokens"],
    )


def test_the_worker_gets_no_more_than_its_slots_and_a_failed_item_goes_back(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "slots", {"w0": [item("a", 0, 10), item("b", 0, 10)]}, lease_ttl_ms=30_000)

    async def script(client: httpx.AsyncClient) -> list[Any]:
        lease = (await client.get("/next")).json()
        full = (await client.get("/next")).status_code
        ref = {k: lease[k] for k in ("schedule_id", "key", "token")}
        failed = (await client.post("/fail", json={**ref, "reason": "engine crashed"})).json()
        retried = (await client.get("/next")).json()
        return [full, failed, retried["key"], retried["attempt"]]

    assert with_api(redis_url, script, slots=1) == [204, {"outcome": "requeued"}, "a#0", 2]


def test_an_idle_worker_steals_from_a_busier_queue(redis_client: redis.Redis, redis_url: str) -> None:
    delivery = Delivery.from_url(redis_url)
    busy = [item(f"x{i}", 0, 10) for i in range(4)]
    publish(delivery, "steal", {"busy": busy, "idle": []}, lease_ttl_ms=30_000)

    async def script(client: httpx.AsyncClient) -> str:
        return str((await client.get("/next")).json()["key"])

    assert with_api(redis_url, script, worker="idle") == "x3#0"  # from the tail: the head stays planned


def test_a_restarted_worker_hands_back_what_its_predecessor_held_with_reset(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "restart", {"w0": [item("a", 0, 10), item("b", 0, 10)]}, lease_ttl_ms=30_000)

    async def script(client: httpx.AsyncClient) -> list[Any]:
        for _ in range(2):
            await client.get("/next")  # the first process takes both, then dies
        released = (await client.post("/reset")).json()
        again = [(await client.get("/next")).json() for _ in range(2)]
        return [released, sorted(lease["key"] for lease in again), [lease["attempt"] for lease in again]]

    assert with_api(redis_url, script) == [{"released": 2, "dead_lettered": 0}, ["a#0", "b#0"], [1, 1]]


def test_shutdown_hands_back_the_leases_of_live_schedules_when_one_has_expired(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = publish_one(redis_url, "expiring")
    publish(delivery, "live", {"w0": [item("b", 0, 10)]}, lease_ttl_ms=30_000)

    async def script(client: httpx.AsyncClient) -> None:
        while (await client.get("/ready")).status_code != 200:  # a started server's takeover first
            await asyncio.sleep(0.01)
        for _ in range(2):
            await client.get("/next")
        redis_client.delete(*redis_client.keys("*expiring*"))  # its retention passed

    session = WorkerSession(Delivery.from_url(redis_url), Holdings(4), SessionSettings("w0"))

    async def run() -> None:
        async with serving(session, lifespan=True) as (client, _):  # shutdown runs when the block ends
            await script(client)

    asyncio.run(run())
    assert delivery.progress("live").queued == 1
    assert session.stats.released == 1


def test_a_long_poll_claims_nothing_once_the_server_is_stopping(
    redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = publish_one(redis_url, "late")
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(4), SessionSettings("w0"))

    async def run() -> int:
        async with serving(session, stopping=lambda: True) as (client, _):
            return (await client.get("/next", params={"wait_s": 1})).status_code

    assert asyncio.run(run()) == 204
    assert delivery.progress("late").queued == 1


def test_a_report_for_a_lease_another_worker_holds_is_refused_as_stale(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The pull API has no auth (loopback): a guessed token of another worker's lease must not land."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "forged", {"w0": [item("a", 0, 10)], "w1": [item("b", 0, 10)]}, lease_ttl_ms=30_000)
    (theirs,) = delivery.claim("forged", "w1", 1)

    async def script(client: httpx.AsyncClient) -> int:
        body = {"schedule_id": "forged", "key": theirs.key, "token": theirs.token, "output_tokens": 5}
        return (await client.post("/done", json={**body, "reward": 1.0})).status_code

    assert with_api(redis_url, script, worker="w0") == 409
    assert delivery.read_results("forged") == []


def _series(text: str) -> dict[str, float]:
    """``name{labels} value`` lines of a Prometheus exposition, comments left out."""
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_the_pull_api_serves_its_counters_live_for_prometheus(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Pull mode's counters were printed once, on exit, and nothing served them while it ran (the
    push mode's ``/metrics`` is on its health port, which pull mode refuses)."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "pull", {"w0": [item("a", 0, 10), item("b", 0, 20)]}, lease_ttl_ms=30_000)

    async def script(client: httpx.AsyncClient) -> tuple[httpx.Response, httpx.Response]:
        first = (await client.get("/next")).json()
        await client.get("/next")
        await client.post("/done", json=done_body(first, 11))
        return await client.get("/metrics"), await client.get("/health")

    scraped, health = with_api(redis_url, script)
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    series = _series(scraped.text)
    worker = '{worker_id="w0"}'
    assert series[f"rollout_sidecar_claimed_total{worker}"] == 2
    assert series[f"rollout_sidecar_accepted_total{worker}"] == 1
    assert series[f"rollout_sidecar_held{worker}"] == health.json()["held"] == 1
    assert series[f"rollout_sidecar_waiting{worker}"] == 0
    assert series[f"rollout_sidecar_generation_seconds_count{worker}"] == 1


def test_the_pull_api_refuses_a_request_naming_a_host_other_than_loopback_and_leases_nothing(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The pull API has no auth: a web page re-pointing its own name at 127.0.0.1 (DNS rebinding)
    could take work and report results as this worker. Its ``Host`` names the page: refused, 421."""
    publish_one(redis_url, "rebinding")

    async def script(client: httpx.AsyncClient) -> tuple[int, dict[str, Any], list[Any], int]:
        rebound = await client.get("/next", headers={"Host": "rebound.attacker.example:8765"})
        held = (await client.get("/leases")).json()["held"]
        loopback = await client.get("/health", headers={"Host": "127.0.0.1:8765"})
        return rebound.status_code, rebound.json(), held, loopback.status_code

    status, body, held, loopback = with_api(redis_url, script)
    assert (status, held, loopback) == (421, [], 200)
    assert body["error"].startswith("Host 'rebound.attacker.example:8765' is not a name of this server")
