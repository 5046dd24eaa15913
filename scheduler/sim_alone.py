"""One simulator engine played alone to its end: the engine's events written out on locals.

Why. A worker with nobody to share or steal with plays its queue alone: the hedges' and
``kind_scales``' plays of a plan on drawn lengths (``robust_order.drawn_finish``, dozens of queues
of up to 4,096 items a plan), the steal deadlines (``scheduler.deadlines``), a simulation without
stealing, and every worker of a pool once nothing can move between them (``sim_pool``). Stepped
through ``WorkerEngine``'s methods (``process``, ``admit_own``, ``commit``, and the ten they call)
an event is mostly calls and attribute reads; here it is one loop over local variables with the
same rules, the same tests in the same order and the same arithmetic, so every clock, start, end
and eviction is the method-by-method play's to the last bit (a property test compares them), and
the engine is left in the state that play leaves. The rules themselves are ``scheduler.sim_engine``'s
module doc; a subclass of ``WorkerEngine`` (the tests' variants of one rule) plays method by method.
"""

from __future__ import annotations

import heapq

from scheduler.admission import expected_remaining
from scheduler.costmodel import WorkerCost
from scheduler.head_fit import earliest_fit, refused_until, search_from
from scheduler.sim_engine import WorkerEngine
from scheduler.sim_ledger import Ledger
from scheduler.sim_overdue import extend_overdue
from scheduler.sim_stuck import no_completion, too_long
from scheduler.stepsum import decode_time, held_time

_DEAD = (-1, 0, 0)  # alive.get() default: matches no admission token


def play_queue(
    cost: WorkerCost,
    ledger: Ledger,
    *,
    watermark: float,
    kv_admission: bool,
    resume: bool = False,
    held: bool = False,
) -> WorkerEngine:
    """Play every item of ``ledger``, in order, as one worker's queue alone; the played engine.

    The ledger then holds each item's start and end: what the planner's per-worker simulation and
    the steal deadlines (``scheduler.deadlines``) both read; ``held``: the engine sums the KV it
    holds over time (``WorkerEngine.held_s``), which plans do not read.
    """
    engine = WorkerEngine(
        0, cost, ledger, watermark=watermark, kv_admission=kv_admission, resume=resume, held=held
    )
    engine.enqueue(list(range(len(ledger.keys))))
    run_alone(engine)
    return engine


def run_alone(engine: WorkerEngine) -> float:
    """Play ``engine``'s own queue to the end with no other worker involved; return its final clock."""
    engine.admit_own()
    play_out(engine, engine.commit())
    return engine.clock


def play_out(engine: WorkerEngine, pending: float | None) -> None:
    """Continue ``engine`` alone from its committed state (``pending``: its next event) to the end."""
    if pending is None:
        return
    if type(engine) is WorkerEngine:
        _play(engine)
    else:
        play_events(engine, pending)


def play_events(engine: WorkerEngine, pending: float | None) -> None:
    """``play_out`` through the engine's methods, event by event: the reference ``_play`` follows."""
    while pending is not None:
        engine.process()
        engine.admit_own()
        pending = engine.commit()


