"""A plan becomes the queues the workers pull, in the plan's order, with what they need to run it."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable

import pytest

from scheduler.deadlines import PlannedTime
from scheduler.errors import InvalidInputError
from scheduler.types import Plan, Trajectory, WorkerPlan
from service.delivery import Delivery, PublishOutcome
from service.delivery.publisher import delivery_item, publish_plan, schedule_from_plan
from service.engines import SERVICE_ENGINE

TRAJ = tuple(Trajectory(f"p{i}", s, 40 + i, 4096, 100.0 * (i + 1)) for i in range(3) for s in range(2))


def _plan(dispatch: tuple[str, ...] = ()) -> Plan:
    workers = (
        WorkerPlan("h100-0", ("p2#0", "p2#1", "p0#0"), 9.0),
        WorkerPlan("ascend-0", ("p1#0", "p1#1", "p0#1"), 8.5),
    )
    return Plan("lpt", workers, 9.0, 8.0, "HEURISTIC", 0.01, kv_admission=True, dispatch_order=dispatch)


def test_each_worker_gets_its_planned_queue_in_order_with_payloads() -> None:
    published = schedule_from_plan(
        "s", _plan(), TRAJ, payloads={"p2": {"prompt": "two"}}, engine=SERVICE_ENGINE
    )
    assert [i.key for i in published.queues["h100-0"]] == ["p2#0", "p2#1", "p0#0"]
    first = published.queues["h100-0"][0]
    assert (first.prompt_tokens, first.predicted_tokens, dict(first.payload)) == (
        42,
        300.0,
        {"prompt": "two"},
    )
    assert published.kv_admission
    assert published.shared == ()


def test_a_shared_queue_plan_publishes_one_fifo_and_empty_worker_queues() -> None:
    order = ("p0#0", "p1#0", "p2#0", "p0#1", "p1#1", "p2#1")
    published = schedule_from_plan("s", _plan(order), TRAJ, engine=SERVICE_ENGINE)
    assert [i.key for i in published.shared] == list(order)
    assert dict(published.queues) == {"h100-0": (), "ascend-0": ()}


def test_a_plan_naming_an_unknown_trajectory_is_refused() -> None:
    with pytest.raises(InvalidInputError) as err:
        schedule_from_plan("s", _plan(), TRAJ[:5], engine=SERVICE_ENGINE)
    assert (err.value.field, err.value.value) == ("plan.workers[h100-0]", "p2#1")


def test_a_published_plan_is_claimed_in_plan_order(delivery: Delivery) -> None:
    assert publish_plan(delivery, "s", _plan(), TRAJ, engine=SERVICE_ENGINE) is PublishOutcome.CREATED
    assert [le.key for le in delivery.claim("s", "ascend-0", 3)] == ["p1#0", "p1#1", "p0#1"]
    assert delivery.info("s").kv_admission


def test_each_worker_is_published_with_its_planned_seconds_per_predicted_token() -> None:
    published = schedule_from_plan("s", _plan(), TRAJ, engine=SERVICE_ENGINE)
    # h100-0: 9.0 s over 300 + 300 + 100 tokens; ascend-0: 8.5 s over 200 + 200 + 100
    assert published.seconds_per_token == pytest.approx({"h100-0": 9.0 / 700, "ascend-0": 8.5 / 500})


def test_the_steal_victim_is_the_worker_with_the_most_predicted_seconds_left(delivery: Delivery) -> None:
    workers = (  # h100-0: 700 tokens planned to end at 2 s; ascend-0: 500 tokens at 8.5 s
        WorkerPlan("h100-0", ("p2#0", "p2#1", "p0#0"), 2.0),
        WorkerPlan("ascend-0", ("p1#0", "p1#1", "p0#1"), 8.5),
    )
    publish_plan(
        delivery, "s", Plan("lpt", workers, 8.5, 8.0, "HEURISTIC", 0.01), TRAJ, engine=SERVICE_ENGINE
    )
    stolen = delivery.steal("s", "thief", 1)
    assert [le.key for le in stolen] == ["p0#1"]  # the tail of ascend-0: fewer tokens, more time


def test_pins_groups_and_prefix_affinity_reach_the_published_schedule() -> None:
    traj = (*TRAJ[:4], dataclasses.replace(TRAJ[4], pinned_worker="ascend-0", group_id="g"), TRAJ[5])
    published = schedule_from_plan("s", _plan(), traj, prefix_affinity=True, engine=SERVICE_ENGINE)
    assert published.prefix_affinity
    pinned = {i.key: (i.pinned, i.group) for q in published.queues.values() for i in q if i.pinned}
    assert pinned == {"p2#0": (True, "g")}
    assert published.queues["ascend-0"][0].group == "p1"  # no group id: the prompt is the group


def test_a_shared_queue_plan_sends_pinned_items_to_their_workers_own_queue_in_dispatch_order() -> None:
    order = ("p0#0", "p1#0", "p2#0", "p0#1", "p1#1", "p2#1")
    traj = tuple(dataclasses.replace(t, pinned_worker="h100-0") if t.prompt_id == "p1" else t for t in TRAJ)
    published = schedule_from_plan("s", _plan(order), traj, engine=SERVICE_ENGINE)
    assert [i.key for i in published.queues["h100-0"]] == ["p1#0", "p1#1"]
    assert [i.key for i in published.shared] == ["p0#0", "p2#0", "p0#1", "p2#1"]


def test_under_affinity_a_pin_on_one_sample_queues_its_whole_group_on_the_pinned_worker(
    delivery: Delivery,
) -> None:
    traj = (dataclasses.replace(TRAJ[0], pinned_worker="ascend-0"), *TRAJ[1:])  # p0#0 alone names one
    order = tuple(t.key for t in TRAJ)
    published = schedule_from_plan("s", _plan(order), traj, prefix_affinity=True, engine=SERVICE_ENGINE)
    assert [(i.key, i.pinned) for i in published.queues["ascend-0"]] == [("p0#0", True), ("p0#1", True)]
    assert [i.key for i in published.shared] == ["p1#0", "p1#1", "p2#0", "p2#1"]
    delivery.publish(published)
    assert [le.key for le in delivery.claim("s", "h100-0", 6)] == ["p1#0", "p1#1", "p2#0", "p2#1"]
    assert [le.key for le in delivery.claim("s", "ascend-0", 6)] == ["p0#0", "p0#1"]
    alone = schedule_from_plan(
        "s", _plan(order), traj, engine=SERVICE_ENGINE
    )  # without affinity the pin binds one sample
    assert [i.key for i in alone.queues["ascend-0"]] == ["p0#0"]


def test_a_delivery_item_carries_each_field_of_its_trajectory_by_name() -> None:
    # delivery_item passes DeliveryItem's fields positionally: a reordered field must fail here
    traj = Trajectory("p7", 3, 41, 4096, 123.5, group_id="g", pinned_worker="h100-0")
    item = delivery_item(traj, {"prompt": "x"}, PlannedTime(0.0015, 2.5), key="p7#3")
    assert dataclasses.asdict(item) == {
        "key": "p7#3",
        "prompt_id": "p7",
        "sample_idx": 3,
        "prompt_tokens": 41,
        "max_new_tokens": 4096,
        "predicted_tokens": 123.5,
        "payload": {"prompt": "x"},
        "group_id": "g",
        "pinned": True,
        "planned_start_ms": 2,
        "deadline_ms": 2500,
    }
    plain = delivery_item(dataclasses.replace(traj, group_id="", pinned_worker=None))
    assert (plain.key, plain.group_id, plain.pinned, plain.deadline_ms) == ("p7#3", "p7", False, None)


@pytest.mark.parametrize("build", [schedule_from_plan, publish_plan])
def test_the_publisher_names_no_engine_of_its_own_every_caller_says_which(
    build: Callable[..., object],
) -> None:
    """The library's default (``vllm-v0``) is not the service's (``ROLLOUT_DEFAULT_ENGINE``, ``vllm-v1``
    unless set): a caller that left it out published V0's steal deadlines and stored ``vllm-v0`` as the
    engine its step was planned for, which the speed learner then priced it by. Required, so mypy
    finds every such caller."""
    engine = inspect.signature(build).parameters["engine"]
    assert engine.default is inspect.Parameter.empty
    assert engine.kind is inspect.Parameter.KEYWORD_ONLY
