"""``POST /schedule`` under concurrent requests, on one replica and on two sharing one Redis: a
schedule id is published once and every request for it answers one plan; a request cancelled
mid-plan, a DELETE racing the publish, a refusal while the pool is full and two replicas storing
the same actuals each leave one consistent state. Races are driven by gates and barriers that the
requests' threads meet, so each test plays the interleaving it names."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import httpx
import pytest
import redis

from service.delivery import keys
from service.delivery.publisher import publish_plan
from service.pipeline import publish, stages
from service.settings import Settings
from tests.service.api.badinput import redis_snapshot
from tests.service.api.replicas import WAIT_S, Gate, context, first, replicas, until
from tests.service.api_helpers import actual_history, batch_body, with_settings


def _plan_of(answer: dict[str, Any]) -> str:
    """An answer without what belongs to the request that got it (its timings, the replay mark)."""
    return json.dumps({k: v for k, v in answer.items() if k not in ("timings", "replayed")}, sort_keys=True)


def test_two_replicas_planning_one_schedule_id_at_once_publish_it_once_and_answer_one_plan(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both requests pass the early check (nothing stored yet) and plan, on other devices, so other
    plans; then both publish: one stores the step, the other answers the winner's plan, replayed."""
    both_planned = threading.Barrier(2, timeout=WAIT_S)
    monkeypatch.setattr(publish, "publish_plan", first(both_planned.wait, publish_plan))
    bodies = [batch_body(schedule_id="twin"), batch_body(schedule_id="twin")]
    bodies[1]["inventory"]["workers"][0]["device"] = "A100-80GB"

    async def run() -> list[httpx.Response]:
        async with replicas(live_settings, 2) as pair:
            posts = [replica.post("/schedule", json=body) for replica, body in zip(pair, bodies, strict=True)]
            return list(await asyncio.gather(*posts))

    answers = asyncio.run(run())
    assert [a.status_code for a in answers] == [200, 200]
    assert sorted(a.json()["replayed"] for a in answers) == [False, True]
    assert len({_plan_of(a.json()) for a in answers}) == 1
    assert [a.headers.get("idempotent-replayed") for a in answers].count("true") == 1
    assert int(redis_client.hget(keys.schedule_keys("twin").meta, "total") or 0) == 32  # stored once


