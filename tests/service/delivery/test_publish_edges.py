"""What a publish keeps, and how a replay is judged, where no other test pinned it down: each test
here kills a mutant of service/delivery/lua/publish.lua that the rest of the delivery, pipeline and
API tests let live (docs/experiments.md, "Mutation check of the core", helper luamutants2). Each
states what a caller sees through Delivery, never the Lua."""

from __future__ import annotations

from service.delivery import Delivery, PublishOutcome
from tests.service.delivery.conftest import schedule


def test_a_replay_without_a_digest_of_a_schedule_stored_with_one_changes_nothing(
    delivery: Delivery,
) -> None:
    sched = schedule("s", {"a": 2})
    assert delivery.publish(sched, digest="work-1") is PublishOutcome.CREATED
    # a caller that does not know the request (no digest) replays the same schedule: not other work
    assert delivery.publish(sched) is PublishOutcome.UNCHANGED
    assert delivery.publish(sched, digest="work-1") is PublishOutcome.UNCHANGED


def test_a_replay_with_a_digest_of_a_schedule_stored_without_one_changes_nothing(
    delivery: Delivery,
) -> None:
    sched = schedule("s", {"a": 2})
    assert delivery.publish(sched) is PublishOutcome.CREATED
    # nothing stored to tell other work by: the same schedule is a replay, whatever its digest
    assert delivery.publish(sched, digest="work-1") is PublishOutcome.UNCHANGED
