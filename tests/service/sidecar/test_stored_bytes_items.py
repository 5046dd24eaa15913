"""An item whose stored bytes are not UTF-8 (another client's write, a truncated one) is failed by the
sidecar that claims it, with a reason naming its key and field, and dead-lettered after its attempts;
the items behind it are served. Held, it could never be: a pull worker's ``GET /next`` of it failed to
render after the sidecar had handed it out, and its lease was renewed, unreported, from then on."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import httpx
import pytest
import redis

from service.delivery.keys import schedule_keys
from service.delivery.outcomes import ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish, run_until
from tests.service.sidecar.pullclient import with_api

NOT_UTF8 = b"\xff\xfe"  # no UTF-8 text holds either byte
# field -> (the key holding it, the bytes replaced there, what the reason names)
DAMAGE = {
    "prompt_id": ("items", b'"prompt_id":"a"', b'"prompt_id":"a' + NOT_UTF8 + b'"'),
    "payload": ("prompts", b"prompt a", b"prompt " + NOT_UTF8),
}
NAMED = {"prompt_id": "prompt_id", "payload": "payload.prompt"}


def _damaged(redis_url: str, field: str, schedule_id: str = "pull") -> Delivery:
    """Schedule ``schedule_id`` of items a#0 then b#0 for w0, with ``field`` of a#0 rewritten as bytes."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, schedule_id, {"w0": [item("a", 0, 10), item("b", 0, 20)]}, lease_ttl_ms=30_000)
    raw = redis.Redis.from_url(redis_url)
    where, old, new = DAMAGE[field]
    key = getattr(schedule_keys(schedule_id), where)
    held = cast(dict[bytes, bytes], raw.hgetall(key))
    stored = {name: value for name, value in held.items() if old in value}
    assert len(stored) == 1, stored  # a#0's alone
    ((name, value),) = stored.items()
    raw.hset(key, name, value.replace(old, new))
    raw.close()
    return delivery


@pytest.mark.parametrize("field", sorted(DAMAGE))
def test_a_pull_worker_is_served_the_next_item_and_the_unreadable_one_is_dead_lettered_naming_its_field(
    field: str, redis_client: redis.Redis, redis_url: str
) -> None:
    delivery = _damaged(redis_url, field)

    async def script(client: httpx.AsyncClient) -> list[Any]:
        first, second = await client.get("/next"), await client.get("/next")
        return [first.status_code, first.json()["key"], second.status_code]

    assert with_api(redis_url, script) == [200, "b#0", 204]
    progress = delivery.progress("pull")
    assert (progress.running, progress.queued, progress.failed) == (1, 0, 1)
    (dead,) = progress.dead_letters
    assert dead.key == "a#0"
    assert f"'a#0' is not UTF-8 in field {NAMED[field]}" in dead.reason


def test_a_push_sidecar_runs_the_next_item_and_the_unreadable_one_is_dead_lettered_not_its_loop(
    redis_client: redis.Redis, redis_url: str, engine_url: str
) -> None:
    """On main the claim raised once the script had leased both: the main loop died (exit 70), and
    both items lay leased until their leases lapsed, to kill the next sidecar that claimed them."""
    delivery = _damaged(redis_url, "prompt_id", "push")
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(8, None), SessionSettings("w0"))
    settings = RunnerSettings(idle_poll_s=0.02, engine_wait_s=1.0)
    sidecar = Sidecar(session, EngineClient.open(EngineOptions(engine_url)), settings)
    stats = run_until(sidecar, lambda: delivery.progress("push").finished)
    assert stats.accepted == 1
    (dead,) = delivery.progress("push").dead_letters
    assert "'a#0' is not UTF-8 in field prompt_id" in dead.reason


class LostFail(Delivery):
    """Real Redis, but every ``fail`` is cut on the connection before it runs (Redis restarting, a
    timeout): what a claim does with the rest of its leases then."""

    def fail(self, lease: Lease, reason: str, now_ms: int | None = None) -> ReleaseOutcome:
        raise redis.ConnectionError("connection reset by peer")


class TimedOutFail(Delivery):
    """Real Redis, but every ``fail`` waits out the client's socket timeout (Redis paused)."""

    def fail(self, lease: Lease, reason: str, now_ms: int | None = None) -> ReleaseOutcome:
        raise redis.TimeoutError("Timeout reading from socket")


@pytest.mark.parametrize("cut", [LostFail, TimedOutFail], ids=["connection reset", "timed out"])
def test_a_failure_report_cut_by_redis_leaves_the_readable_items_of_the_claim_held(
    cut: type[Delivery], redis_client: redis.Redis, redis_url: str
) -> None:
    """The claim leased both items before it found a#0 unreadable: when its failure report raised, the
    claim raised with it and b#0, leased but held by no one, lay unserved until its lease lapsed (an
    attempt spent). a#0's report is kept instead, sent again at the next heartbeat."""
    _damaged(redis_url, "prompt_id")
    session = WorkerSession(cut.from_url(redis_url), Holdings(8, None), SessionSettings("w0"))
    held = asyncio.run(session.claim(2))
    assert [h.lease.key for h in held] == ["b#0"]
    assert Delivery.from_url(redis_url).progress("pull").running == 2  # a#0's report not through yet
    assert len(session.resends) == 1


def test_an_unreadable_item_failed_at_its_claim_is_logged_as_an_error_naming_its_key_and_field(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Its failure is the sidecar's decision, not the engine's: the log line is where an operator learns
    which item and field, before its attempts run out and it shows in the dead letters."""
    _damaged(redis_url, "prompt_id")
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(8, None), SessionSettings("w0"))
    with caplog.at_level(logging.ERROR, logger="service.sidecar"):
        held = asyncio.run(session.claim(2))
    assert [h.lease.key for h in held] == ["b#0"]
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "schedule pull: stored item 'a#0' is not UTF-8 in field prompt_id" in line


class CancelledFirst(Delivery):
    """Real Redis; the trainer cancels the schedule between the claim and the failure report."""

    def fail(self, lease: Lease, reason: str, now_ms: int | None = None) -> ReleaseOutcome:
        self.cancel(lease.schedule_id)
        return super().fail(lease, reason, now_ms)


@pytest.mark.parametrize(
    ("delivery", "ended"),
    [(Delivery, "failed"), (LostFail, ""), (CancelledFirst, "cancelled")],
    ids=["report taken", "report cut", "cancelled first"],
)
def test_an_unreadable_lease_failed_at_its_claim_is_counted_ended_once_so_taken_balances_ended(
    delivery: type[Delivery], ended: str, redis_client: redis.Redis, redis_url: str
) -> None:
    """Both leases were counted ``claimed``; a#0, failed at the claim, was counted nowhere, so every
    such lease left a sidecar's claimed + stolen ahead of what ended there for good. A report cut is
    kept, counted by the answer to its resend (``test_unreadable_resends.py``), not ``lost`` at once."""
    _damaged(redis_url, "prompt_id")
    session = WorkerSession(delivery.from_url(redis_url), Holdings(8, None), SessionSettings("w0"))
    held = asyncio.run(session.claim(2))
    assert [h.lease.key for h in held] == ["b#0"]
    counted = {name: getattr(session.stats, name) for name in ("failed", "lost", "stale", "cancelled")}
    assert session.stats.claimed == 2
    assert counted == {name: int(name == ended) for name in counted}