def _play(e: WorkerEngine) -> None:
    """``play_events`` on locals: process the pending event, admit, commit, until nothing runs."""
    ledger, cost, peak = e.ledger, e.cost, e.peak
    prompts, steps, planned, kept, reserve = (
        ledger.prompts,
        ledger.steps,
        ledger.planned,
        ledger.kept,
        ledger.reserve,
    )
    started, ended, worker, evictions = ledger.start, ledger.end, ledger.worker, ledger.preemptions
    cap, limit, slots, kv, resume, index = e.cap, e.limit, e.max_seqs, e.kv_admission, e.resume, e.index
    queue, waiting, heap, alive, overdue, stack = e.queue, e.waiting, e.heap, e.alive, e.overdue, e.stack
    clock, step, batch, offset, reserved, token, blocked = (  # ``process`` starts at the pending event
        e.event_clock,
        e.step,
        e.batch,
        e.offset,
        e.reserved,
        e.token,
        e.blocked,
    )
    busy, preempted, queued_work, waiting_reserve = e.busy_s, e.preempted, e.queued_work, e.waiting_reserve
    held_s = e.held_s
    run, to_finish, to_fit, refusal, watch = e.pending_run, e.to_finish, e.to_fit, e.refusal, e.watch
    refused, prefill = e.refused, e.prefill_tokens
    while True:
        # process: the pending event (``WorkerEngine.process``)
        if run > 0:
            step += run
            blocked = False
        if run == to_finish:
            running = batch
            while heap and heap[0][0] == step:
                _, held_token, item = heapq.heappop(heap)
                if alive.get(item, _DEAD)[0] == held_token:
                    _, base, end = alive.pop(item)
                    if kv:
                        peak.remove(end, base)
                        if refused is not None and end >= refused[2]:
                            refused = None
                    batch -= 1
                    offset -= base
                    reserved -= reserve[item]
                    ended[item] = clock
            if batch == running:  # timed again at this same step for ever: ``process``'s error
                raise no_completion(cost.worker_id, step, batch, heap[0][0] if heap else None)
        elif run != to_fit:  # evict the newest running sequence (``_preempt_newest``)
            if batch == 1:
                item = next(iter(alive))
                raise too_long(ledger.keys[item], prompts[item], steps[item], cost.worker_id, cap)
            while True:
                held_token, item = stack.pop()
                if alive.get(item, _DEAD)[0] == held_token:
                    break
            _, base, end = alive.pop(item)
            if kv:
                peak.remove(end, base)
                if refused is not None and end >= refused[2]:
                    refused = None
            batch -= 1
            offset -= base
            reserved -= reserve[item]
            if resume:
                kept[item] = base + step - prompts[item]
            waiting.appendleft(item)
            waiting_reserve += reserve[item]
            evictions[item] += 1
            preempted += 1
            blocked = True
        # admit_own: claim as the sidecar does, then admit in order
        if not kv:
            room = slots - batch - len(waiting)
            while room > 0 and queue:
                item = queue.popleft()
                queued_work -= planned[item]
                waiting.append(item)
                waiting_reserve += reserve[item]
                room -= 1
        for line in (waiting, queue):  # the engine's waiting line, then (KV admission) the own queue
            if line is queue and (not kv or waiting):
                break
            if not (batch == 0 or (not blocked and batch < slots)):  # ``WorkerEngine.may_admit``
                continue
            while line:
                item = line[0]
                extra = kept[item]
                if batch:  # ``WorkerEngine.fits``
                    if batch >= slots:
                        break
                    if kv:
                        if refused is not None and refused[0] == item and step < refused[1]:
                            break
                        if overdue and overdue[0][0] <= step:
                            extend_overdue(overdue, alive, peak, ledger, step)
                        end = step + expected_remaining(planned[item], extra)
                        over = peak.overflow(step, prompts[item] + extra - step, end, cap)
                        if over is not None:
                            refusal = (item, step, peak.changes, over)
                            refused = (item, refused_until(peak, step, end - step, over), over[0])
                            break
                    elif offset + batch * step + prompts[item] + extra > limit:
                        break
                line.popleft()
                if line is waiting:
                    waiting_reserve -= reserve[item]
                else:
                    queued_work -= planned[item]
                context = prompts[item] + extra  # ``WorkerEngine._admit``
                if refused is not None and refused[0] == item:
                    refused = None
                token += 1
                end = step + expected_remaining(planned[item], extra)
                alive[item] = (token, context - step, end)
                if kv:
                    peak.add(end, context - step)
                    heapq.heappush(overdue, (end, token, item))
                heapq.heappush(heap, (step + steps[item] - extra, token, item))
                stack.append((token, item))
                batch += 1
                offset += context - step
                reserved += reserve[item]
                prefill += context
                if started[item] < 0.0:
                    started[item] = clock
                worker[item] = index
        # commit: prefill what was admitted, then the next event
        if prefill:
            spent = cost.prefill_time(prefill)
            clock += spent
            busy += spent
            if held_s is not None:
                held_s += (offset + batch * step) * spent
            prefill = 0
        if batch == 0:
            run = -1
            break
        while alive.get(heap[0][2], _DEAD)[0] != heap[0][1]:
            heapq.heappop(heap)
        context = offset + batch * step
        to_finish = heap[0][0] - step
        run = min(to_finish, (cap - context) // batch)
        to_fit = -1  # ``WorkerEngine._steps_to_fit``
        if run > 1 and batch < slots:
            item = waiting[0] if waiting else (-1 if not kv else (queue[0] if queue else watch))
            if item >= 0:
                extra = kept[item]
                if not kv:
                    if blocked and offset + batch * (step + 1) + prompts[item] + extra <= limit:
                        to_fit = 1
                else:
                    if overdue and overdue[0][0] <= step:
                        extend_overdue(overdue, alive, peak, ledger, step)
                    remaining = expected_remaining(planned[item], extra)
                    start = step + 1  # ``WorkerEngine._search_from``
                    if refusal is not None and refusal[:3] == (item, step, peak.changes):
                        start = search_from(peak, step, remaining, refusal[3])
                    elif refused is not None and refused[0] == item:
                        start = max(start, refused[1])
                    if start >= 0:
                        at, _ = earliest_fit(peak, start, prompts[item] + extra, remaining, cap, step + run)
                        if at is not None:
                            to_fit = at - step
        if to_fit >= 0:
            run = to_fit
        spent = decode_time(cost, batch, context, run) if run > 0 else 0.0
        busy += spent
        if held_s is not None and run > 0:
            held_s += held_time(cost, batch, context, run)
        clock += spent
    e.clock, e.step, e.batch, e.offset, e.reserved, e.token, e.blocked = (
        clock,
        step,
        batch,
        offset,
        reserved,
        token,
        blocked,
    )
    e.busy_s, e.preempted, e.queued_work, e.waiting_reserve = busy, preempted, queued_work, waiting_reserve
    e.held_s = held_s
    e.pending_run, e.to_finish, e.to_fit, e.refusal, e.prefill_tokens = (
        run,
        to_finish,
        to_fit,
        refusal,
        prefill,
    )
    e.event_clock, e.refused = clock, refused
