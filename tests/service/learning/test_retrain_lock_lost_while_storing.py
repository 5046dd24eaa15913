"""A version a retrain stores is fenced by its lock: taken back where another replica took the lock.

The fence before the store passed; the lock lapsed between it and the rename (a GC pause, a slow
volume), and another replica took it. The version renamed in carries a fencing token lower than the
other replica's, and the fence run again once it is in place removes it (``service.learning.models``):
left, it was a version no replica serves, numbered before the other replica's, and ``/models`` listed it.
A version renamed in with a lower token than one stored before it is passed over by every reader.
Real Redis; the lock is taken by writing another holder's token, as another replica's ``SET NX`` does
once the lock's key has expired."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from predictors.model import fit
from predictors.store import ModelStore
from service.app import create_app
from service.delivery import keys
from service.settings import Settings
from tests.predictors.helpers import FAST, drifting_trace
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


def test_a_stale_fit_stored_after_a_retrains_version_is_passed_over_by_its_fencing_token(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    """The retrain's version carries the token of the lock it was fitted under; a replica whose lock
    lapsed (a lower token) and that renames its version in later is not listed, so no replica serves it."""
    with TestClient(create_app(live_settings)) as client:
        assert client.post("/actuals", json={"actuals": actual_history(steps=3)}).status_code == 200
        assert client.post("/models/retrain").json()["version"] == "v1"
        token = int(redis_client.get(keys.retrain_fence(keys.DEFAULT_PREFIX)))  # type: ignore[arg-type]
        stale = ModelStore(live_settings.model_dir).save(fit(drifting_trace(steps=2), FAST), token - 1)
        assert stale == 2
        assert client.get("/models").json()["stored_versions"] == ["v1"]
