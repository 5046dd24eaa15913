"""The path of one batch through the service: validate -> predict -> plan -> respond -> publish.

Each stage is one function below, in the order a request meets them (``publish``'s workings are
``service/pipeline/publish.py``, ``respond``'s ``service/pipeline/answer.py``), and each but
``respond`` is timed. The answer is built before the
publish, which stores it with the schedule for a retry of a caller-chosen ``schedule_id`` to replay
(``republish``). Nothing is written to Redis before the plan exists but the in-flight mark of a caller-
chosen id (``in_flight``) and the request's entry among its step's planning ones (``step_part``),
which the route takes as the request arrives, each taken back on a refusal, so a request rejected at any
stage changes no state (a retried ``schedule_id`` found stored is announced again and answered its
first plan, ``replay``: a repair of that step's indexes, not a new write). Once the step is out, the
bookkeeping that follows (``post_publish.later``) cannot turn its answer into an error that a trainer
would retry. Next to the requested policy we plan the same batch with ``round_robin`` (the length-blind
equal split RL trainers use today) so every response says what the plan is worth.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from predictors import cutoff
from predictors.predictor import Predictions
from predictors.queries import Query, QueryBatch
from scheduler import giveup
from scheduler.errors import InvalidInputError
from scheduler.gcpause import collector_paused
from scheduler.planner import Prepared, plan, prepare
from scheduler.types import Inventory, Plan, PlanRequest, Trajectory
from service.api.convert import (
    broken_rule,
    build_inventory,
    check_plan_rules,
    named_rules,
    repoint,
    resolve_model,
    time_budget_s,
)
from service.api.schemas import BatchItem, ScheduleRequest, ScheduleResponse, WorkerSpec
from service.context import Context
from service.delivery.errors import REDIS_FAILED
from service.learning.models import version_name
from service.logs import schedule_context
from service.pipeline import publish
from service.pipeline.answer import respond
from service.pipeline.deadline import NO_DEADLINE, Deadline
from service.pipeline.in_flight import Mark
from service.pipeline.republish import replay
from service.pipeline.served import StageClock, record, timings
from service.problems.table import DeadlineExceededError, UnavailableError
from service.speeds.model import idle_learned

_log = logging.getLogger("service.pipeline")
BASELINE = "round_robin"
# ``Deadline.check``'s ``before`` while the batch is predicted: a 504 then says the deadline passed
# before it was planned, while it was predicted
WHILE_PREDICTED = "it was planned (while it was predicted)"
PREDICT_CHECK_EVERY = 1024  # trajectories built between the caller's deadline's checks (``predict``)
# Refusals a retry may not meet (Redis down or full, the plan queue busy, the caller's deadline): an
# invalid body is refused for what it is instead (``convert.broken_rule``), which every retry would meet.
REFUSED_FOR_NOW: tuple[type[Exception], ...] = (*REDIS_FAILED, UnavailableError, DeadlineExceededError)


@dataclass(frozen=True)
class Predicted:
    """Provenance of the lengths: the model version and how many came from each source."""

    version: str  # "v<N>" or "fallback"
    sources: dict[str, int]  # lightgbm / prompt_history_mean / global_prior -> count


@dataclass(frozen=True)
class Validated:
    """A request checked against every rule, resolved into core types, ready to predict."""

    inventory: Inventory
    drained: frozenset[str]
    time_scale_sources: dict[str, str]
    policy: str
    quantile: float
    time_budget_s: float
    item_of: tuple[int, ...]  # trajectory position -> batch item index (for error paths)
    engine: str  # the request's, else the service's ``default_engine``: whose rules the plan is made for


UNMARKED = Mark(None, "", "")  # a request that needs no in-flight mark: nothing to raise or check


@dataclass(frozen=True)
class _Serving:
    """A valid request being served: the ids its publish writes under and must find, and its clock."""

    schedule_id: str
    mark_id: str  # its in-flight mark's (``Mark.request_id``), which its publish must find ('' none)
    started: float  # ``time.perf_counter()`` as the route took it (``run``'s ``arrived``)
    deadline: Deadline  # the caller's

    @property
    def ids(self) -> tuple[str, str]:
        """The schedule's id and its mark's, as ``publish.publish`` takes them."""
        return self.schedule_id, self.mark_id


def run(
    body: ScheduleRequest,
    ctx: Context,
    schedule_id: str,
    arrived: float | None = None,
    marked: Mark = UNMARKED,
    deadline: Deadline = NO_DEADLINE,
) -> ScheduleResponse:
    """Serve one ``POST /schedule`` as ``schedule_id``: every stage, in order, with its wall time.
    The id is chosen once, by the route (the caller's, else a new one), whose log lines carry it.
    ``arrived`` (``time.perf_counter()``, by default now): when the route took the request, before
    it waited for a planning thread; that wait is part of the ``queue`` stage and of the total, and
    the plan queue's timeout counts from then (``PlanSlots.hold``). ``marked``: the request's in-flight
    mark, whose own failure (``in_flight.Mark.check``) is raised once the body passed every rule, so an
    invalid request is refused for what it is whatever Redis's state, and which its publish must
    still find (``request_id``; '' none: ``Delivery.publish``, 503 if lapsed). ``deadline``: the
    caller's (``service/pipeline/deadline.py``), which caps the plan's budget and refuses (504) a plan that
    cannot publish before it; a retry of a published step is answered its first plan whatever it says.

    A request refused for the moment (Redis down or full, every plan slot busy, its deadline passed)
    whose body breaks a rule of the planner's is refused for that instead (422): whatever the
    service's state, an invalid body hears what is wrong with it (``convert.broken_rule``)."""
    clock = StageClock()
    on_thread = time.perf_counter()
    started = on_thread if arrived is None else arrived
    clock.spent["queue"] = (on_thread - started) * 1000.0  # waited for a planning thread
    with schedule_context(schedule_id):
        try:
            with clock.stage("validate"):  # before the plan queue: a bad request is refused at once
                checked = validate(body, ctx)
                first = _first_answer(body, checked, ctx, marked.check)
            if first is not None:  # a retry of a published step: its first answer, not a second copy
                return _replayed(first, clock, started)
            serving = _Serving(schedule_id, marked.request_id, started, deadline)
            return _serve_valid(serving, body, checked, ctx, clock)
        except REFUSED_FOR_NOW:
            broken = broken_rule(body, ctx.settings)
            if broken is None:
                raise
            raise broken from None


def _replayed(answer: ScheduleResponse, clock: StageClock, started: float) -> ScheduleResponse:
    """The stored first answer with this request's timings (it planned nothing), logged as a replay."""
    answer.timings = timings(clock.spent, (time.perf_counter() - started) * 1000.0)
    _log.info("replayed", extra={"policy": answer.policy, "total_ms": round(answer.timings.total_ms, 1)})
    return answer


def _serve_valid(
    serving: _Serving, body: ScheduleRequest, checked: Validated, ctx: Context, clock: StageClock
) -> ScheduleResponse:
    """Predict, plan and publish a validated request, holding one of the service's plan slots.
    ``serving``: its ids and clock. Its deadline, the caller's: the wait for a slot ends at it, it is
    checked once a slot is held and again before the publish (which must find what a publish of its size
    needs left: ``publish_pace``), and it caps the plan's budget after the predictions to leave that and
    the handover to the publish (504 past it). Both are timed for the next request's reserve. The planner
    gives up (504) where only the publish's part is left: a plan that overran its budget in a stage no
    budget cuts is not finished for a publish that would be refused anyway.

    The cycle collector is held throughout, as the planner holds it for its own stages
    (``scheduler.gcpause``): predicting, publishing and answering build a few objects per trajectory, none
    in a cycle, and the collections they set off rescanned the request's live objects: per
    1,024-trajectory request ~8 young and ~1 middle collection, and a full one every ~10 requests, ~6 ms
    of its CPU on the slow host (the full ones also add a spike to the tail).
    """
    started, deadline = serving.started, serving.deadline
    with ctx.plan_slots.hold(started, deadline) as waited_s, collector_paused():
        clock.spent["queue"] += waited_s * 1000.0  # and for a plan slot
        deadline.check("it was predicted")
        with clock.stage("predict"):
            trajectories, predicted = predict(body, checked, ctx, deadline)
        reserve = ctx.publish_pace.reserve(len(trajectories))
        budget_s = deadline.budget_s(checked.time_budget_s, reserve.cap_s)
        with deadline.planner_gives_up(reserve.publish_s) as give_up_at, reserve.planning(budget_s):
            plan_request = _plan_request(body, checked, trajectories, (budget_s, give_up_at))
            chosen, baseline = _plans(plan_request, checked, clock)
        response = respond(serving.schedule_id, body, checked, plan_request, chosen, baseline, predicted)
        first = None
        with clock.stage("publish"):
            deadline.check(f"its plan was {'published' if body.publish else 'answered'}", reserve.publish_s)
            if body.publish:
                idle = idle_learned(chosen, checked.time_scale_sources, checked.drained)
                _not_stopped()
                with reserve.publishing():
                    first = publish.publish(serving.ids, chosen, plan_request, body, ctx, idle, response)
        if first is not None:  # lost a race for the id: the winner's answer, never this plan
            return _replayed(first, clock, started)
        response.timings = timings(clock.spent, (time.perf_counter() - started) * 1000.0)
        record(ctx, response, len(trajectories))
        return response


def _not_stopped() -> None:
    """Give up before the publish's call goes out where the replica stopped after the planner's last
    check (``service/api/stopping.py``: the stop's clock is past every hard deadline): that step went
    out for nobody (its handler cancelled; under a drawn id no retry finds it). Raised and answered as
    the stop's other give-ups (503, the marks taken back), naming the "publish" stage. Without the
    stop's clock (a request served outside the route: no hard deadline here) it reads nothing. A stop
    that lands after it is a publish under way, which runs to its end."""
    giveup.check_at("publish")


def validate(body: ScheduleRequest, ctx: Context) -> Validated:
    """Cross-item rules and name lookups; reads the learned speeds from Redis, writes nothing."""
    settings = ctx.settings
    policy, engine = named_rules(body, settings)
    model = resolve_model(body.model, settings.default_model)
    inventory, drained, sources = build_inventory(body, model, {})
    unstated = {w.worker_id for w in body.inventory.workers if _unstated_speed(w)}
    learned = ctx.speeds.learned([w for w in inventory.workers if w.worker_id in unstated], model)
    if learned:  # a learned scale is a ratio to the profile as planned now, so the profile comes first
        inventory, drained, sources = build_inventory(body, model, learned)
    item_of = tuple(index for index, item in enumerate(body.batch.items) for _ in range(item.n))
    quantile = body.quantile or settings.default_quantile
    budget_s = time_budget_s(body, settings)
    return Validated(inventory, drained, sources, policy, quantile, budget_s, item_of, engine)


def _first_answer(
    body: ScheduleRequest, checked: Validated, ctx: Context, mark_check: Callable[[], None]
) -> ScheduleResponse | None:
    """The first answer when ``body`` retries a caller-chosen ``schedule_id`` already published
    (``republish.replay``, which announces the stored step again); None to plan and publish it.

    Asked only after the body passed every rule, the planner's that need no lengths too
    (``check_plan_rules``): a retry with a broken body hears what is wrong (422), not a replay that
    announces the stored step. The planner checks those rules again, with the lengths, when it
    plans, so only a request that may be a retry pays for them here (~3 us a prompt). Only such a
    request is marked, so a mark Redis failed to write is raised here (``mark_check``: 503), after
    those rules and before anything reads what is stored under the id; a drawn id's step entry Redis
    failed to write (``step_part.arrive``) is raised before its plan (a broken rule still a 422: ``run``)."""
    if not body.publish:
        return None
    if not body.schedule_id:
        mark_check()
        return None
    check_plan_rules(body, checked.inventory, checked.drained, checked.time_budget_s, checked.engine)
    mark_check()
    return replay(body, body.schedule_id, ctx)


def _unstated_speed(spec: WorkerSpec) -> bool:
    return spec.time_scale is None and spec.decode_tokens_per_s is None


def predict(
    body: ScheduleRequest, checked: Validated, ctx: Context, until: Deadline = NO_DEADLINE
) -> tuple[tuple[Trajectory, ...], Predicted]:
    """Predicted length of every trajectory at the planning quantile, and where each came from.

    Each trajectory also carries its p50 and p90, so that ``lpt`` and ``cpsat`` judge orders and
    placements on draws of the lengths as well as on the point predictions (``robust_order``,
    ``robust_place``, ``robust_fast``, and ``robust`` for cpsat's choice against lpt), as the
    replay does.

    Queries are built once per prompt and repeated ``n`` times column-wise: the samples of a prompt
    differ only in ``sample_idx``, and 4,096 per-sample objects would cost more than the model.

    The caller's deadline ``until`` is checked between the model's row chunks (``predictors.cutoff``:
    one call over 32,768 distinct rows took 1.1-1.5 s starved), once the model has answered and every
    ``PREDICT_CHECK_EVERY`` trajectories built (4,096 took 15 ms at load 7, more starved): a 4,096-
    trajectory step whose deadline passed while it was predicted was refused only at the budget's
    check after it, up to 161 ms late (docs/experiments.md, deadline47 and deadline48).
    """
    queries = _queries(body.batch.items, checked.item_of)
    cut = None if until.at is None else partial(until.check, WHILE_PREDICTED)  # between the model's chunks
    with cutoff.checking(cut, None if until.at is None else until.left_s):  # and a fold's wait (review51a)
        predictions = ctx.models.predict(queries, body.step, checked.quantile)
    trajectories = _trajectories(body.batch.items, checked.item_of, queries, predictions, until)
    # the version that made these lengths (``Predictions.model_version``), not the one serving now: a
    # retrain or a hot reload may have swapped another in since, and the answer named that one
    version = version_name(predictions.model_version)
    return tuple(trajectories), Predicted(version, dict(Counter(predictions.source)))


def _queries(items: Sequence[BatchItem], item_of: tuple[int, ...]) -> QueryBatch:
    """The model's queries, one a trajectory: built once per prompt and repeated column-wise
    (``item_of``: each trajectory's batch item), as a prompt's samples differ only in ``sample_idx``."""
    per_prompt = QueryBatch.of(
        [Query(i.prompt_id, 0, i.prompt_tokens, i.max_new_tokens, i.features) for i in items]
    )
    rows = np.asarray(item_of, dtype=np.int64)
    starts = np.searchsorted(rows, rows)  # first trajectory of each row's prompt
    return QueryBatch(
        prompt_id=per_prompt.prompt_id[rows],
        sample_idx=np.arange(len(rows), dtype=np.int64) - starts,
        prompt_tokens=per_prompt.prompt_tokens[rows],
        max_new_tokens=per_prompt.max_new_tokens[rows],
        numeric={k: v[rows] for k, v in per_prompt.numeric.items()},
        categorical={k: v[rows] for k, v in per_prompt.categorical.items()},
    )


def _trajectories(
    items: Sequence[BatchItem],
    item_of: tuple[int, ...],
    queries: QueryBatch,
    predictions: Predictions,
    until: Deadline,
) -> list[Trajectory]:
    """The planner's trajectories at the predicted lengths, the caller's deadline ``until`` checked
    every ``PREDICT_CHECK_EVERY`` built (``predict``)."""
    value, p50, p90 = predictions.value.tolist(), predictions.p50.tolist(), predictions.p90.tolist()
    sample = queries.sample_idx.tolist()
    trajectories: list[Trajectory] = []
    for first in range(0, len(item_of), PREDICT_CHECK_EVERY):
        until.check(WHILE_PREDICTED)
        trajectories.extend(
            Trajectory(
                prompt_id=items[k].prompt_id,
                sample_idx=sample[i],
                prompt_tokens=items[k].prompt_tokens,
                max_new_tokens=items[k].max_new_tokens,
                predicted_tokens=value[i],
                pinned_worker=items[k].pinned_worker,
                quantiles={0.5: p50[i], 0.9: p90[i]},  # how unsure: lpt's and cpsat's robust steps read them
            )
            for i, k in enumerate(item_of[first : first + PREDICT_CHECK_EVERY], first)
        )
    return trajectories


def _plan_request(
    body: ScheduleRequest,
    checked: Validated,
    trajectories: tuple[Trajectory, ...],
    limits: tuple[float, float | None] | None = None,
) -> PlanRequest:
    """The planner's request: the predicted trajectories on the validated inventory; ``limits``: its
    budget (the request's, capped by the caller's deadline) and when it gives up (``hard_deadline``:
    ``Deadline.planner_gives_up``); by default the request's budget, and never."""
    budget_s, give_up_at = (checked.time_budget_s, None) if limits is None else limits
    return PlanRequest(
        trajectories=trajectories,
        inventory=checked.inventory,
        time_budget_s=budget_s,
        prefix_affinity=body.prefix_affinity,
        kv_admission=body.kv_admission,
        excluded_workers=checked.drained,
        seed=body.seed,
        engine=checked.engine,
        hard_deadline=give_up_at,
    )


def _plans(plan_request: PlanRequest, checked: Validated, clock: StageClock) -> tuple[Plan, Plan]:
    """The requested plan and the ``BASELINE`` one, each stage timed.

    Both plans share validation and the lower bound (prepared once); the baseline, a few
    milliseconds, goes first so the requested plan's budget bounds the whole planning stage."""
    with clock.stage("plan"):
        prepared = _prepare(plan_request, checked.item_of)
    with clock.stage("baseline"):
        baseline = _plan(plan_request, BASELINE, checked.item_of, prepared)
    with clock.stage("plan"):
        chosen = (
            baseline
            if checked.policy == BASELINE
            else _plan(plan_request, checked.policy, checked.item_of, prepared)
        )
    return chosen, baseline


def _prepare(plan_request: PlanRequest, item_of: tuple[int, ...]) -> Prepared:
    """Validate the core request and compute its lower bound once, for every plan of this request;
    a core rejection of trajectory ``i`` is re-pointed at its batch item."""
    try:
        return prepare(plan_request)
    except InvalidInputError as error:
        raise repoint(error, item_of) from None


def _plan(plan_request: PlanRequest, policy: str, item_of: tuple[int, ...], prepared: Prepared) -> Plan:
    """Plan with ``policy`` from the shared preparation; rejections re-pointed as in ``_prepare``."""
    try:
        return plan(plan_request, policy, prepared=prepared)
    except InvalidInputError as error:
        raise repoint(error, item_of) from None
