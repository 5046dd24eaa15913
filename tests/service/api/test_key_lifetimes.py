"""Nothing a training run leaves in Redis outlives its documented life (``service/delivery/keys.py``).

An RL run calls the service for thousands of steps: every key a step creates must expire with its
retention, or be one of the few fleet-wide keys whose size is bounded by the fleet (one entry per
worker) or by a cap (the actuals stream and its dedupe set); and the indexes the sidecars and
reapers walk must not keep schedules that finished, were cancelled or expired.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import redis
from fastapi.testclient import TestClient

from service.delivery import Delivery, LeaseSettings, PublishedSchedule, keys
from service.delivery.reaper import reap_all
from service.learning.models import ModelService, Retrained
from tests.service.api_helpers import AppFactory, actual_report, batch_body
from tests.service.delivery.conftest import item
from tests.service.finished import RESULT

RETENTION_S = 600
MAX_ATTEMPTS = 2
# every key documented as living without a TTL; each is bounded by the fleet, by a cap or by pruning
FLEET_WIDE = {
    keys.active_index(),
    keys.lapse_index(),  # the reapers' index beside the active one (keys.py): a pass writes it, and whether
    # one passes during the test depends on the host's speed
    keys.announcing_index(),  # an entry per announce, dropped by a reaper 2 s on (announcing.py)
    keys.actuals_stream(),
    keys.actuals_seen(),
    keys.worker_profiles(),
    keys.learned_speeds(),
    keys.worker_seen(),  # with the two above: the workers named within the retention (test_worker_churn)
    keys.retrain_step(),
    keys.retrain_fence(),  # one counter
}


def _publish(client: TestClient, schedule_id: str, step: int) -> dict[str, set[str]]:
    """Plan and publish a step of 4 prompts x 2 on w0 and w1; returns each worker's planned keys."""
    body = batch_body(prompts=4, n=2, workers=2, schedule_id=schedule_id, step=step)
    response = client.post("/schedule", json=body)
    assert response.status_code == 200, response.text
    assigned = response.json()["assignments"].items()
    return {w: {f"{i['prompt_id']}#{i['sample_idx']}" for i in queue} for w, queue in assigned}


def _run_with_a_steal_and_a_dead_letter(
    delivery: Delivery, sid: str, planned: dict[str, set[str]]
) -> list[dict[str, Any]]:
    """w1 runs its own queue, then steals from w0; one of w0's items fails every attempt; the rest
    complete. Returns the actuals the workers would report."""
    reports = []
    doomed = delivery.claim(sid, "w0", 1)[0]
    for attempt in range(MAX_ATTEMPTS):
        delivery.fail(doomed, "engine error")
        if attempt + 1 < MAX_ATTEMPTS:
            (doomed,) = delivery.claim(sid, "w0", 1)  # a failed item is retried first
    stolen = False
    for worker in ("w1", "w0"):
        while leases := delivery.claim(sid, worker, 8) or delivery.steal(sid, worker, 8):
            stolen |= worker == "w1" and any(le.key in planned["w0"] for le in leases)
            delivery.complete_many(sid, [(le.key, le.token, RESULT) for le in leases], worker_id=worker)
            for le in leases:
                reports.append(actual_report(1, int(le.item.prompt_id[1:]), le.item.sample_idx, worker))
    assert stolen
    assert delivery.client.llen(delivery.keys(sid).dead) == 1
    return [{**r, "schedule_id": sid} for r in reports]


def _all_keys(client: redis.Redis) -> Iterator[str]:
    return client.scan_iter(keys.all_keys_pattern(), count=1000)


def _blocked_retrain(models: ModelService, release: threading.Event) -> Callable[..., Retrained]:
    """``models.retrain`` that waits for ``release`` first: the retrain lock is held meanwhile."""
    fit = models.retrain

    def retrain(**kwargs: Any) -> Retrained:
        assert release.wait(60)
        return fit(**kwargs)

    return retrain


