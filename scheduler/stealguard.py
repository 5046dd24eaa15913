"""The steal guard: whether a thief may take an item from its planned owner, by the item's planned
times (``scheduler.deadlines.planned_times``).

The guard: an owner that has not started the head of its queue by that item's planned start runs
late (``lateness``), and its remaining plan shifts by as much: an item planned to end at ``end`` is
projected to end at ``end + max(0, now - head_start)``. A thief takes the item only if
``now + its own estimate`` is no later, i.e. its estimate is at most ``end - min(now, head_start)``:
the time left to the deadline while the owner is on time, the owner's planned time from its next
start to the item's end once it is late. And, since the item's true length is unknown, the steal
must still pay off if the item runs ``LENGTH_MARGIN`` (4) times its prediction (``beats_owner``):
measured on short-cot replays (``trace synth --profile short-cot``, 8 H100 + 8 Ascend 910B, steps
3-5), slower Ascends that met every deadline at predicted lengths took under-predicted H100 tail
items and ran them last: lpt 157.1 s without stealing, 178.9 s with the deadline rule alone; with
a margin of 2: 178.9 s, 4: 157.5 s (344 steals), unbounded (the thief no slower on the item at all):
157.1 s (0 steals), which also refused near-equal workers the steals that rescue a serial owner.

A shift, not a stretch: when the owner is late because
lengths run over their predictions, the thief's estimate (at the predicted length) is short by the
same factor, and stretching only the owner's side let slow thieves take items they then finished
last (measured: tests/scheduler/test_steal_guard.py). For a given estimate the condition tightens
with time while the owner keeps to its plan, and stays as it is once it runs late: the shift
assumes a late owner still works. One that has run nothing of the schedule for a lease TTL past its
head's planned start (its engine died) is stalled, and the delivery layer's steal script lifts the
guard for it (service/delivery/lua/steal.lua); a simulated worker never stalls, so the simulator
needs no such rule.
"""

from __future__ import annotations

LENGTH_MARGIN = 4.0  # a steal must still pay off if the item runs this many times its prediction


def lateness(head_start_s: float, now_s: float) -> float:
    """How far behind its plan an owner runs: ``now`` minus the planned start of the first item it
    has not started yet (``head_start_s``), or 0 while that start is still ahead."""
    return max(0.0, now_s - head_start_s)


def beats_owner(now_s: float, seconds: float, owner_start_s: float, owner_end_s: float) -> bool:
    """Whether a thief starting now and needing ``seconds`` (at the predicted length) ends an item
    before its owner would, which runs it from ``owner_start_s`` to ``owner_end_s`` (projected),
    both at the predicted length and if the item runs ``LENGTH_MARGIN`` times longer (both run
    times scale with the true length; the condition is linear in it, so the two ends cover every
    length in between). A slow thief that wins at the prediction loses on an under-predicted item,
    the long tail a step waits for (module docstring)."""
    if now_s + seconds > owner_end_s:
        return False
    span = owner_end_s - owner_start_s
    return now_s + LENGTH_MARGIN * seconds <= owner_start_s + LENGTH_MARGIN * span
