"""Running sequences that outlive their predicted end: the simulator's overdue heap.

Under KV admission the engine projects each running sequence to its predicted end; one that runs
past it is expected to run a further share of its prediction (``admission.expected_remaining``),
again each time it outlives that. The engine (``scheduler.sim_engine``) and its written-out alone
play (``scheduler.sim_alone``) both keep the heap of those ends and extend them here, so the two
loops cannot drift apart.
"""

from __future__ import annotations

import heapq

from scheduler.admission import RunningPeak, expected_remaining
from scheduler.sim_ledger import Ledger

DEAD = (-1, 0, 0)  # ``alive.get()`` default: matches no admission token


def extend_overdue(
    overdue: list[tuple[int, int, int]],
    alive: dict[int, tuple[int, int, int]],
    peak: RunningPeak,
    ledger: Ledger,
    step: int,
) -> None:
    """Give every running sequence that outlived its expected end by ``step`` a new one
    (``expected_remaining``), in ``alive``, ``peak`` and ``overdue`` (a heap of (end, token, item));
    entries of sequences completed, evicted or already extended are dropped."""
    while overdue and overdue[0][0] <= step:
        end, token, item = heapq.heappop(overdue)
        held = alive.get(item, DEAD)
        if held[0] != token or held[2] != end:
            continue  # completed, evicted, or already extended
        base = held[1]
        later = step + expected_remaining(ledger.planned[item], base + step - ledger.prompts[item])
        peak.remove(end, base)
        peak.add(later, base)
        alive[item] = (token, base, later)
        heapq.heappush(overdue, (later, token, item))
