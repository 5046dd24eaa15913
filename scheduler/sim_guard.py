"""The simulator's side of the steal deadline guard: the thief's own estimates, and the verdict.

Why a module of its own. The rule itself (an owner that runs late shifts its plan; a steal must
still pay off were the item ``LENGTH_MARGIN`` times longer) is shared with the delivery layer and
lives, numpy-free, in ``scheduler.stealguard``. What only the simulator needs is how a simulated
thief estimates its side: how long it would take to run a stolen item, and how long the work it
already runs still takes. ``in_time`` is asked before every steal of a static plan, of each tail
item by ``scheduler.sim_steal.tail_batch`` and of a whole group by ``scheduler.sim_pool`` under prefix
affinity; shared-queue plans carry no planned times, and every steal passes. docs/simulator.md, "Stealing
only what helps: the deadline guard", has the measurements behind each part.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.sim_engine import WorkerEngine
from scheduler.stealguard import beats_owner, lateness


def in_time(
    planned: tuple[Sequence[float], Sequence[float]] | None,
    victim: WorkerEngine,
    thief: WorkerEngine,
    items: list[int],
    *,
    ahead: int = 0,
) -> bool:
    """The deadline guard: ``thief`` would finish every one of ``items`` before its owner would.

    ``planned`` is each item's predicted (start, end) on its planned worker
    (``scheduler.deadlines.planned_times``); None (a shared-queue plan) lets every steal pass.
    The owner's time for an item is its planned end, shifted later by how late the owner runs
    (``scheduler.stealguard.lateness``, from the planned start of the head of its unclaimed
    queue); the thief's is ``thief_seconds``. And the thief must not be the later of the two
    anyway: the work it already runs (``thief_busy_seconds``, slowed by the stolen sequence)
    must also end by then, or the steal only moves the end of the step from one worker to the
    other (measured: short-cot replays, where a critical worker that stole ran 4% late).
    ``ahead``: items the same steal took before ``items`` (``scheduler.sim_steal.tail_batch``), not
    in the thief's batch yet but in it once they run, so counted in the batch its steps run with.
    """
    if planned is None:
        return True
    starts, ends = planned
    now, head = thief.clock, starts[victim.queue[0]]
    batch = thief.batch + len(thief.waiting) + ahead + len(items)
    late = lateness(head, now)
    for i in items:
        seconds = thief_seconds(thief, i, batch)
        if not beats_owner(now, seconds, starts[i] + late, ends[i] + late):
            return False
    return now + thief_busy_seconds(thief, batch) <= min(ends[i] for i in items) + late


def thief_seconds(thief: WorkerEngine, item: int, batch: int) -> float:
    """The thief's estimate of how long it takes to run ``item``: prefill plus its predicted steps.

    Each step at the thief's step time with ``batch`` sequences holding what it holds now plus this
    item at half its predicted output: its current batch stays (pessimistic: some of it will end
    first), the rest is the item's own average context. Simple on purpose; docs/simulator.md.
    """
    ledger, cost = thief.ledger, thief.cost
    prompt, steps = ledger.prompts[item], ledger.planned[item]
    context = thief.offset + thief.batch * thief.step + prompt + steps / 2.0
    return cost.prefill_time(prompt) + steps * cost.step_time(batch, context)


def thief_busy_seconds(thief: WorkerEngine, batch: int) -> float:
    """How long the thief's running sequences still take at their PREDICTED ends, with ``batch``
    sequences in each step (the stolen ones included) and the running set's mean context."""
    step = thief.step
    remaining = max((end for _, _, end in thief.alive.values()), default=step) - step
    if remaining <= 0:
        return 0.0
    context = thief.offset + thief.batch * (step + remaining / 2.0)
    return remaining * thief.cost.step_time(batch, context)
