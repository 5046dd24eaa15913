"""Where the caller's deadline passes, and what its 504 says of it (review47a): a deadline that passes
while the step is predicted is refused there, between the trajectories it builds, not at the budget's
check after the whole prediction (deadline47's late 504s: 4,096 trajectories under a 300 ms deadline);
and a 504 refused after the plan was made (at the publish check, a dry run's too) does not say nothing
was planned. The app runs on a clock of the test's (``slow_upload``), moved past the deadline at the
point tested, so no assertion depends on how fast the host is."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi import FastAPI

from predictors import cutoff
from scheduler.types import Trajectory
from service.context import Context
from service.pipeline import answer, deadline, stages
from service.pipeline.deadline import Deadline
from tests.service.api.badinput import redis_snapshot
from tests.service.api.slow_upload import STEP, Clock, SlowClient, slow_clients
from tests.service.api_helpers import batch_body

HEADER = deadline.HEADER
DEADLINE = {HEADER: "60000"}  # 60 s of the app's clock, which stands still but where a test moves it
PAST_IT_S = 100.0


@pytest.fixture
def slow_client(redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> Iterator[SlowClient]:
    with slow_clients(redis_url, tmp_path) as factory:
        yield factory


def _deadline_moved(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """What moves the app's clock past the deadline of the request under way (read from ``deadline.of``)."""
    given: list[Deadline] = []
    of = deadline.of

    def read_back(*args: Any, **kwargs: Any) -> Deadline:
        given.append(of(*args, **kwargs))
        return given[-1]

    def past_it() -> None:
        clock = given[-1].clock
        assert isinstance(clock, Clock)
        clock.now += PAST_IT_S

    monkeypatch.setattr(deadline, "of", read_back)
    return past_it


def _context(app: FastAPI) -> Context:
    ctx: Context = app.state.context
    return ctx


@pytest.mark.parametrize("publish", [True, False], ids=["published", "dry-run"])
def test_a_504_refused_after_the_plan_was_made_says_it_was_dropped_not_that_none_was_made(
    slow_client: SlowClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, publish: bool
) -> None:
    client, _ = slow_client(0.0)
    past_it, respond = _deadline_moved(monkeypatch), answer.respond  # what stages calls by its own name

    def planned_then_late(*args: Any, **kwargs: Any) -> Any:
        past_it()  # the plan is made: the deadline passes before the publish check
        return respond(*args, **kwargs)

    monkeypatch.setattr(stages, "respond", planned_then_late)
    before = redis_snapshot(redis_client)
    body = batch_body(schedule_id="late", step=STEP, publish=publish)
    late = client.post("/schedule", json=body, headers=DEADLINE)
    assert (late.status_code, late.json()["field"]) == (504, HEADER)
    detail = late.json()["detail"]
    assert "nothing was planned" not in detail
    assert "no plan is answered, none was published" in detail
    assert "a plan made before it is dropped" in detail
    assert redis_snapshot(redis_client) == before


def test_a_deadline_that_passes_while_the_model_predicts_is_refused_as_predicted(
    slow_client: SlowClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, app = slow_client(0.0)
    past_it = _deadline_moved(monkeypatch)
    models = _context(app).models
    predict = models.predict

    def slow_model(*args: Any, **kwargs: Any) -> Any:
        answered = predict(*args, **kwargs)
        past_it()
        return answered

    monkeypatch.setattr(models, "predict", slow_model)
    before = redis_snapshot(redis_client)
    late = client.post("/schedule", json=batch_body(schedule_id="late", step=STEP), headers=DEADLINE)
    assert (late.status_code, late.json()["field"]) == (504, HEADER)
    assert "passed before it was planned (while it was predicted)" in late.json()["detail"]
    assert redis_snapshot(redis_client) == before


def test_a_deadline_that_passes_while_the_model_scores_its_rows_cuts_it_at_its_next_chunk(
    slow_client: SlowClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model checks between its row chunks (``predictors.cutoff``, deadline48): a stand-in model
    whose first chunk outlives the deadline scores no second one."""
    client, app = slow_client(0.0)
    past_it = _deadline_moved(monkeypatch)
    models = _context(app).models
    predict, scored = models.predict, []

    def first_chunk_slow(*args: Any, **kwargs: Any) -> Any:
        past_it()  # the first chunk is scored past the deadline
        cutoff.check()  # where the model checks before its next chunk
        scored.append(1)
        return predict(*args, **kwargs)

    monkeypatch.setattr(models, "predict", first_chunk_slow)
    before = redis_snapshot(redis_client)
    late = client.post("/schedule", json=batch_body(schedule_id="late", step=STEP), headers=DEADLINE)
    assert (late.status_code, late.json()["field"]) == (504, HEADER)
    assert "passed before it was planned (while it was predicted)" in late.json()["detail"]
    assert not scored
    assert redis_snapshot(redis_client) == before


def test_without_a_deadline_the_model_scores_its_rows_in_one_call_a_booster(
    slow_client: SlowClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Row chunks cost LightGBM CPU: only a request with a deadline to check has them."""
    client, app = slow_client(0.0)
    models = _context(app).models
    predict, rows_a_call = models.predict, []

    def chunking_read(*args: Any, **kwargs: Any) -> Any:
        rows_a_call.append(cutoff.chunk_rows(50_000))
        return predict(*args, **kwargs)

    monkeypatch.setattr(models, "predict", chunking_read)
    assert client.post("/schedule", json=batch_body(step=STEP)).status_code == 200
    assert client.post("/schedule", json=batch_body(step=STEP), headers=DEADLINE).status_code == 200
    assert rows_a_call == [50_000, cutoff.CHUNK_ROWS]


def test_a_deadline_that_passes_while_the_trajectories_are_built_stops_the_build_at_the_next_check(
    slow_client: SlowClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2,048 trajectories: the clock passes the deadline as the first is built, so the build stops
    at the check after ``PREDICT_CHECK_EVERY`` of them, not after all of them."""
    client, _ = slow_client(0.0)
    past_it, trajectory = _deadline_moved(monkeypatch), Trajectory
    built: list[int] = []

    def slowly_built(*args: Any, **kwargs: Any) -> Any:
        if not built:
            past_it()
        built.append(1)
        return trajectory(*args, **kwargs)

    monkeypatch.setattr(stages, "Trajectory", slowly_built)
    before = redis_snapshot(redis_client)
    body = batch_body(prompts=64, n=32, schedule_id="late", step=STEP)
    late = client.post("/schedule", json=body, headers=DEADLINE)
    assert (late.status_code, late.json()["field"]) == (504, HEADER)
    assert "(while it was predicted)" in late.json()["detail"]
    assert len(built) == stages.PREDICT_CHECK_EVERY
    assert redis_snapshot(redis_client) == before
