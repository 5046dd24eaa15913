"""An engine played alone on locals (``scheduler.sim_alone``) is the engine played method by method."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import sim_alone
from scheduler.costmodel import worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.errors import InvalidInputError
from scheduler.sim_engine import WorkerEngine
from scheduler.sim_ledger import Ledger
from scheduler.types import Worker

_STATE = ("clock", "step", "batch", "offset", "reserved", "token", "blocked", "busy_s", "preempted",
          "queued_work", "waiting_reserve", "pending_run", "to_finish", "to_fit", "refusal",
          "prefill_tokens", "event_clock", "refused", "held_s")  # fmt: skip

# (prompt, true steps, planned steps): the plan's prediction may be short or long of the truth
ITEMS = st.lists(
    st.tuples(st.integers(1, 400), st.integers(1, 900), st.integers(1, 900)), min_size=1, max_size=50
)


def _engine(
    items: list[tuple[int, int, int]], slots: int, capacity: int, kv: bool, resume: bool
) -> tuple[WorkerEngine, Ledger]:
    worker = Worker("w", device_profile("H100"), max_num_seqs=slots, kv_capacity_tokens=capacity)
    ledger = Ledger(
        [f"t{i}" for i in range(len(items))], [p for p, _, _ in items], [n for _, n, _ in items],
        [m for _, _, m in items],
    )  # fmt: skip
    engine = WorkerEngine(0, worker_cost(worker, model_preset("7b")), ledger, watermark=0.01,
                          kv_admission=kv, resume=resume, held=True)  # fmt: skip
    engine.enqueue(list(range(len(items))))
    return engine, ledger


def _outcome(engine: WorkerEngine, ledger: Ledger) -> tuple[object, ...]:
    """Everything a play leaves: the ledger's per-item records and the engine's state."""
    state = tuple(getattr(engine, name) for name in _STATE)
    containers = (list(engine.queue), list(engine.waiting), engine.heap, engine.alive, engine.overdue,
                  engine.stack, engine.peak.ends, engine.peak.offsets, engine.peak.changes)  # fmt: skip
    records = (ledger.start, ledger.end, ledger.worker, ledger.preemptions, ledger.kept)
    return state, containers, records


@settings(max_examples=400, deadline=None)
@given(ITEMS, st.integers(1, 24), st.integers(1_400, 8_000), st.booleans(), st.booleans(), st.integers(0, 30))
def test_playing_alone_on_locals_leaves_what_the_methods_leave(
    items: list[tuple[int, int, int]], slots: int, capacity: int, kv: bool, resume: bool, first: int
) -> None:
    # ``first`` events are played through the methods before the rest is handed over, as a pool
    # does once nothing can move between its workers (``sim_pool``): a play may start mid-queue
    played, ledger = _engine(items, slots, capacity, kv, resume)
    stepped, reference = _engine(items, slots, capacity, kv, resume)
    for engine in (played, stepped):
        engine.admit_own()
        pending = engine.commit()
        for _ in range(first):
            if pending is None:
                break
            engine.process()
            engine.admit_own()
            pending = engine.commit()
        if engine is played:
            sim_alone.play_out(engine, pending)
        else:
            sim_alone.play_events(engine, pending)
    assert _outcome(played, ledger) == _outcome(stepped, reference)


def test_an_item_its_worker_cannot_hold_fails_as_it_does_method_by_method() -> None:
    # 1,000 + 1,000 tokens on a 1,500-token cache: evicted alone, it can never finish
    items = [(100, 50, 50), (1_000, 1_000, 200), (100, 50, 50)]
    errors = []
    for play in (sim_alone.play_out, sim_alone.play_events):
        engine, _ = _engine(items, 8, 1_500, True, False)
        engine.admit_own()
        with pytest.raises(InvalidInputError) as caught:
            play(engine, engine.commit())
        errors.append(str(caught.value))
    assert errors[0] == errors[1]
    assert "t1" in errors[0]


@pytest.mark.timeout(60)  # without the guard the play on locals spins at one step for ever
@pytest.mark.parametrize("resume", [False, True])
def test_a_completion_event_that_completes_nothing_fails_as_it_does_method_by_method(resume: bool) -> None:
    # a broken rule stands in as a ledger no loader builds: an item of -3 steps ends "before" step 0,
    # so the first event is a completion at step 0 that ends nothing, and would be timed again there
    errors = []
    for play in (sim_alone.play_out, sim_alone.play_events):
        engine, _ = _engine([(100, 50, 50), (100, -3, 50)], 8, 4_000, False, resume)
        engine.admit_own()
        with pytest.raises(RuntimeError) as caught:
            play(engine, engine.commit())
        errors.append(str(caught.value))
    assert errors[0] == errors[1]
    assert (
        errors[0] == "worker w: completion event at step 0 ended none of 2 running sequences (first end -3)"
    )