def test_every_key_of_many_step_lives_expires_or_is_a_bounded_fleet_wide_key(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    client = make_client(retention_s=RETENTION_S, max_attempts=MAX_ATTEMPTS, retrain_every_steps=100)
    delivery = Delivery(redis_client)
    reports = _run_with_a_steal_and_a_dead_letter(delivery, "done", _publish(client, "done", step=1))
    _publish(client, "cancelled", step=2)
    delivery.claim("cancelled", "w0", 2)
    assert client.delete("/schedule/cancelled").status_code == 200
    _publish(client, "abandoned", step=3)  # its trainer died: nobody finishes or cancels it
    delivery.claim("abandoned", "w0", 1)
    for _ in range(2):  # the second is a retried batch: not stored again, so not in the dedupe set twice
        assert client.post("/actuals", json={"actuals": reports}).status_code == 200
    models = client.app.state.context.models  # type: ignore[attr-defined]
    release = threading.Event()
    models.retrain = _blocked_retrain(models, release)
    retrain = threading.Thread(target=lambda: client.post("/models/retrain"))
    retrain.start()
    try:
        while not redis_client.exists(keys.retrain_lock()):
            assert retrain.is_alive()
        seen = {key: redis_client.pttl(key) for key in _all_keys(redis_client)}
    finally:
        release.set()
        retrain.join(60)

    immortal = {key for key, ttl in seen.items() if ttl == -1}
    assert immortal <= FLEET_WIDE, immortal - FLEET_WIDE
    per_schedule = {key: ttl for key, ttl in seen.items() if key.startswith(f"{keys.DEFAULT_PREFIX}:{{")}
    assert all(0 < ttl <= RETENTION_S * 1000 for ttl in per_schedule.values()), per_schedule
    assert 0 < seen[keys.retrain_lock()] <= keys.RETRAIN_LOCK_TTL_S * 1000
    inbox_life_ms = (RETENTION_S + keys.INBOX_MARGIN_S) * 1000
    assert all(0 < seen[keys.inbox(w)] <= inbox_life_ms for w in ("w0", "w1"))
    done = delivery.keys("done")
    covered = {done.dead, done.calls, done.results, keys.actuals_seen(), keys.learned_speeds()}
    assert covered <= set(seen)  # the lives above did write what the bounds are checked on
    assert redis_client.zcard(keys.actuals_seen()) == redis_client.xlen(keys.actuals_stream()) == len(reports)
    assert redis_client.hlen(keys.worker_profiles()) == 2  # one entry per worker, however many steps
    assert redis_client.hlen(keys.learned_speeds()) <= 2
    assert redis_client.zcard(keys.worker_seen()) == 2
    # only the unsettled schedule stays indexed: finished, dead-lettered and cancelled ones are retired
    assert delivery.active_schedules() == ["abandoned"]
    assert delivery.schedules_for("w0") == delivery.schedules_for("w1") == ["abandoned"]


def test_an_expired_schedule_leaves_the_reapers_index_and_each_inbox_at_their_next_pass(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    """A schedule nobody finished expires whole; the reaper drops it from the active index on its next
    pass, and the next announce to each of its workers after its retention drops it from that inbox."""
    client = make_client(retention_s=RETENTION_S)
    delivery = Delivery(redis_client)
    _publish(client, "abandoned", step=1)
    published_ms = int(redis_client.hget(delivery.keys("abandoned").meta, "published_ms") or 0)
    redis_client.delete(*redis_client.scan_iter(delivery.keys("abandoned").pattern))  # its TTL passed

    reap_all(delivery)
    queues = {w: (item(f"{w}-0#0"),) for w in ("w0", "w1")}
    later = PublishedSchedule("later", queues, lease=LeaseSettings(retention_s=RETENTION_S))
    delivery.publish(later, now_ms=published_ms + (RETENTION_S + 1) * 1000)

    assert delivery.active_schedules() == ["later"]
    assert delivery.schedules_for("w0") == delivery.schedules_for("w1") == ["later"]
