"""A retrain a step starts runs outside its request's deadlines (``Retrainer.after_step``).

The retrain's thread used to run in a copy of the request's whole context, which carries the
caller's hard deadline (``scheduler.giveup``), the stop's clock and ``NEVER``
(``service/api/stopping.py``) and the predict stage's cutoff (``predictors.cutoff``). A fit that
ever checked one would give up at the deadline of a request it is no part of, or at the replica's
stop. Now the thread gets a fresh context with the step's schedule id only (its log lines keep it).
Real Redis, real LightGBM; the fit is the real one, after the checks a deadline-aware fit would make.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack

import pytest

from predictors import cutoff
from predictors.history import History
from predictors.model import FittedModel, fit
from predictors.tracetable import Trace
from scheduler import giveup
from scheduler.errors import DeadlinePassedError
from service.context import Context
from service.logs import schedule_context
from tests.service.api_helpers import AppFactory, actual_history

EVERY = 2  # steps between automatic retrains


def _cut() -> None:
    raise DeadlinePassedError("predict", 0.0, 1.0)


def _checking_fit(history: History | Trace) -> FittedModel:
    """The real fit, after the checks a fit that honoured its context's deadlines would make."""
    giveup.check()
    cutoff.check()
    return fit(history)


def test_a_retrain_started_under_a_passed_deadline_and_a_cutoff_is_not_cut_by_them(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    client = make_client(retrain_every_steps=EVERY)
    assert client.post("/actuals", json={"actuals": actual_history(steps=2)}).status_code == 200
    monkeypatch.setattr("service.learning.models.fit", _checking_fit)
    ctx: Context = client.app.state.context  # type: ignore[attr-defined]
    assert ctx.retrainer.after_step(0) is False  # the first step seen only sets the mark
    with ExitStack() as request:  # what a request's predict stage holds, its deadline passed
        request.enter_context(schedule_context("step-2-schedule"))
        request.enter_context(giveup.giving_up_at(0.0))
        request.enter_context(cutoff.checking(_cut))
        with caplog.at_level(logging.INFO, logger="service.retrain"):
            assert ctx.retrainer.after_step(EVERY) is True
            assert ctx.retrainer.background is not None
            ctx.retrainer.background.join(60)
    assert not [r.getMessage() for r in caplog.records if r.getMessage().startswith("retrain failed")]
    [done] = [r for r in caplog.records if r.getMessage() == "retrain done"]
    assert client.get("/models").json()["version"] != "fallback"
    assert getattr(done, "schedule_id", None) == "step-2-schedule"  # stamped by the app's record factory
