"""A hypothesis state machine over claim/heartbeat/complete/release/fail/steal (with and without a KV
budget)/reap/reset (a restarted worker's), claims and steals re-sent under their call id, publish
replays, the clock and (in one variant) a cancel, on a schedule with per-worker queues and a shared FIFO.

After every step the raw keys are audited: every item is in exactly one place that agrees with its
state, counters match a recount, the steal index scores each queue in predicted seconds, and no
completion was ever accepted twice. The model also checks
that only the newest lease of an item can be accepted, and that it is accepted while unexpired; that a
re-sent claim or steal answers only leases its first run made and leases nothing new; and that once cancelled,
nothing is leased or accepted any more.
"""

from __future__ import annotations

import dataclasses
import uuid

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from service.delivery import (
    CompletionOutcome,
    Delivery,
    Lease,
    PublishedSchedule,
    PublishOutcome,
)
from tests.service.delivery.audit import audit
from tests.service.delivery.conftest import item, schedule
from tests.service.finished import RESULT

WORKERS = ("a", "b", "c")
TTL_MS = 1000


def _with_shared(published: PublishedSchedule, affinity: bool) -> PublishedSchedule:
    """Add three items to the shared FIFO, which workers pull from once their own queue drains; pin
    ``a``'s tail item, and under ``affinity`` group each queue's items in pairs (``w-i//2``), the
    FIFO's too (a claim of ``shared-0`` takes ``shared-1`` along)."""
    shared = tuple(
        dataclasses.replace(item(f"shared-{i}#0"), group_id=f"shared-{i // 2}" if affinity else "")
        for i in range(3)
    )
    queues = {
        w: tuple(
            dataclasses.replace(it, pinned=it.key == "a-5#0", group_id=f"{w}-{i // 2}" if affinity else "")
            for i, it in enumerate(q)
        )
        for w, q in published.queues.items()
    }
    return PublishedSchedule(
        published.schedule_id,
        queues,
        lease=published.lease,
        shared=shared,
        seconds_per_token={"a": 0.5, "b": 2.0},  # c gets the default: steal scores in seconds
        prefix_affinity=affinity,
    )


