"""Step 2 run through the API on the real embedded valkey: published as a schedule, leased, completed,
reported (naming its schedule or not), a second part published beside it, and the steps a retrain then
fits. The retrain tests of a step's end (settled, reported, in parts, one snapshot, the planning entry)
share it, so a change to how a step is staged reaches them all at once, rather than through one test
module's private names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import redis
from fastapi.testclient import TestClient

from service.delivery import CompletionOutcome, Delivery, Lease, TrajectoryResult
from tests.service.api_helpers import actual_history, actual_report, batch_body

DONE = TrajectoryResult(output_tokens=40, output="ok", wall_time_s=0.1)


def fitted_steps(tmp_path: Path, version: str) -> list[int]:
    """The steps model ``version`` was fitted on, from its metadata in the store at ``tmp_path``."""
    meta = json.loads((tmp_path / "models" / f"v{int(version[1:]):06d}" / "metadata.json").read_text())
    steps: list[int] = meta["steps"]
    return steps


def publish_step_2(client: TestClient, redis_client: redis.Redis, schedule_id: str) -> list[Lease]:
    """Steps 0 and 1 reported (no schedule), step 2 published as ``schedule_id`` (8 prompts x 4 on
    two workers) and all 32 of its trajectories leased; the leases."""
    assert client.post("/actuals", json={"actuals": actual_history(steps=2)}).status_code == 200
    body = batch_body(step=2, schedule_id=schedule_id)
    assert client.post("/schedule", json=body).status_code == 200
    delivery = Delivery(redis_client)
    leases = [*delivery.claim(schedule_id, "w0", 64), *delivery.claim(schedule_id, "w1", 64)]
    assert len(leases) == 32
    return leases


def finish(redis_client: redis.Redis, leases: list[Lease]) -> None:
    """Each of ``leases`` completed: its schedule settles once all of them are."""
    delivery = Delivery(redis_client)
    for lease in leases:
        assert delivery.complete(lease, DONE) is CompletionOutcome.ACCEPTED


def report(client: TestClient, leases: list[Lease], schedule_id: str | None, partial: bool = False) -> None:
    """Each of ``leases``' trajectories reported to ``/actuals``, naming ``schedule_id`` (``None``: no
    schedule, as a step run outside the delivery reports), ``partial`` if asked."""
    named = {} if schedule_id is None else {"schedule_id": schedule_id}
    reports = [actual_report(2, int(le.item.prompt_id[1:]), le.item.sample_idx) | named for le in leases]
    body = {"actuals": reports} | ({"partial": True} if partial else {})
    assert client.post("/actuals", json=body).status_code == 200


def ran_and_reported(client: TestClient, redis_client: redis.Redis, schedule_id: str) -> None:
    """Step 2 published as ``schedule_id``, each of its trajectories done and reported naming it."""
    leases = publish_step_2(client, redis_client, schedule_id)
    finish(redis_client, leases)
    report(client, leases, schedule_id)


def prompts_from(first: int, count: int) -> dict[str, Any]:
    """A batch of ``count`` prompts x 4 numbered from ``first`` (step 2's second part)."""
    items = batch_body(prompts=first + count)["batch"]["items"][first:]
    return {"items": items}


def publish_second_part(client: TestClient) -> None:
    """Step 2's second part published as ``step-2b``: prompts 8 to 11, x 4 (none of it leased)."""
    body = batch_body(prompts=4, step=2, schedule_id="step-2b") | {"batch": prompts_from(8, 4)}
    assert client.post("/schedule", json=body).status_code == 200


def retrained_steps(client: TestClient, tmp_path: Path) -> list[int]:
    """The steps a retrain asked for now fits: what the tests of a step's end assert on."""
    response = client.post("/models/retrain")
    assert response.status_code == 200, response.text
    return fitted_steps(tmp_path, response.json()["version"])
