"""What one steal takes from one victim: the rule the simulator shares with ``steal.lua``.

Kept apart from the pool (``scheduler.sim_pool``), which decides WHEN a worker steals and from which
victims in turn, and applies what was taken: this module only reads the victim's queue and the
thief's state and says which items one steal call would take, so the rule can be read (and held to
the delivery layer's) in one place.

Without prefix affinity one call takes a BATCH from one victim, as the sidecar's steal does
(``service/sidecar/claims.py`` asks for its free slots, one item under KV admission;
``service/delivery/lua/steal.lua``, ``tail_fit``): at most ``max`` items, at most half the victim's
queue (at least one), from its tail, passing over pinned items and those too big for the thief's
cache, and stopping at the first tail item the KV steal gate or the deadline guard refuses (the items
before it taken so far still go). Until 2026-12-07 the simulator moved one item a call, choosing the
victim again for each, with no half-queue limit (docs/experiments.md, helper steal62). Under prefix
affinity a call moves one whole group (``unpinned_tail`` bounds the walk; the pool judges groups).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from itertools import islice

from scheduler.sim_engine import WorkerEngine
from scheduler.sim_guard import in_time

# Under prefix affinity, unpinned items one steal looks at from a victim's tail, passing over groups
# that can never leave it for this thief (part of it claimed, a member too big for its cache) for the
# nearest one that may (steal.lua's SCAN): a longer run of those shields what precedes it, so a steal
# stays bounded on long queues. Pinned items are not counted, and without affinity nothing bounds
# the pass: steal.lua reads a victim's list of its unpinned items, or of those the thief's cache
# holds (lua/index.lua; docs/delivery.md, "Pins and prefix affinity"), so any number of items the
# thief may never take is passed at no cost. 64: measured in delivery, scanning 256 cost a steal
# 0.33 ms of Redis (0.76 under affinity) at four victims, against ~0.06 ms for one that takes an item.
STEAL_SCAN = 64
# Items one steal call takes at most, whatever the thief's free slots: what one delivery call leases
# (``service.delivery.keys.MAX_BATCH``, Lua's ``unpack`` limit; scheduler/ imports nothing of service/,
# so the test of the two rules' parity holds them equal). A thief with more room steals again, as its
# sidecar does, choosing the victim anew: one call of 1,200 took from the busiest victim alone what
# delivery splits over two calls (review63).
STEAL_MOST = 1000


class Steal(enum.Enum):
    """What one victim gave a thief.

    TAKEN: the thief took items (under affinity, a group). SKIP: nothing this thief can ever take
    from that queue (all of it pinned or too big for its cache; under affinity, within
    ``STEAL_SCAN``, in groups that cannot move), so it tries the next victim. STOP: a refusal that
    time lifts (the KV steal gate, the deadline guard, an admission refusal) before anything was
    taken, which ends the thief's turn (``Pool._steal_from``). PASS (one group's verdict, within a
    victim): that group can never leave the victim for this thief now, so the thief looks at the
    group before it.
    """

    TAKEN = "taken"
    SKIP = "skip"
    STOP = "stop"
    PASS = "pass"


def steal_count(thief: WorkerEngine, queued: int) -> int:
    """Items one steal may take from a victim with ``queued`` unclaimed items: steal.lua's
    ``min(max, max(1, floor(len / 2)))``, the longest, planned-first half staying with its owner.

    ``max`` is what the sidecar asks for: its free slots (``max_num_seqs`` less what it holds,
    running or waiting in the engine), or one under KV admission, where it leases an item only once
    the one before it started (``service/sidecar/session.py``, ``_claim_reaching``); and what
    delivery sends the script is at most ``STEAL_MOST`` of it (``Delivery.steal``)."""
    free = 1 if thief.kv_admission else thief.max_seqs - thief.batch - len(thief.waiting)
    return min(free, STEAL_MOST, max(1, queued // 2))


def tail_batch(
    victim: WorkerEngine,
    thief: WorkerEngine,
    planned: tuple[Sequence[float], Sequence[float]] | None,
) -> tuple[list[int], Steal]:
    """The items one steal takes from ``victim``'s queue, as positions from its tail (1: the tail),
    tail first, and why it took no more (TAKEN: ``steal_count`` of them; STOP: the KV steal gate or
    the deadline guard refused the next, or the thief has no free slot; SKIP: the queue holds no more
    the thief may take).

    Pinned items and those too big for the thief's cache are passed over, any number of them, as
    steal.lua reads a list holding neither. Each item taken must fit the thief's KV cache beside
    everything it has in flight AND the items taken before it in this call, all at predicted final
    lengths (steal.lua's cumulative budget), and pass the deadline guard with those items in the
    thief's batch (``in_time``'s ``ahead``: steal.lua judges each item with the thief's busy time
    as it was before the call; the simulator's guard also slows the thief's steps by the batch).
    """
    queue, pin, reserve = victim.queue, thief.ledger.pin, thief.ledger.reserve
    take = steal_count(thief, len(queue))
    if take < 1:  # no free slot: nothing, as ``Delivery.steal`` answers a max below one
        return [], Steal.STOP
    room = thief.cap - thief.reserved - thief.waiting_reserve  # the KV steal gate's budget
    backs: list[int] = []
    for back, item in enumerate(reversed(queue), 1):  # unbounded: the pass costs steal.lua nothing
        if pin[item] >= 0 or not thief.can_hold(item):
            continue
        room -= reserve[item]
        if room < 0 or not in_time(planned, victim, thief, [item], ahead=len(backs)):
            return backs, Steal.STOP
        backs.append(back)
        if len(backs) == take:
            return backs, Steal.TAKEN
    return backs, Steal.SKIP


def unpinned_tail(
    queue: deque[int], pin: Sequence[int], held: Callable[[int], bool]
) -> Iterator[tuple[int, int]]:
    """The first ``STEAL_SCAN`` unpinned items from the queue's tail whose group the thief ``held``
    whole, each with its position from the tail (1: the tail): what a thief looks at under prefix
    affinity. Pinned items are not counted, as steal.lua reads a queue holding pins through its list
    of unpinned items (lua/index.lua): a hundred pins planned last shielded the queue before them. A
    pin binds its whole group (``sim_load.pin_whole_groups``), so pinned groups are passed over
    whole; nor are those of a group with a member too big for the thief (index.lua, ``P:gneed``)."""
    unpinned = ((b, i) for b, i in enumerate(reversed(queue), 1) if pin[i] < 0 and held(i))
    return islice(unpinned, STEAL_SCAN)
