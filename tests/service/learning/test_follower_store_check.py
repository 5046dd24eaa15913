"""The follower lists the model store at most once every ``RELOAD_EVERY_S``, not at every tick.

Its tick (every 0.25 s) listed the store each time (periodic50): four listings a second per replica,
on a network volume. A fake clock drives the ticks; the listings are counted on the store itself."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from predictors.store import ModelStore
from service.api.learning_schemas import ActualReport
from service.learning.actuals import ActualsLog
from service.learning.follower import Follower
from service.learning.models import RELOAD_EVERY_S, ModelService
from tests.service.api_helpers import actual_history


class _Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _service(redis_client: redis.Redis, store: Path) -> ModelService:
    return ModelService(ModelStore(store), ActualsLog(redis_client, 10_000))


def _listings(models: ModelService, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each listing of ``models``' store, appended as it happens."""
    listed: list[int] = []
    versions = models.store.versions

    def counted() -> list[int]:
        listed.append(1)
        return versions()

    monkeypatch.setattr(models.store, "versions", counted)
    return listed


def test_the_followers_ticks_list_the_store_once_a_second_not_at_each_tick(
    redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serving = _service(redis_client, tmp_path / "models")
    serving.start()
    clock = _Clock()
    follower = Follower(serving, every_s=0.25, clock=clock)  # never started: ticks run here
    listed = _listings(serving, monkeypatch)
    for _ in range(8):  # two seconds of ticks
        follower.follow_once()
        clock.now += 0.25
    assert len(listed) == 2  # at 0 s and at 1 s, not 8


def test_a_version_stored_after_a_listing_is_loaded_at_the_first_tick_a_second_on(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    serving = _service(redis_client, tmp_path / "models")
    serving.start()
    clock = _Clock()
    follower = Follower(serving, every_s=0.25, clock=clock)
    follower.follow_once()  # lists the store: nothing stored yet
    trainer = _service(redis_client, tmp_path / "models")
    trainer.actuals.append([ActualReport.model_validate(r) for r in actual_history(steps=2)])
    trainer.start()
    assert trainer.retrain().version == 1
    clock.now += RELOAD_EVERY_S - 0.25
    follower.follow_once()
    assert serving.version == "fallback"  # not listed again yet
    clock.now += 0.25
    follower.follow_once()
    assert serving.version == "v1"  # within RELOAD_EVERY_S plus a follow period of its storing
