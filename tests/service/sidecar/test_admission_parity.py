"""A sidecar under KV admission starts exactly what the simulator's engine admits, event by event.

The plan's promises hold on a real engine only if the sidecar decides as the simulator (and the
planner's finish model) does. Both are driven here on the same random queues: the simulator's
``WorkerEngine`` with ``kv_admission``, and the sidecar's ``Holdings`` fed what a sidecar learns
(starts, completions, a decode rate) with its clock reading the engine's decode step, so its
progress estimate (time since start times rate) is the engine's true progress. At every event
(the start, each completion) the items each starts, in order, must be the same, until the engine
first preempts (a sidecar cannot see an eviction: from there the two views differ by design); and
where either would steal, the KV steal gate must judge by the same budget (the cache less every
item in flight at its predicted final length; ``steal.lua`` compares the cumulative reservation
of the tail items it takes with that budget, as ``WorkerEngine.reservation_fits`` does).

A sidecar also polls: it re-tests a blocked head between completions, where waiting has lowered
the head's projected peak. The simulator makes the first step at which the head fits an event of
its own, so a sidecar polled at every decode step starts nothing between the simulator's events.

What is not compared, by design: the sidecar's reservation fallback before its first completion
(the simulator knows progress from the start).
"""

from __future__ import annotations

from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.costmodel import WorkerCost
from scheduler.sim_engine import WorkerEngine
from scheduler.sim_ledger import Ledger
from scheduler.stepsum import planned_steps
from service.delivery.records import DeliveryItem, Lease
from service.sidecar.holdings import Held, Holdings, lease_id

_Item = tuple[int, float, int]  # prompt tokens, predicted tokens, true output tokens


def _cost(capacity: int, slots: int) -> WorkerCost:
    return WorkerCost("w", 1e-3, 1e-7, 1e-5, 1e-9, 1e-4, 1.0, 1e-6, capacity, slots)


def _lease(index: int, item: _Item) -> Lease:
    prompt, predicted, actual = item
    key = f"t{index}"
    delivery = DeliveryItem(key, key, 0, prompt, max(actual, planned_steps(predicted)), predicted)
    return Lease("s", "w", delivery, token=1, deadline_ms=0, attempt=1)


class _Sidecar:
    """The push sidecar's turn (``runner.Sidecar._fill``) on its holdings, Redis left out: start
    what fits, and while nothing waits and a slot is free claim one more (KV admission claims one
    item at a time)."""

    def __init__(
        self, items: list[_Item], capacity: int, slots: int, now: list[float], kv_admission: bool = True
    ) -> None:
        self.holdings = Holdings(max_in_flight=slots, kv_capacity_tokens=capacity, clock=lambda: now[0])
        self.kv_admission = kv_admission
        self.holdings.observe(output_tokens=1, wall_time_s=1.0)  # one token a step: progress is exact
        self.queue = deque(_lease(i, item) for i, item in enumerate(items))
        self.held: dict[int, Held] = {}

    def turn(self) -> list[int]:
        """Start what fits, claiming into free slots (one item at a time under KV admission); the
        items started, in order."""
        started: list[int] = []
        while True:
            started += [int(held.lease.key[1:]) for held in self.holdings.start_fitting()]
            if self.holdings.waiting() or not self.queue or self.holdings.free_slots() == 0:
                return started
            for _ in range(1 if self.kv_admission else self.holdings.free_slots()):
                if self.queue:
                    lease = self.queue.popleft()
                    self.held[int(lease.key[1:])] = self.holdings.add(lease, self.kv_admission)

    def complete(self, index: int, tokens: int) -> None:
        self.holdings.remove(lease_id(self.held.pop(index).lease))
        self.holdings.observe(output_tokens=tokens, wall_time_s=float(tokens))


def _steal_budget(engine: WorkerEngine) -> int:
    """The simulator's KV steal gate as a budget: ``reservation_fits(i)`` is ``reserve[i] <=`` it."""
    return engine.cap - engine.reserved - engine.waiting_reserve


def _admitted(engine: WorkerEngine, before: set[int]) -> list[int]:
    tokens = {item: token for item, (token, _, _) in engine.alive.items() if item not in before}
    return sorted(tokens, key=tokens.__getitem__)


