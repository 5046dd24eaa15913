"""A thief the KV steal gate lets through but whose projected peak refuses the item ends its turn.

Under KV admission the steal gate (``reservation_fits``, steal.lua's budget) counts what the thief
holds at PREDICTED final lengths, while ``take`` admits only where the projected peak fits now, and
that peak extends a sequence that outlived its prediction (``expected_remaining``). So where the
thief runs such an overdue sequence, the gate may pass an item the engine then refuses. That
refusal must end the thief's turn (``Steal.STOP``) as any refusal of the gate does: answered as a
steal that took one, the thief went back to the takers' heap with room, was offered the same item,
refused it again, and so on, a play that never ended (mutants63's P2, which no test reached).

The test counts the refusals and fails past a bound rather than waiting for a play that may not end:
the thief is refused at one event and takes the item at its next one, once its overdue sequence ended.
"""

from __future__ import annotations

from collections import deque

from scheduler.costmodel import WorkerCost
from scheduler.sim_engine import WorkerEngine
from scheduler.sim_ledger import Ledger
from scheduler.sim_pool import Pool

BOUND = 50  # refusals a play may take here before it is taken for one that never ends


class _Counted(WorkerEngine):
    """A worker engine whose refused takes are counted; past ``BOUND`` the play is stopped by name."""

    refusals = 0  # set on the instance at the first (a subclass without ``__slots__`` has a dict)

    def take(self, item: int) -> bool:
        """``WorkerEngine.take``, its refusals counted."""
        taken = super().take(item)
        if not taken:
            self.refusals += 1
            assert self.refusals < BOUND, f"item {item} refused {self.refusals} times: the turn never ends"
        return taken


def _cost(slots: int, capacity: int) -> WorkerCost:
    return WorkerCost("w", 1e-3, 1e-7, 1e-5, 1e-9, 1e-4, 1.0, 1e-6, capacity, slots)


def test_a_thief_whose_projected_peak_refuses_what_the_steal_gate_passed_takes_it_at_its_next_event() -> None:
    """Items: 0 runs on the victim (one slot) for 10,000 steps, 1 (850 + 100 tokens) waits in its
    queue; the thief (two slots, 1,000 tokens) runs 2 (predicted 10 steps, runs 900) and 3 (200).
    At step 200, 3 done: the gate passes 1 (20 + 950 <= 1,000 at predicted lengths), the projected
    peak refuses it (2 now holds 210 tokens and is expected to run on). Refused once; taken when 2
    ends, stolen by the thief, and the play ends."""
    prompts, steps, planned = [10, 850, 10, 10], [10_000, 100, 900, 200], [10_000, 100, 10, 200]
    ledger = Ledger([f"i{i}" for i in range(4)], prompts, steps, planned)
    victim = WorkerEngine(0, _cost(1, 100_000), ledger, watermark=0.01, kv_admission=True)
    thief = _Counted(1, _cost(2, 1_000), ledger, watermark=0.01, kv_admission=True)
    victim.enqueue([0, 1])
    thief.enqueue([2, 3])
    assert ledger.reserve[1] + ledger.reserve[2] <= thief.cap  # the gate passes it beside 2, 3 done
    Pool([victim, thief], deque(), [1.0, 1.0], True).run()
    assert thief.refusals == 1
    assert (ledger.worker[1], ledger.stolen[1]) == (1, True)
    assert ledger.start[1] == ledger.end[2]  # taken as the overdue sequence ended, not before
    assert all(end > 0.0 for end in ledger.end)
