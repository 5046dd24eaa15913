"""A retrain on a replica that planned nothing judges the history's last step from one snapshot of
the step reports and the history, and a service built without the delivery's keys never takes a
named last step for over: both leave a step in flight out of the fit, on the real embedded valkey."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from predictors.history import History
from predictors.store import ModelStore
from predictors.tracetable import Trace
from service.learning.models import ModelService
from service.learning.step_over import LastStep, StepReports
from tests.service.api_helpers import AppFactory, actual_report
from tests.service.learning.step_two import (
    finish,
    publish_step_2,
    report,
    retrained_steps,
)


def test_a_step_s_first_actuals_folded_during_a_retrain_do_not_get_the_step_in_flight_fitted(
    make_client: AppFactory, redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step 2 half run and reported; a retrain asked of a replica that planned nothing reads the
    step reports, and step 3's first actuals land on that replica (a ``POST /actuals`` folding
    them, which it can wherever the sync lock is free) before it takes the history. Read apart, the
    history's newest step (3) was not the reports' (2), and step 2, in flight, was fitted whole."""
    planner, other = make_client(), make_client()
    leases = publish_step_2(planner, redis_client, "step-2")
    finish(redis_client, leases[:16])
    report(planner, leases[:16], "step-2")
    models: ModelService = other.app.state.context.models  # type: ignore[attr-defined]
    landed: list[bool] = []
    read_reports, read_history = StepReports.last, History.held

    def reports_then_next_step(self: StepReports) -> LastStep:
        last = read_reports(self)
        if not landed:
            landed.append(True)
            step_3 = [actual_report(3, p, 0) | {"schedule_id": "step-3"} for p in range(2)]
            assert planner.post("/actuals", json={"actuals": step_3}).status_code == 200
        return last

    def fold_where_free() -> None:  # on its own thread, as the ``POST /actuals`` fold runs
        if models._sync_lock.acquire(blocking=False):  # the fold gets in where it can
            models._sync_lock.release()
            models.sync()

    def history_after_the_fold(self: History) -> Callable[[], Trace]:
        if landed:
            folding = threading.Thread(target=fold_where_free)
            folding.start()
            folding.join()
        return read_history(self)

    monkeypatch.setattr(StepReports, "last", reports_then_next_step)
    monkeypatch.setattr(History, "held", history_after_the_fold)
    assert retrained_steps(other, tmp_path) == [0, 1]
    assert landed


def test_a_service_without_the_delivery_s_keys_leaves_a_named_last_step_out(
    make_client: AppFactory, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Each trajectory of step 2 run and reported naming its schedule: over, to a service reading
    the delivery's keys; one built without them (``delivery=None``) cannot tell, and leaves it out
    (where it fitted it whole, though its docs said such a step never is over)."""
    client = make_client()
    leases = publish_step_2(client, redis_client, "step-2")
    finish(redis_client, leases)
    report(client, leases, "step-2")
    served: ModelService = client.app.state.context.models  # type: ignore[attr-defined]
    alone = ModelService(ModelStore(tmp_path / "alone"), served.actuals)
    alone.start()
    assert alone.retrain().rows == 64  # steps 0 and 1, 32 reports each: not step 2's 32
    assert retrained_steps(client, tmp_path) == [0, 1, 2]
