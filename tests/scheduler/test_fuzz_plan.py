"""Odd input to ``plan``: a plan that keeps its promises, or ``InvalidInputError`` naming the part at fault.

``test_validation`` and ``test_validation_types`` name one bad field at a time and ``test_extremes``
plans at the corners of what validation accepts; these draw where none of them goes. One part of a
valid request is replaced by an odd value of any type (NaN, a bool where an int belongs, None, a
string where a set belongs, a huge or vanishing number), and requests validation accepts carry odd
values wherever it allows them (vanishing and huge quantiles, p90 far below p50, one-token caches,
65,536 slots, ids with ``#`` in them, exclusions, pins, budgets of a nanosecond). Longer runs of the
same strategies found the bugs the regression tests of ``test_validation_types`` name (a None
``excluded_workers``, a ``kv_admission`` of 0.5, a custom model with no KV size).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.costmodel import worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.errors import InvalidInputError
from scheduler.planner import plan
from scheduler.policies import POLICY_NAMES
from scheduler.types import Inventory, Plan, PlanRequest, Trajectory, Worker

FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ODD: st.SearchStrategy[Any] = st.sampled_from(
    [None, True, False, 0, -1, 0.0, -0.0, 5e-324, 1e-9, 1.5, 1e300, 2**31, 2**63, 10**400, math.nan, math.inf,
     -math.inf, "", "1", "w0", (), frozenset(), {0.5: 1.0}]
)  # fmt: skip
TRAJECTORY_FIELDS = ("prompt_id", "sample_idx", "prompt_tokens", "max_new_tokens", "predicted_tokens",
                     "quantiles", "group_id", "pinned_worker")  # fmt: skip
WORKER_FIELDS = ("worker_id", "device", "num_gpus", "max_num_seqs", "kv_capacity_tokens", "time_scale")
REQUEST_FIELDS = ("time_budget_s", "prefix_affinity", "kv_admission", "excluded_workers", "seed")


def _base() -> PlanRequest:
    """A valid request with every feature in use: quantiles, a pin, an exclusion, two kinds."""
    workers = tuple(
        Worker(f"w{i}", device_profile(kind), max_num_seqs=4, kv_capacity_tokens=4_000)
        for i, kind in enumerate(("H100", "Ascend910B", "H100"))
    )
    trajectories = tuple(
        Trajectory(f"p{i // 2}", i % 2, 50, 600, 100.0 + 40 * i, {0.5: 90.0 + 40 * i, 0.9: 300.0},
                   pinned_worker="w0" if i == 0 else None)
        for i in range(8)
    )  # fmt: skip
    return PlanRequest(trajectories, Inventory(workers, model_preset("7b")), time_budget_s=0.05,
                       excluded_workers=frozenset({"w2"}))  # fmt: skip


@st.composite
def one_odd_part(draw: st.DrawFn) -> tuple[PlanRequest, tuple[str, ...]]:
    """The base request with one part odd, and the field paths a refusal of it may name."""
    base, value = _base(), draw(ODD)
    change: dict[str, Any] = {}
    where = draw(st.sampled_from(("trajectory", "worker", "request")))
    if where == "request":
        name = draw(st.sampled_from(REQUEST_FIELDS))
        change[name] = value
        return dataclasses.replace(base, **change), (name,)
    if where == "trajectory":
        index, name = draw(st.integers(0, 7)), draw(st.sampled_from(TRAJECTORY_FIELDS))
        trajectories = list(base.trajectories)
        change[name] = value
        trajectories[index] = dataclasses.replace(trajectories[index], **change)
        # a changed id may collide with another's key, a changed pin bind or split its group
        return dataclasses.replace(base, trajectories=tuple(trajectories)), ("trajectories[",)
    index, name = draw(st.integers(0, 2)), draw(st.sampled_from(WORKER_FIELDS))
    workers = list(base.inventory.workers)
    change[name] = value
    workers[index] = dataclasses.replace(workers[index], **change)
    inventory = Inventory(tuple(workers), base.inventory.model)
    # a smaller cache or a renamed worker shows in the trajectories it held or the exclusion naming it
    return dataclasses.replace(base, inventory=inventory), (
        f"inventory.workers[{index}].",
        "trajectories[",
        "excluded_workers",
    )


def _assert_kept_promises(request: PlanRequest, result: Plan) -> None:
    """Every trajectory once, on a worker it may run on and whose cache holds it, above the bound."""
    by_key = {t.key: t for t in request.trajectories}
    workers = {w.worker_id: w for w in request.inventory.workers}
    placed = [(key, wp.worker_id) for wp in result.workers for key in wp.items]
    assert sorted(key for key, _ in placed) == sorted(by_key), result.policy
    for key, worker_id in placed:
        trajectory, cache = (
            by_key[key],
            worker_cost(workers[worker_id], request.inventory.model).kv_capacity_tokens,
        )
        assert worker_id not in request.excluded_workers, result.policy
        assert trajectory.pinned_worker in (None, worker_id), result.policy
        assert trajectory.prompt_tokens + trajectory.max_new_tokens <= cache, result.policy
    assert math.isfinite(result.predicted_makespan_s), result.policy
    assert result.predicted_makespan_s >= result.lower_bound_s * (1 - 1e-9), result.policy


@FUZZ
@given(one_odd_part())
def test_one_odd_part_is_planned_or_refused_by_the_path_of_that_part(
    case: tuple[PlanRequest, tuple[str, ...]],
) -> None:
    request, paths = case
    try:
        results = [plan(request, name) for name in POLICY_NAMES]
    except InvalidInputError as error:
        refused: str | None = error.field
    else:
        refused = None
        for result in results:
            _assert_kept_promises(request, result)
    assert refused is None or refused.startswith(paths), (refused, paths)


POSITIVE = st.sampled_from([5e-324, 1e-300, 1e-9, 1.0, 7.0, 1e6, 1e300, 1.7976931348623157e308])


@st.composite
def odd_but_valid(draw: st.DrawFn) -> PlanRequest:
    """A request validation accepts, with odd values wherever it allows them."""
    workers = tuple(
        Worker(f"w#{i}", device_profile(draw(st.sampled_from(("H100", "Ascend910B")))),
               max_num_seqs=draw(st.sampled_from((1, 65_536))),
               kv_capacity_tokens=draw(st.sampled_from((None, 3, 2**31 - 1))),
               time_scale=draw(st.sampled_from((1e-3, 1e3))))
        for i in range(draw(st.integers(1, 3)))
    )  # fmt: skip
    model = model_preset("7b")
    smallest = min(worker_cost(w, model).kv_capacity_tokens for w in workers)  # every worker may run all
    ids = [w.worker_id for w in workers]
    trajectories = []
    for i in range(draw(st.integers(1, 12))):
        cap = draw(st.integers(1, min(smallest - 1, 10**6)))
        predicted = min(
            float(cap), draw(POSITIVE) if draw(st.booleans()) else float(draw(st.integers(1, cap)))
        )
        trajectories.append(
            Trajectory(f"p#{i % 3}", i, 1, cap, predicted, {0.5: draw(POSITIVE), 0.9: draw(POSITIVE)},
                       group_id=draw(st.sampled_from(("", "g"))),
                       pinned_worker=draw(st.sampled_from((None, None, ids[0]))))
        )  # fmt: skip
    excluded = (
        frozenset(draw(st.sets(st.sampled_from(ids[1:]), max_size=len(ids) - 1))) if ids[1:] else frozenset()
    )
    return PlanRequest(tuple(trajectories), Inventory(workers, model),
                       time_budget_s=draw(st.sampled_from((1e-9, 0.05))),
                       prefix_affinity=draw(st.booleans()), kv_admission=draw(st.booleans()),
                       excluded_workers=excluded,
                       seed=draw(st.sampled_from((0, 2**63 - 1, 2**200))))  # fmt: skip


@FUZZ
@given(odd_but_valid())
def test_every_policy_keeps_its_promises_on_odd_values_validation_accepts(request: PlanRequest) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no spread overflows (scheduler.lognormal)
        results: list[Any] = [plan(request, name) for name in POLICY_NAMES]
    for result in results:
        _assert_kept_promises(request, result)


def test_a_spread_of_three_hundred_orders_of_magnitude_plans_without_a_numpy_warning() -> None:
    base = _base()
    wild = tuple(
        dataclasses.replace(t, quantiles={0.5: 1.0 if i % 2 else 5e-324, 0.9: 1e300 if i % 2 else 5e-324})
        for i, t in enumerate(base.trajectories)
    )
    request = dataclasses.replace(base, trajectories=wild, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # exp() of such a spread overflowed
        results = [plan(request, name) for name in POLICY_NAMES]
    for result in results:
        _assert_kept_promises(request, result)
