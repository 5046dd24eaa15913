"""Token-id prompts end to end: ``POST /schedule`` on the embedded valkey, a sidecar (push mode, in
process) sending them to a real engine-sim server, and a pull worker handed them by the pull API.

Re-tokenising decoded text does not give the same ids back (a chat template, special tokens), so the
engine must receive exactly the trainer's ids, which the recorded requests show here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import redis
from fastapi.testclient import TestClient

from service.delivery.protocol import Delivery
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import cluster, run_until
from tests.service.sidecar.pullclient import with_api

CHAT_IDS = [151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30, 151645, 198, 151644, 77091, 198]
PLAIN_IDS = [0, 1, 2, 2**31 - 1]


def _body(schedule_id: str) -> dict[str, Any]:
    """Two prompts as ids and one as text, two samples each, all for the one worker w0."""
    items = [
        {"prompt_id": "chat", "prompt_tokens": len(CHAT_IDS), "prompt_token_ids": CHAT_IDS},
        {"prompt_id": "plain", "prompt_tokens": len(PLAIN_IDS), "prompt_token_ids": PLAIN_IDS},
        {"prompt_id": "text", "prompt_tokens": 3, "prompt": "two plus two"},
    ]
    return {
        "batch": {"items": [{**one, "n": 2, "max_new_tokens": 64} for one in items]},
        "inventory": {"workers": [{"worker_id": "w0", "device": "H100"}]},
        "policy": "lpt",
        "schedule_id": schedule_id,
    }


def _sidecar(redis_url: str, engine_url: str, sent: list[dict[str, Any]]) -> Sidecar:
    """A push sidecar for w0 whose engine requests are recorded in ``sent`` as they leave."""

    async def record(request: httpx.Request) -> None:
        if request.url.path.startswith("/v1/") and request.method == "POST":
            sent.append(json.loads(request.content))

    http = httpx.AsyncClient(
        base_url=engine_url, timeout=httpx.Timeout(30.0), event_hooks={"request": [record]}
    )
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(8), SessionSettings("w0"))
    return Sidecar(session, EngineClient(EngineOptions(engine_url), http), RunnerSettings(idle_poll_s=0.02))


def test_the_engine_receives_exactly_the_trainers_token_ids_for_every_sample(
    client: TestClient, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    assert client.post("/schedule", json=_body("ids-e2e")).status_code == 200
    delivery = Delivery.from_url(redis_url)
    sent: list[dict[str, Any]] = []
    with cluster(tmp_path) as procs:
        engine = procs.engine_threads({"engine": 0.001})["engine"]
        stats = run_until(_sidecar(redis_url, engine, sent), lambda: delivery.progress("ids-e2e").finished)
    assert stats.accepted == 6
    prompts = {(body["rollout"]["prompt_id"], body["rollout"]["sample_idx"]): body["prompt"] for body in sent}
    assert prompts == {
        **{("chat", s): CHAT_IDS for s in range(2)},
        **{("plain", s): PLAIN_IDS for s in range(2)},
        **{("text", s): "two plus two" for s in range(2)},
    }
    results = delivery.read_results("ids-e2e")
    assert len(results) == 6
    # the engine counted the ids it got (usage.prompt_tokens), and the count was the trainer's
    assert not any("engine_prompt_tokens" in r.result.extra for r in results)


def test_the_pull_api_hands_a_worker_the_token_ids_to_generate_from(
    client: TestClient, redis_client: redis.Redis, redis_url: str
) -> None:
    assert client.post("/schedule", json=_body("ids-pull")).status_code == 200

    async def script(pull: httpx.AsyncClient) -> dict[str, Any]:
        handed = {}
        while (answer := await pull.get("/next")).status_code == 200:
            lease = answer.json()
            handed[lease["key"]] = lease["item"]
        return handed

    handed = with_api(redis_url, script, slots=8)
    assert {key: one["payload"]["prompt"] for key, one in handed.items()} == {
        "chat#0": CHAT_IDS,
        "chat#1": CHAT_IDS,
        "plain#0": PLAIN_IDS,
        "plain#1": PLAIN_IDS,
        "text#0": "two plus two",
        "text#1": "two plus two",
    }
    assert handed["chat#1"]["prompt_tokens"] == len(CHAT_IDS)