@st.composite
def _item(draw: st.DrawFn) -> _Item:
    """A prompt, a prediction, and a true length from a third of it (ends early) to 2.5x (outlives
    it, extensions and all): the range where admission decisions turn on ``expected_remaining``."""
    predicted = draw(st.floats(0.5, 400.0))
    ratio = draw(st.floats(0.3, 2.5))
    return draw(st.integers(1, 300)), predicted, max(1, round(predicted * ratio))


_items = st.lists(_item(), min_size=1, max_size=14)


def _play_side_by_side(items: list[_Item], spare: int, slots: int, poll: bool) -> None:
    """Drive the engine and the sidecar on ``items`` until the engine is done or first preempts;
    with ``poll`` the sidecar also takes a turn at every decode step between the engine's events."""
    capacity = max(p + a for p, _, a in items) + spare  # every item fits alone, as validation requires
    prompts, steps = [p for p, _, _ in items], [a for _, _, a in items]
    planned = [planned_steps(q) for _, q, _ in items]
    ledger = Ledger([f"t{i}" for i in range(len(items))], prompts, steps, planned)
    engine = WorkerEngine(0, _cost(capacity, slots), ledger, watermark=0.01, kv_admission=True)
    engine.enqueue(list(range(len(items))))
    now = [0.0]
    sidecar = _Sidecar(items, capacity, slots, now)
    while True:
        before = set(engine.alive)
        engine.admit_own()
        assert sidecar.turn() == _admitted(engine, before), f"at step {engine.step}"
        if not sidecar.holdings.waiting():  # where either would steal: the same KV steal gate
            assert sidecar.holdings.steal_budget() == _steal_budget(engine)
        if engine.commit() is None:
            return
        running, last = set(engine.alive), engine.step
        engine.process()
        if engine.preempted:
            return
        for step in range(last + 1, engine.step) if poll else ():
            now[0] = float(step)
            assert sidecar.turn() == [], f"the sidecar starts at step {step}, before the engine's event"
        now[0] = float(engine.step)
        for item in sorted(running - set(engine.alive)):
            sidecar.complete(item, steps[item])


@settings(max_examples=400, deadline=None)
@given(_items, st.integers(0, 600), st.integers(1, 8))
def test_the_sidecar_starts_what_the_simulator_admits_at_every_event(
    items: list[_Item], spare: int, slots: int
) -> None:
    _play_side_by_side(items, spare, slots, poll=False)


@settings(max_examples=200, deadline=None)
@given(_items, st.integers(0, 600), st.integers(1, 8))
def test_a_sidecar_polling_every_step_starts_a_blocked_head_at_the_simulators_step(
    items: list[_Item], spare: int, slots: int
) -> None:
    # the engine's head-fit event falls on the first step a poll would start the head at: no poll
    # in between starts anything, and the poll at the event starts what the engine admits
    _play_side_by_side(items, spare, slots, poll=True)


@settings(max_examples=200, deadline=None)
@given(_items, st.integers(0, 600), st.integers(1, 8))
def test_without_kv_admission_the_sidecar_keeps_in_flight_what_the_simulator_has_claimed(
    items: list[_Item], spare: int, slots: int
) -> None:
    # max_num_seqs items handed to the engine (running or waiting inside it, evicted ones included),
    # and a steal judged against all of them at predicted final lengths, on both sides
    capacity = max(p + a for p, _, a in items) + spare
    prompts, steps = [p for p, _, _ in items], [a for _, _, a in items]
    planned = [planned_steps(q) for _, q, _ in items]
    ledger = Ledger([f"t{i}" for i in range(len(items))], prompts, steps, planned)
    engine = WorkerEngine(0, _cost(capacity, slots), ledger, watermark=0.01, kv_admission=False)
    engine.enqueue(list(range(len(items))))
    sidecar = _Sidecar(items, capacity, slots, [0.0], kv_admission=False)
    while True:
        engine.admit_own()
        sidecar.turn()
        assert set(sidecar.held) == set(engine.alive) | set(engine.waiting), f"at step {engine.step}"
        assert sidecar.holdings.steal_budget() == _steal_budget(engine)
        if engine.commit() is None:
            return
        running = set(engine.alive)
        engine.process()
        for item in sorted(running - set(engine.alive) - set(engine.waiting)):
            sidecar.complete(item, steps[item])
