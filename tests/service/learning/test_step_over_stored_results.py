"""How the rule's read of an unreported done trajectory (``step_over._said_nothing``) takes a stored
result it does not expect: one with no ``finish_reason`` is read as the client reads it
(``TrajectoryResult.from_json``: stopped, so it says a length and its report is awaited), and one that
cannot be read at all is taken to say a length (a client would report or refuse it, never pass it
over). Either way the step stays open until its report arrives. And a reported schedule whose keys
went is not known to be over, though its id was withdrawn since; a result says a length as the
client reads one (stopped or capped, a token out); an unsettled schedule an earlier step reported
holds no later step open. Kills mutants that survived round
46's tests (helper mutants10, docs/experiments.md); on the real embedded valkey."""

from __future__ import annotations

import redis

from service.delivery import CompletionOutcome, Delivery, TrajectoryResult
from service.delivery import keys as keyspace
from service.learning.step_over import LastStep, over
from tests.service.delivery.conftest import schedule


def _one_done_unreported(
    redis_client: redis.Redis, stored: str | None, last: TrajectoryResult | None = None
) -> tuple[Delivery, LastStep]:
    """Step 2's one schedule ``s`` of two trajectories, both done, the second's result ``last``
    (aborted by default); the newest result of the second is ``stored`` where given (read before its
    accepted entry: its record's deadline field moved to the stored one's id, as an older release's
    lease deadline past both would be); only the first is reported."""
    delivery = Delivery(redis_client)
    delivery.publish(schedule("s", {"w": 2}, ttl_ms=600_000))
    delivery.enter_step(2, "s", 3600)
    first, second = delivery.claim("s", "w", 2)
    aborted = TrajectoryResult(0, "abort")  # says nothing of length: the step would be over
    assert delivery.complete(first, TrajectoryResult(40)) is CompletionOutcome.ACCEPTED
    assert delivery.complete(second, last or aborted) is CompletionOutcome.ACCEPTED
    if stored is not None:
        keys = keyspace.schedule_keys("s")
        newest = str(redis_client.xadd(keys.results, {"key": second.key, "result": stored}))
        fields = str(redis_client.hget(keys.st, second.key)).split("|")
        fields[3] = newest.split("-")[0]
        redis_client.hset(keys.st, second.key, "|".join(fields))
    return delivery, LastStep(2, 0, {"s": frozenset({first.key})}, frozenset({"s"}))


def test_a_result_with_no_finish_reason_is_read_as_stopped_and_keeps_the_step_open(
    redis_client: redis.Redis,
) -> None:
    delivery, reported = _one_done_unreported(redis_client, '{"output_tokens": 40}')
    assert not over(reported, 2, delivery)


def test_a_result_that_cannot_be_read_keeps_the_step_open(redis_client: redis.Redis) -> None:
    delivery, reported = _one_done_unreported(redis_client, "{not json")
    assert not over(reported, 2, delivery)


def test_an_aborted_result_alone_lets_the_step_be_over(redis_client: redis.Redis) -> None:
    """The control: the aborted result, as stored, says nothing of length and is never reported."""
    delivery, reported = _one_done_unreported(redis_client, None)
    assert over(reported, 2, delivery)


def test_a_reported_schedule_whose_keys_went_is_not_over_though_its_id_was_withdrawn_since(
    redis_client: redis.Redis,
) -> None:
    """Its keys gone (the retention passed), a later request under its id withdrawn by a DELETE
    (``P:withdrawn``, no ``P:meta``): actuals name it, so it published something, and with its keys
    gone whether all of it was reported is not known. Only a withdrawn id nothing reported is no part."""
    delivery = Delivery(redis_client)
    redis_client.set(keyspace.schedule_keys("s").withdrawn, "1", ex=60)
    delivery.enter_step(2, "s", 3600)
    assert not over(LastStep(2, 0, {"s": frozenset({"p0#0"})}, frozenset({"s"})), 2, delivery)


def test_a_done_trajectory_whose_result_is_gone_from_the_stream_keeps_the_step_open(
    redis_client: redis.Redis,
) -> None:
    """Done and unreported, with no result left to read (the stream trimmed, or deleted here):
    whether its result said a length is not known, so its report may still be on its way."""
    delivery, reported = _one_done_unreported(redis_client, None)
    assert redis_client.delete(keyspace.schedule_keys("s").results) == 1  # the first's is reported
    assert not over(reported, 2, delivery)


def test_a_result_hitting_its_cap_says_a_length_and_keeps_the_step_open(redis_client: redis.Redis) -> None:
    """``length``: the trajectory reached ``max_new_tokens``, a censored length a client reports."""
    delivery, reported = _one_done_unreported(redis_client, None, TrajectoryResult(40, "length"))
    assert not over(reported, 2, delivery)


def test_a_stopped_result_of_no_tokens_says_nothing_and_lets_the_step_be_over(
    redis_client: redis.Redis,
) -> None:
    """No token out: no client reports it (``actuals.says_length``), so its report is not awaited.
    Stored as a release before learn54 stored one: the delivery refuses to complete with it now."""
    stored = '{"output_tokens": 0, "finish_reason": "stop"}'
    delivery, reported = _one_done_unreported(redis_client, stored)
    assert over(reported, 2, delivery)


def test_an_unsettled_schedule_an_earlier_step_reported_does_not_hold_this_step_open(
    redis_client: redis.Redis,
) -> None:
    """Step 1's schedule ``old`` still has stragglers (the active index holds it), and its actuals
    named it: it is no part of step 2 that has reported nothing, so step 2 is over once its own
    trajectories are."""
    delivery, reported = _one_done_unreported(redis_client, None)
    delivery.publish(schedule("old", {"w": 1}, ttl_ms=600_000))
    assert "old" in redis_client.zrange(keyspace.active_index(), 0, -1)
    assert over(LastStep(2, 0, reported.covered, frozenset({"s", "old"})), 2, delivery)


def test_a_result_met_on_an_earlier_ones_read_is_not_looked_for_again(redis_client: redis.Redis) -> None:
    """Two aborted results unreported: the one read first (an older release's record, its lease's
    deadline past both) meets the other's result on its way down, which is then known to say
    nothing: the step is over, not left open for a result no read finds twice."""
    delivery = Delivery(redis_client)
    delivery.publish(schedule("s", {"w": 3}, ttl_ms=600_000))
    delivery.enter_step(2, "s", 3600)
    reported, older, newer = delivery.claim("s", "w", 3)
    assert delivery.complete(reported, TrajectoryResult(40)) is CompletionOutcome.ACCEPTED
    for lease in (older, newer):
        assert delivery.complete(lease, TrajectoryResult(0, "abort")) is CompletionOutcome.ACCEPTED
    keys = keyspace.schedule_keys("s")
    fields = str(redis_client.hget(keys.st, older.key)).split("|")
    fields[3] = str(int(fields[3]) + 60_000)  # read first: its record names the latest millisecond
    redis_client.hset(keys.st, older.key, "|".join(fields))
    assert over(LastStep(2, 0, {"s": frozenset({reported.key})}, frozenset({"s"})), 2, delivery)
