"""A retrain whose lock another replica took while its version was being stored takes the version back.

The fence before the store passed; the lock lapsed between it and the rename (a GC pause, a slow
volume), and another replica took it. The version renamed in carries a fencing token lower than the
other replica's, and the fence run again once it is in place removes it (``service.learning.models``):
left, it was a version no replica serves, numbered before the other replica's, and ``/models`` listed it.
Real Redis; the lock is taken by writing another holder's token, as another replica's ``SET NX`` does
once the lock's key has expired."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from predictors.store import ModelStore
from service.app import create_app
from service.settings import Settings
from tests.service.api_helpers import actual_history

LOCK = "rs:retrain:lock"


def test_a_version_stored_after_the_lock_went_to_another_replica_is_taken_back(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    save = ModelStore.save

    def lock_taken_then_saved(store: ModelStore, *args: Any, **kwargs: Any) -> int:
        redis_client.set(LOCK, "another-replica")  # past the first fence: the rename comes next
        return save(store, *args, **kwargs)

    with TestClient(create_app(live_settings)) as client:
        assert client.post("/actuals", json={"actuals": actual_history(steps=3)}).status_code == 200
        monkeypatch.setattr(ModelStore, "save", lock_taken_then_saved)
        answer = client.post("/models/retrain")
        assert answer.status_code == 409, answer.text
        assert "retrain lock lapsed" in answer.json()["detail"]
        assert ModelStore(live_settings.model_dir).versions() == []
        assert client.get("/models").json()["stored_versions"] == []
    assert redis_client.get(LOCK) == "another-replica"  # not released by this replica: not its own