def test_a_step_whose_request_is_cancelled_mid_plan_is_published_frees_its_slot_and_a_resend_replays_it(
    live_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler cancelled while its plan runs (a server giving up on a request): the planning thread
    cannot be stopped, so the step is published whole, its plan slot and thread come back, and the
    trainer's resend under the same id is answered that plan, replayed."""
    settings = with_settings(live_settings, max_concurrent_plans=1, plan_queue_timeout_s=5)
    predicting = Gate()
    monkeypatch.setattr(stages, "predict", predicting.before(stages.predict))

    async def run() -> None:
        async with replicas(settings) as [http]:
            ctx = context(http)
            given_up = asyncio.create_task(http.post("/schedule", json=batch_body(schedule_id="gone")))
            await until(lambda: predicting.reached == 1)
            given_up.cancel()
            with pytest.raises(asyncio.CancelledError):
                await given_up
            finished = threading.Event()  # the step's last act on its thread: counting it for a retrain
            monkeypatch.setattr(ctx.retrainer, "after_step", first(finished.set, ctx.retrainer.after_step))
            predicting.open()
            await until(finished.is_set)
            resend = await http.post("/schedule", json=batch_body(schedule_id="gone"))
            assert (resend.status_code, resend.json()["replayed"]) == (200, True)
            assert (await http.get("/schedule/gone")).json()["total"] == 32
            again = await http.post("/schedule", json=batch_body(schedule_id="gone"))
            assert _plan_of(again.json()) == _plan_of(resend.json())
            other = await http.post("/schedule", json=batch_body())  # the one slot is free (else 503)
            assert (other.status_code, other.json()["replayed"]) == (200, False)

    asyncio.run(run())


def test_a_delete_landing_between_the_publish_and_its_announce_leaves_the_step_cancelled_and_unannounced(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step is stored, the trainer's DELETE cancels it before the publish announces it: the
    publish still answers (the step was out), and its announce does not put the cancelled step back
    in front of the workers."""

    async def run() -> tuple[httpx.Response, httpx.Response]:
        async with replicas(live_settings) as [http]:
            delivery = context(http).delivery
            announcing = Gate()
            monkeypatch.setattr(delivery, "_announce", announcing.before(delivery._announce))
            step = asyncio.create_task(http.post("/schedule", json=batch_body(schedule_id="late")))
            await until(lambda: announcing.reached == 1)
            cancelled = await http.delete("/schedule/late")
            announcing.open()
            return await step, cancelled

    answer, cancelled = asyncio.run(run())
    assert (answer.status_code, answer.json()["replayed"]) == (200, False)
    assert (cancelled.status_code, cancelled.json()["queued"]) == (200, 32)
    assert redis_client.zscore("rs:active", "late") is None
    assert all(redis_client.zscore(f"rs:inbox:{{{w}}}", "late") is None for w in ("w0", "w1"))


def test_a_step_refused_while_every_plan_slot_is_busy_is_a_503_problem_and_writes_nothing(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    settings = with_settings(live_settings, max_concurrent_plans=1, plan_queue_timeout_s=0.2)

    async def run() -> tuple[httpx.Response, object, object]:
        async with replicas(settings) as [http]:
            assert (await http.post("/schedule", json=batch_body(schedule_id="before"))).status_code == 200
            before = redis_snapshot(redis_client)
            with context(http).plan_slots.hold():  # another request is planning
                refused = await http.post("/schedule", json=batch_body(schedule_id="refused", step=2))
            return refused, before, redis_snapshot(redis_client)

    refused, before, after = asyncio.run(run())
    assert refused.status_code == 503
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["type"].endswith("/unavailable")
    assert after == before


def test_two_replicas_storing_the_same_actuals_at_once_store_and_learn_them_once(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retried batch lands on two replicas at the same moment: each report is stored once, each
    replica's history holds it once, and the accepted counts of the two answers add up to the batch."""
    reports = actual_history(steps=1)
    both_checked = threading.Barrier(2, timeout=WAIT_S)

    async def run() -> tuple[list[httpx.Response], list[int]]:
        async with replicas(live_settings, 2) as pair:
            for replica in pair:
                log = context(replica).actuals
                monkeypatch.setattr(log, "append", first(both_checked.wait, log.append))
            body = {"actuals": reports}
            answers = await asyncio.gather(*(r.post("/actuals", json=body) for r in pair))
            rows = [(await r.get("/models")).json()["history_rows"] for r in pair]
            return list(answers), rows

    answers, rows = asyncio.run(run())
    assert [a.status_code for a in answers] == [200, 200]
    assert sum(a.json()["accepted"] for a in answers) == len(reports)
    assert sum(a.json()["repeated"] for a in answers) == len(reports)
    assert redis_client.xlen("rs:actuals") == len(reports)
    assert rows == [len(reports), len(reports)]


def test_a_delete_landing_while_its_step_is_still_planned_keeps_that_step_from_being_published(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trainer restarted and gave up on the step it had in flight: its DELETE, on another replica,
    finds it not published but planning (its mark, ``P:planning``) and withdraws it (202
    ``withdrawn``; it was a 404), and that request, once planned, must not publish a step its
    trainer cancelled, to occupy the fleet before the next one (docs/api.md, DELETE). It answers 409
    naming ``schedule_id`` and writes no schedule; so does a later retry, before it plans."""
    predicting = Gate()
    monkeypatch.setattr(stages, "predict", predicting.before(stages.predict))

    async def run() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with replicas(live_settings, 2) as [old, new]:
            step = asyncio.create_task(old.post("/schedule", json=batch_body(schedule_id="abandoned")))
            await until(lambda: predicting.reached == 1)
            cancelled = await new.delete("/schedule/abandoned")  # the restarted trainer, another replica
            predicting.open()
            refused = await step
            retry = await new.post("/schedule", json=batch_body(schedule_id="abandoned"))
            assert predicting.reached == 1  # the retry was refused before it predicted and planned
            return cancelled, refused, retry

    cancelled, answer, retry = asyncio.run(run())
    assert (cancelled.status_code, cancelled.json()["status"]) == (202, "withdrawn")
    for refused in (answer, retry):
        assert (refused.status_code, refused.json()["field"]) == (409, "schedule_id")
        assert "cancelled" in refused.json()["detail"]
    withdrawn = keys.schedule_keys("abandoned")
    assert redis_client.hget(withdrawn.meta, "total") is None  # nothing published
    assert 0 < redis_client.pttl(withdrawn.withdrawn) <= live_settings.retention_s * 1000  # expires
    assert redis_client.zscore("rs:active", "abandoned") is None
    assert all(redis_client.zscore(f"rs:inbox:{{{w}}}", "abandoned") is None for w in ("w0", "w1"))


def test_a_retrain_swapping_the_model_while_a_step_predicts_leaves_its_answer_naming_the_model_it_used(
    live_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step has read the model it predicts with (none yet: the fallbacks) and is folding the
    history when new actuals are stored and a retrain swaps v1 in: the step's lengths are the
    fallbacks', and its ``model_version`` says so (it named v1, the version serving once it was done:
    an answer, stored for its retries too, whose lengths no v1 made). Every report is stored, and
    the next step reads v1."""

    async def run() -> tuple[httpx.Response, httpx.Response, httpx.Response, httpx.Response]:
        async with replicas(live_settings) as [http]:
            assert (await http.post("/actuals", json={"actuals": actual_history(steps=2)})).status_code == 200
            models = context(http).models
            await until(lambda: models.warmer is None or not models.warmer.is_alive())  # it folds too
            history = models.predictor.history
            folding = Gate()
            monkeypatch.setattr(history, "stats_before", folding.before(history.stats_before))
            step = asyncio.create_task(http.post("/schedule", json=batch_body(step=3, schedule_id="s3")))
            await until(lambda: folding.reached == 1)
            newer = [r for r in actual_history(steps=3) if r["step"] == 2]
            stored = await http.post("/actuals", json={"actuals": newer})
            retrained = await http.post("/models/retrain")
            folding.open()
            answer = await step
            after = await http.post("/schedule", json=batch_body(step=4, publish=False))
            return stored, retrained, answer, after

    stored, retrained, answer, after = asyncio.run(run())
    assert (stored.status_code, stored.json()["accepted"]) == (200, 32)
    assert (retrained.status_code, retrained.json()["version"]) == (200, "v1")
    assert (answer.status_code, answer.json()["model_version"]) == (200, "fallback")
    assert "lightgbm" not in answer.json()["prediction_sources"]  # the fallbacks made its lengths
    assert after.json()["model_version"] == "v1"
    assert after.json()["prediction_sources"].get("lightgbm", 0) > 0
