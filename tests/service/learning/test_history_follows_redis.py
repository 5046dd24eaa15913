"""The history a replica predicts and retrains from is what Redis holds, also after Redis lost it.

Redis is the source of truth for the actuals (``service.learning.models``). A replica used to fold only the
entries after the last one it had read, so once Redis lost the stream (a restart without its AOF, a
flush, a failover to a replica behind) it kept predicting from, retraining on and counting in
``GET /models`` ``history_rows`` rows Redis no longer held, while a replica started afterwards held
none: two replicas of one service planned the same batch differently.
"""

from __future__ import annotations

import redis
from fastapi.testclient import TestClient

from service.delivery import keys
from tests.service.api_helpers import AppFactory, actual_history, actual_report


def _rows(client: TestClient) -> int:
    answer = client.get("/models")
    assert answer.status_code == 200, answer.text
    rows: int = answer.json()["history_rows"]
    return rows


def test_history_rows_say_what_redis_holds_after_it_lost_the_stream(
    client: TestClient, redis_client: redis.Redis
) -> None:
    assert client.post("/actuals", json={"actuals": actual_history(steps=2)}).status_code == 200
    held = redis_client.xlen(keys.actuals_stream())
    assert _rows(client) == held > 0
    redis_client.flushdb()  # Redis restarted without its data
    assert _rows(client) == 0
    later = [actual_report(5, p, i) for p in range(3) for i in range(2)]
    assert client.post("/actuals", json={"actuals": later}).status_code == 200
    assert _rows(client) == redis_client.xlen(keys.actuals_stream()) == len(later)


def test_a_retrain_after_redis_lost_the_stream_fits_on_what_it_holds(
    client: TestClient, redis_client: redis.Redis
) -> None:
    assert client.post("/actuals", json={"actuals": actual_history(steps=2)}).status_code == 200
    assert client.post("/models/retrain").status_code == 200
    redis_client.delete(keys.actuals_stream())  # lost, then refilled by later steps
    assert client.post("/actuals", json={"actuals": actual_history(steps=1)}).status_code == 200
    retrained = client.post("/models/retrain")
    assert retrained.status_code == 200, retrained.text
    assert retrained.json()["history_rows"] == redis_client.xlen(keys.actuals_stream())


def test_a_replica_that_followed_the_stream_holds_what_a_fresh_one_loads(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    old = make_client()
    assert old.post("/actuals", json={"actuals": actual_history(steps=2)}).status_code == 200
    assert _rows(old) > 0
    redis_client.flushdb()
    assert old.post("/actuals", json={"actuals": actual_history(steps=1)}).status_code == 200
    fresh = make_client()
    assert _rows(old) == _rows(fresh)
