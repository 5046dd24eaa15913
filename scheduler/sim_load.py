"""A simulation's inputs checked and loaded: the per-item ledger, the pins, the planned queues.

Why a module of its own. ``scheduler.simulator`` is public: its callers (the replay, the tests, a
user's script) pass trajectories, true lengths and a plan that nothing upstream has validated, so
every one is checked here before any play, each error naming its field (``InvalidInputError``),
and turned into the numbered form the engines play (``Ledger``, item numbers in trajectory order).
What a play then does with them is ``scheduler.simulator``'s and the engines'.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from numbers import Integral, Real

from scheduler.errors import InvalidInputError
from scheduler.sim_engine import WorkerEngine
from scheduler.sim_ledger import Ledger
from scheduler.stepsum import planned_steps
from scheduler.types import Inventory, Plan, Trajectory


def load_ledger(
    trajectories: Sequence[Trajectory], actual: Mapping[str, int], inventory: Inventory
) -> tuple[Ledger, dict[str, int]]:
    """Number the trajectories and check that every one has a true length and a valid pin."""
    position = {w.worker_id: i for i, w in enumerate(inventory.workers)}
    index_of: dict[str, int] = {}
    steps: list[int] = []
    pins: list[int] = []
    for i, t in enumerate(trajectories):
        if t.pinned_worker is not None and t.pinned_worker not in position:
            raise InvalidInputError(
                f"trajectories[{i}].pinned_worker", t.pinned_worker, "not in the inventory"
            )
        pins.append(-1 if t.pinned_worker is None else position[t.pinned_worker])
        key = t.key
        if key in index_of:
            raise InvalidInputError(f"trajectories[{i}]", key, "duplicate trajectory key")
        index_of[key] = i
        steps.append(true_length(key, actual.get(key)))
    ledger = Ledger(
        list(index_of),
        [t.prompt_tokens for t in trajectories],
        steps,
        [_predicted_length(i, t) for i, t in enumerate(trajectories)],
    )
    ledger.pin = pins
    # what an engine must hold for each: prompt + cap (the context length it checks a request against)
    ledger.need = [
        t.prompt_tokens + max(t.max_new_tokens, n) for t, n in zip(trajectories, steps, strict=True)
    ]
    numbers: dict[str, int] = {}
    ledger.group = [numbers.setdefault(t.group, len(numbers)) for t in trajectories]
    return ledger, index_of


def true_length(key: str, n: object) -> int:
    """Trajectory ``key``'s true output length as the engine's step count: an integer >= 0 (numpy
    integers welcome). ``int()`` of whatever came was no check: -5 never reached its end (the engine
    loop hung), 2.5 was cut to 2 and True played as one token."""
    if isinstance(n, bool) or not isinstance(n, Integral) or n < 0:
        raise InvalidInputError(f"actual_tokens[{key}]", n, "must be an integer >= 0 for every trajectory")
    return int(n)


def _predicted_length(index: int, t: Trajectory) -> int:
    """Trajectory ``t``'s (the ``index``-th) predicted length as the decode steps the plan assumed: a
    finite number >= 0 (numpy floats welcome; 0 plans one step, as ``planned_steps`` does). Its
    callers validate predictions, but ``simulate`` is public: NaN raised a field-less ValueError and
    infinity an OverflowError from ``math.ceil``, and a negative one was played silently as one
    token, in KV admission's projected peak, the steal gate and the victim choice."""
    q = t.predicted_tokens
    if isinstance(q, bool) or not isinstance(q, Real) or not math.isfinite(q) or q < 0:
        raise InvalidInputError(
            f"trajectories[{index}].predicted_tokens", q, f"must be a finite number >= 0 (trajectory {t.key})"
        )
    return planned_steps(q)


def pin_whole_groups(ledger: Ledger) -> None:
    """Under prefix affinity a pin on one sample binds its whole group (validation's rule, and the
    planner's: a group's unit may go only to its pinned worker), so every unpinned sample of a pinned
    group is pinned to that worker too. Without this a shared-queue play sent the pinned samples to
    their worker's own queue and left the rest in the FIFO, for any worker to take: a split group.
    Samples pinned elsewhere (a conflict validation refuses) keep their own pin."""
    group_pin: dict[int, int] = {}
    for group, pin in zip(ledger.group, ledger.pin, strict=True):
        if pin >= 0:
            group_pin.setdefault(group, pin)
    if group_pin:
        pins = zip(ledger.group, ledger.pin, strict=True)
        ledger.pin = [pin if pin >= 0 else group_pin.get(group, -1) for group, pin in pins]


def place(
    plan: Plan,
    inventory: Inventory,
    index_of: Mapping[str, int],
    engines: list[WorkerEngine],
    pins: list[int],
) -> deque[int]:
    """Load each worker's planned queue, or return the shared FIFO; every item exactly once.

    A plan is checked here, not trusted: ``simulate`` is public, and a key planned twice or not at
    all would otherwise play a batch the plan never described (each error names the plan's field).
    """
    seen: set[int] = set()
    shared: deque[int] = deque()
    if plan.dispatch_order:
        for item in _numbered(plan.dispatch_order, "plan.dispatch_order", index_of, seen):
            pin = pins[item]
            if pin >= 0:
                engines[pin].enqueue([item])  # a pinned item is never shared: its worker runs it
            else:
                shared.append(item)
    else:
        _load_queues(plan, inventory, index_of, engines, seen)
    if len(seen) != len(index_of):
        missing = next(k for k, i in index_of.items() if i not in seen)
        raise InvalidInputError("plan", missing, "trajectory missing from the plan")
    return shared


def _load_queues(
    plan: Plan, inventory: Inventory, index_of: Mapping[str, int], engines: list[WorkerEngine], seen: set[int]
) -> None:
    """A per-worker plan: each planned queue, in order, onto its worker's engine."""
    position = {w.worker_id: i for i, w in enumerate(inventory.workers)}
    for n, wp in enumerate(plan.workers):
        if wp.worker_id not in position:
            if not wp.items:
                continue  # e.g. an excluded worker the caller left out of the inventory
            raise InvalidInputError(f"plan.workers[{n}].worker_id", wp.worker_id, "not in the inventory")
        engines[position[wp.worker_id]].enqueue(
            _numbered(wp.items, f"plan.workers[{n}].items", index_of, seen)
        )


def _numbered(keys: Sequence[str], field: str, index_of: Mapping[str, int], seen: set[int]) -> list[int]:
    """``keys`` as item numbers, each added to ``seen``: an unknown key, or one already ``seen`` in
    this plan, is an ``InvalidInputError`` on ``field``."""
    out = []
    for key in keys:
        item = index_of.get(key)
        if item is None:
            raise InvalidInputError(field, key, "names no trajectory of the batch")
        if item in seen:
            raise InvalidInputError(field, key, "trajectory planned more than once")
        seen.add(item)
        out.append(item)
    return out