class DeliveryMachine(RuleBasedStateMachine):
    """Random interleavings of every operation on one schedule, with an explicit clock."""

    client: redis.Redis  # set by the test before running
    affinity = False  # the schedule's prefix affinity (set by the test before running)
    may_cancel = False  # whether the trainer may cancel the schedule midway (set by the test)

    leases = Bundle("leases")

    def __init__(self) -> None:
        super().__init__()
        self.delivery = Delivery(self.client)
        self.sid = uuid.uuid4().hex[:12]
        self.now = 0
        self.newest: dict[str, int] = {}  # item key -> token of its newest lease
        self.accepted: set[str] = set()
        self.deadline: dict[str, int] = {}  # item key -> deadline of its newest lease
        self.calls: dict[str, tuple[str, list[Lease]]] = {}  # 'claim w' / 'steal w' -> its last that leased
        self.cancelled = False
        base = schedule(self.sid, {"a": 6, "b": 3, "c": 0}, ttl_ms=TTL_MS)
        self.published = _with_shared(base, self.affinity)
        self.delivery.publish(self.published, now_ms=0)

    def _issued(self, leases: list[Lease]) -> object:
        assert not (self.cancelled and leases), "leased after the cancel"
        for lease in leases:
            assert lease.token > self.newest.get(lease.key, 0)
            assert lease.key not in self.accepted
            self.newest[lease.key] = lease.token
            self.deadline[lease.key] = lease.deadline_ms
        return multiple(*leases)

    @rule(target=leases, worker=st.sampled_from(WORKERS), n=st.integers(1, 4))
    def claim(self, worker: str, n: int) -> object:
        call = uuid.uuid4().hex
        leases = self.delivery.claim(self.sid, worker, n, now_ms=self.now, call_id=call)
        if leases:
            self.calls[f"claim {worker}"] = (call, leases)
            self._resend_at_once("claim", worker, call, leases)
        return self._issued(leases)

    def _resend_at_once(self, kind: str, worker: str, call: str, first: list[Lease]) -> None:
        """The same call re-sent right away (its reply lost): exactly the same leases again."""
        op = self.delivery.claim if kind == "claim" else self.delivery.steal
        again = op(self.sid, worker, 4, now_ms=self.now, call_id=call)
        assert [(le.key, le.token) for le in again] == [(le.key, le.token) for le in first], f"{kind} re-sent"

    @rule(worker=st.sampled_from(WORKERS), kind=st.sampled_from(["claim", "steal"]))
    def resend(self, worker: str, kind: str) -> None:
        """The worker's last claim or steal again, as after a lost reply: its own leases back (those it
        still holds), nothing new."""
        if f"{kind} {worker}" not in self.calls:
            return
        call, first = self.calls[f"{kind} {worker}"]
        op = self.delivery.claim if kind == "claim" else self.delivery.steal
        again = op(self.sid, worker, 4, now_ms=self.now, call_id=call)
        issued = {(le.key, le.token) for le in first}
        for lease in again:
            assert (lease.key, lease.token) in issued, f"a re-sent {kind} leased anew"
            assert lease.token == self.newest[lease.key]
            assert lease.key not in self.accepted

    @precondition(lambda self: self.may_cancel and not self.cancelled)
    @rule()
    def cancel(self) -> None:
        self.delivery.cancel(self.sid, now_ms=self.now)
        self.cancelled = True

    @rule(
        target=leases,
        worker=st.sampled_from(WORKERS),
        n=st.integers(1, 4),
        budget=st.sampled_from([None, -1, 0, 131, 150, 300, 10_000]),  # items reserve 132 each
    )
    def steal(self, worker: str, n: int, budget: int | None) -> object:
        call = uuid.uuid4().hex
        stolen = self.delivery.steal(self.sid, worker, n, now_ms=self.now, budget_tokens=budget, call_id=call)
        if stolen:
            self.calls[f"steal {worker}"] = (call, stolen)
            self._resend_at_once("steal", worker, call, stolen)
        if budget is not None:
            assert not stolen or sum(le.item.reservation_tokens for le in stolen) <= budget
        assert not any(le.item.pinned for le in stolen)  # a pinned item never moves
        if self.affinity:  # one group per steal; a started one only a TTL after its last lease ended
            assert len({le.item.group for le in stolen}) <= 1
            assert all(le.attempt == 1 or self.deadline[le.key] + TTL_MS < self.now for le in stolen)
        return self._issued(stolen)

    @rule(lease=leases)
    def heartbeat(self, lease: Lease) -> None:
        alive = self.delivery.heartbeat([lease], now_ms=self.now)
        if alive:
            assert alive[0].token == self.newest[lease.key]
            assert alive[0].deadline_ms == self.now + TTL_MS
            self.deadline[lease.key] = alive[0].deadline_ms

    @rule(lease=leases)
    def complete(self, lease: Lease) -> None:
        outcome = self.delivery.complete(lease, RESULT, now_ms=self.now)
        if outcome is CompletionOutcome.ACCEPTED:
            assert lease.key not in self.accepted, "accepted twice"
            assert not self.cancelled, "accepted after the cancel"
            assert lease.token == self.newest[lease.key], "a superseded lease was accepted"
            assert self.now <= self.deadline[lease.key], "an expired lease was accepted"
            self.accepted.add(lease.key)
        elif outcome is CompletionOutcome.DUPLICATE:
            assert lease.key in self.accepted

    @rule(lease=leases, died=st.sampled_from(["", "its worker process"]))
    def release(self, lease: Lease, died: str) -> None:
        """A graceful release, or (``died``) a dead pull worker's, refunded once per item."""
        self.delivery.release([lease], now_ms=self.now, died=died)

    @rule(lease=leases)
    def fail(self, lease: Lease) -> None:
        self.delivery.fail(lease, "engine error", now_ms=self.now)

    @rule(dt=st.sampled_from([1, 300, 999, 1001, 2500]))
    def advance_clock(self, dt: int) -> None:
        self.now += dt

    @rule()
    def replay_publish(self) -> None:
        assert self.delivery.publish(self.published, now_ms=self.now) is PublishOutcome.UNCHANGED

    @rule()
    def reap(self) -> None:
        self.delivery.reap(self.sid, now_ms=self.now)

    @rule(worker=st.sampled_from(WORKERS), age=st.sampled_from([0, 500, 1500, 5000]))
    def reset(self, worker: str, age: int) -> None:
        """A restarted worker's process that started ``age`` ms ago hands back its predecessor's leases."""
        self.delivery.reset(self.sid, worker, age, now_ms=self.now)

    @invariant()
    def every_item_is_in_exactly_one_state(self) -> None:
        result = audit(self.client, self.sid)
        assert (result.lost, result.accepted_twice, result.problems, result.counts_agree) == (0, 0, [], True)
        assert result.total == 12
        assert result.done == len(self.accepted)
        if self.cancelled:
            assert (result.queued, result.running) == (0, 0)


@pytest.mark.parametrize(
    ("affinity", "may_cancel"),
    [(False, False), (True, False), (True, True)],
    ids=["plain", "prefix-affinity", "cancelled-under-affinity"],
)
def test_random_interleavings_keep_every_item_in_one_state_and_accept_each_once(
    redis_client: redis.Redis, affinity: bool, may_cancel: bool
) -> None:
    DeliveryMachine.client = redis_client
    DeliveryMachine.affinity = affinity
    DeliveryMachine.may_cancel = may_cancel
    run_state_machine_as_test(
        DeliveryMachine,
        settings=settings(
            max_examples=25,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    print(f"state machine (affinity={affinity}): lost=0 accepted_twice=0 over 25 random runs")
