"""``publish.lua`` refuses a publish whose request's in-flight mark is no longer in ``P:planning``
(``MarkLapsedError``, nothing written): the mark lapsed while Redis failed its keeps, a DELETE then
answered 404, and the step its trainer gave up must not reach the fleet (``service/pipeline/in_flight.py``).
A replay, a conflict and a withdrawal answer first, as they did; a publish naming no mark (a drawn id,
a bench) is not checked; and the script still takes the arguments of the release before the mark's."""

from __future__ import annotations

import pytest
import redis

from service.delivery import Delivery, PublishOutcome, ScheduleConflictError, ScheduleWithdrawnError, wire
from service.delivery.errors import MarkLapsedError
from service.delivery.keys import schedule_keys
from tests.service.api.badinput import redis_snapshot
from tests.service.delivery.conftest import schedule

PLANNING = schedule_keys("s").planning
MARK_ARGUMENT = 27  # ARGV[28]: the mark's nonce, before the call's (last)


def _marked(delivery: Delivery, request_id: str = "r1") -> None:
    delivery.mark_planning("s", request_id, 60_000)
    delivery.extend_planning("s", request_id, 60_000)


def test_a_publish_whose_mark_is_there_creates_the_schedule_and_takes_every_mark(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    _marked(delivery, "r1")
    _marked(delivery, "r2")  # a request racing it under the same id
    assert delivery.publish(schedule("s", {"a": 2}), mark="r1") == PublishOutcome.CREATED
    assert not redis_client.exists(PLANNING)


def test_a_publish_whose_mark_lapsed_is_refused_and_leaves_redis_as_it_was(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    _marked(delivery)
    redis_client.delete(PLANNING)  # what its lapse leaves: no P:planning, so a DELETE is a 404
    before = redis_snapshot(redis_client)
    with pytest.raises(MarkLapsedError) as refused:
        delivery.publish(schedule("s", {"a": 2}), mark="r1")
    assert refused.value.schedule_id == "s"
    assert redis_snapshot(redis_client) == before
    assert (delivery.active_schedules(), delivery.schedules_for("a")) == ([], [])  # nor announced


def test_a_publish_finding_only_another_request_s_mark_is_refused_and_leaves_it(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    _marked(delivery, "other")
    before = redis_snapshot(redis_client)
    with pytest.raises(MarkLapsedError):
        delivery.publish(schedule("s", {"a": 2}), mark="r1")
    assert redis_snapshot(redis_client) == before


def test_a_replay_and_a_conflict_answer_before_the_mark_is_looked_for(delivery: Delivery) -> None:
    """The winner of a race for the id deleted every mark as it published: the loser's publish is
    still a replay (the same schedule) or a conflict (another), as before."""
    _marked(delivery, "winner")
    _marked(delivery, "loser")
    assert delivery.publish(schedule("s", {"a": 2}), mark="winner") == PublishOutcome.CREATED
    assert delivery.publish(schedule("s", {"a": 2}), mark="loser") == PublishOutcome.UNCHANGED
    with pytest.raises(ScheduleConflictError):
        delivery.publish(schedule("s", {"a": 3}), mark="loser")


def test_a_withdrawn_id_is_refused_as_withdrawn_whatever_its_mark(delivery: Delivery) -> None:
    _marked(delivery)
    delivery.cancel("s", withdraw_s=60)  # the DELETE replaced P:planning with P:withdrawn
    with pytest.raises(ScheduleWithdrawnError):
        delivery.publish(schedule("s", {"a": 2}), mark="r1")


def test_a_publish_naming_no_mark_is_not_checked(delivery: Delivery, redis_client: redis.Redis) -> None:
    """A drawn id, a dry run's bench, a caller without a mark: ``mark`` ''."""
    assert delivery.publish(schedule("s", {"a": 2})) == PublishOutcome.CREATED
    assert redis_client.exists(schedule_keys("s").meta)


def test_this_script_takes_the_arguments_of_the_release_before_the_mark_unchecked(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """An older replica sends 28 arguments, its call's nonce last, and no mark: this release's script
    publishes them unchecked (no P:planning here), and the same call re-sent answers 'created' again,
    so the call's nonce is still read as the last argument."""
    step = schedule("s", {"a": 2})
    args = wire.publish_args(step, None, "call-1", mark="not-read")
    assert (args[MARK_ARGUMENT], args[-1]) == ("not-read", "call-1")
    old = args[:MARK_ARGUMENT] + args[MARK_ARGUMENT + 1 :]
    assert delivery._call(delivery.scripts.publish, "s", old) == 1
    assert redis_client.hget(schedule_keys("s").meta, "nonce") == "call-1"
    assert delivery._call(delivery.scripts.publish, "s", old) == 1  # re-sent: created, not a replay
