"""The worker model's event loops written out on locals: what ``finish.worker_finish`` runs.

Why. The planner plays a worker's queue for every candidate order of every crowded worker, for
every round, refinement and hedge: on the 6-step long chain-of-thought replay about 4,900 plays
of up to 4,096 items, close to half of the replay's CPU. ``finish._WorkerRun`` states the rules
one method each (admission, the projected-peak test and its skips, the refused head's wait, a
step run, a preemption); as one loop over local variables the same events cost a fraction of the
attribute reads and method calls. Each loop here is that class's play: the same events, the same
arithmetic in the same order, so the same clock to the last bit (property tests compare them).
A run of decode steps is ``stepsum.decode_time`` written out where one term leads the whole run (all
but ~0.3% of events; the rest call it), and a prefill ``WorkerCost.prefill_time``, on the cost's
fields read once a play: that cut a cpsat band round's ordering by ~14% at 4,096 x 32.

A play stopped at a bound (``stop_at``: the best order so far, the plateau pass's latest finish)
ends as soon as its clock plus a lower bound of the work left (``_sure``) passes the bound, and
reports that sum: at least the bound, at most the finish. Below the bound every play is the whole
play, to the last bit; the loops keep the work left as exact integers beside the clock.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from operator import mul

from scheduler.admission import WATERMARK, RunningPeak, expected_remaining
from scheduler.costmodel import WorkerCost
from scheduler.head_fit import earliest_fit, refused_until
from scheduler.stepsum import decode_time


def prompt_only_finish(
    cost: WorkerCost, prompts: Sequence[int], steps: Sequence[int], stop_at: float
) -> float:
    """``_WorkerRun`` without ``reserve``, as one loop over locals: the same events and the same
    arithmetic in the same order (so the same result to the last bit), a fifth less time. It runs
    for every candidate order of every crowded worker, a few hundred thousand events a plan."""
    cap, slots = cost.kv_capacity_tokens, cost.max_num_seqs
    limit = cap - WATERMARK * cap
    mem_base_s, mem_token_s, seq_s, token_s, prefill_s, overhead_s, time_scale = _terms(cost)
    waiting: deque[int] = deque(range(len(prompts)))
    heap: list[tuple[int, int, int]] = []  # (finish step, admission token, item)
    alive: dict[int, tuple[int, int]] = {}  # running item -> (admission token, admission step)
    stack: list[tuple[int, int]] = []  # (token, item) in admission order, for preemption
    clock, step, batch, offset, token, blocked = 0.0, 0, 0, 0, 0, False
    check_at, totals = _bounded(prompts, steps, stop_at)
    spent_kv = spent_tokens = fed = 0  # KV-token-steps and tokens decoded, prompt tokens prefilled
    last_end = 0  # the latest running item's end step or less, -1 once that item is preempted
    # (``_longest_left`` finds it again): an admission after that keeps only its own
    gone = (-1, 0)
    heappush, heappop, popleft, alive_get, admit = (
        heapq.heappush,
        heapq.heappop,
        waiting.popleft,
        alive.get,
        stack.append,
    )
    while True:
        if not blocked or batch == 0:  # admission in queue order while a slot and the prompt fit
            prefill_tokens = 0
            while waiting:
                item = waiting[0]
                if batch and (batch >= slots or offset + batch * step + prompts[item] > limit):
                    break
                popleft()
                token += 1
                alive[item] = (token, step)
                ends = step + steps[item]
                heappush(heap, (ends, token, item))
                last_end = ends if ends > last_end else last_end
                admit((token, item))
                batch += 1
                offset += prompts[item] - step
                prefill_tokens += prompts[item]
            if prefill_tokens:  # ``WorkerCost.prefill_time``, inline
                compute = prefill_s * prefill_tokens
                clock += time_scale * ((mem_base_s if mem_base_s > compute else compute) + overhead_s)
                fed += prefill_tokens
        if batch == 0:
            return clock
        if clock >= check_at:  # never without a finite ``stop_at``
            rest = (totals[0] - spent_kv, totals[1] - spent_tokens, totals[2] - fed)
            done, check_at = _look(
                cost, clock, stop_at, rest, _longest_left(steps, waiting, alive, step, last_end)
            )
            if done is not None:
                return done
        while alive_get(heap[0][2], gone)[0] != heap[0][1]:
            heappop(heap)
        to_finish = heap[0][0] - step
        context = offset + batch * step
        room = (cap - context) // batch
        run = room if room < to_finish else to_finish  # ``min``, without the call
        # the evicted sequence re-enters one step on if the room its eviction made holds its prompt
        refit = blocked and run > 1 and batch < slots and context + batch + prompts[waiting[0]] <= limit
        if refit:
            run = 1
        if run > 0:  # ``stepsum.decode_time``, inline where one term leads the whole run
            grow = float(batch)
            mem_a, mem_s = mem_base_s + mem_token_s * context, mem_token_s * grow
            cmp_a, cmp_s = seq_s * batch + token_s * context, token_s * grow
            diff_a = mem_a - cmp_a
            end = diff_a + (mem_s - cmp_s) * (run - 1)
            if diff_a >= 0 and end >= 0:
                clock += time_scale * (run * mem_a + mem_s * (run - 1) * run / 2.0 + overhead_s * run)
            elif diff_a <= 0 and end <= 0:
                clock += time_scale * (run * cmp_a + cmp_s * (run - 1) * run / 2.0 + overhead_s * run)
            else:  # the lead changes within the run (~0.3% of events)
                clock += decode_time(cost, batch, context, run)
            step += run
            blocked = False
            spent_kv += run * context + batch * run * (run - 1) // 2
            spent_tokens += batch * run
        if run == to_finish:
            while heap and heap[0][0] == step:
                _, admitted_token, item = heappop(heap)
                if alive_get(item, gone)[0] == admitted_token:
                    batch -= 1
                    offset -= prompts[item] - alive.pop(item)[1]
            continue
        if refit:
            continue
        while True:  # preempt the newest running sequence
            admitted_token, item = stack.pop()
            if alive.get(item, gone)[0] == admitted_token:
                break
        batch -= 1
        admitted = alive.pop(item)[1]
        offset -= prompts[item] - admitted
        lost = step - admitted  # its decoded steps, to be decoded again
        last_end = -1 if admitted + steps[item] == last_end else last_end  # unknown: ``_longest_left``
        spent_kv -= lost * prompts[item] + lost * (lost - 1) // 2
        spent_tokens -= lost
        fed -= prompts[item]
        waiting.appendleft(item)
        blocked = True


def reserve_finish(cost: WorkerCost, prompts: Sequence[int], steps: Sequence[int], stop_at: float) -> float:
    """``_WorkerRun`` with ``reserve`` (projected-peak admission), as one loop over locals.

    The rules and the skipped tests are the class's, in its order (its methods' docs say why each
    skip is exact): a refused head is not tested again before the step its refusal rules out
    (``refused``); a candidate is admitted untested where the wait search found it fits at this
    very step (``fits_at``) or where the final sizes admitted since the set was last empty plus its
    own fit the cache (``held_bound``); else ``RunningPeak.overflow`` decides. Between events a
    refused head's first fitting step is searched (``head_fit.earliest_fit``). The running set's
    ends come from one list of each item's expected remaining steps, as ``_WorkerRun`` computes
    them one call at a time.
    """
    cap, slots = cost.kv_capacity_tokens, cost.max_num_seqs
    mem_base_s, mem_token_s, seq_s, token_s, prefill_s, overhead_s, time_scale = _terms(cost)
    remaining = [expected_remaining(n, 0) for n in steps]  # exact lengths: none outlives its end
    waiting: deque[int] = deque(range(len(prompts)))
    heap: list[tuple[int, int, int]] = []  # (finish step, admission token, item)
    alive: dict[int, tuple[int, int]] = {}  # running item -> (admission token, admission step)
    stack: list[tuple[int, int]] = []  # (token, item) in admission order, for preemption
    peak = RunningPeak(alone_fits=True)  # finish._WorkerRun's reason holds here too
    add, remove, overflow = peak.add, peak.remove, peak.overflow
    clock, step, batch, offset, token, blocked = 0.0, 0, 0, 0, 0, False
    check_at, totals = _bounded(prompts, steps, stop_at)
    spent_kv = spent_tokens = fed = last_end = 0  # as in ``prompt_only_finish``
    refused: tuple[int, int, int] | None = None  # (item, first step it may fit, step refused at next)
    fits_at: tuple[int, int] | None = None  # (item, step) the wait search found it fits at
    held_bound = 0  # at least the KV the running set projects at any step ahead
    gone = (-1, 0)
    while True:
        if not blocked or batch == 0:
            prefill_tokens = 0
            while waiting:
                item = waiting[0]
                if batch:
                    if batch >= slots:
                        break
                    if refused is not None and refused[0] == item and step < refused[1]:
                        break
                    left = remaining[item]
                    if fits_at == (item, step):
                        fits_at = None
                    elif held_bound + prompts[item] + left > cap:
                        over = overflow(step, prompts[item] - step, step + left, cap)
                        if over is not None:
                            stuck = step if over[0] == step + 1 else -1
                            refused = (item, refused_until(peak, step, left, over), stuck)
                            break
                    refused = None
                waiting.popleft()
                token += 1
                alive[item] = (token, step)
                left = remaining[item]
                add(step + left, prompts[item] - step)
                held_bound = min(held_bound + prompts[item] + left, cap)
                ends = step + steps[item]
                heapq.heappush(heap, (ends, token, item))
                last_end = ends if ends > last_end else last_end
                stack.append((token, item))
                batch += 1
                offset += prompts[item] - step
                prefill_tokens += prompts[item]
            if prefill_tokens:  # ``WorkerCost.prefill_time``, inline
                compute = prefill_s * prefill_tokens
                clock += time_scale * ((mem_base_s if mem_base_s > compute else compute) + overhead_s)
                fed += prefill_tokens
        if batch == 0:
            return clock
        if clock >= check_at:  # never without a finite ``stop_at``
            rest = (totals[0] - spent_kv, totals[1] - spent_tokens, totals[2] - fed)
            done, check_at = _look(
                cost, clock, stop_at, rest, _longest_left(steps, waiting, alive, step, last_end)
            )
            if done is not None:
                return done
        while alive.get(heap[0][2], gone)[0] != heap[0][1]:
            heapq.heappop(heap)
        to_finish = heap[0][0] - step
        context = offset + batch * step
        run = min(to_finish, (cap - context) // batch)
        to_fit = -1
        if waiting and run > 1 and batch < slots:  # the refused head's first fitting step
            item = waiting[0]
            start = step + 1
            if refused is not None and refused[0] == item:
                start = -1 if refused[2] == step else max(start, refused[1])
            if start >= 0:
                fit, bound = earliest_fit(peak, start, prompts[item], remaining[item], cap, step + run)
                refused = (item, bound, -1)
                if fit is None:
                    fits_at = None
                else:
                    fits_at = (item, fit)
                    to_fit = run = fit - step
        if run > 0:  # ``stepsum.decode_time``, inline where one term leads the whole run
            grow = float(batch)
            mem_a, mem_s = mem_base_s + mem_token_s * context, mem_token_s * grow
            cmp_a, cmp_s = seq_s * batch + token_s * context, token_s * grow
            diff_a = mem_a - cmp_a
            end = diff_a + (mem_s - cmp_s) * (run - 1)
            if diff_a >= 0 and end >= 0:
                clock += time_scale * (run * mem_a + mem_s * (run - 1) * run / 2.0 + overhead_s * run)
            elif diff_a <= 0 and end <= 0:
                clock += time_scale * (run * cmp_a + cmp_s * (run - 1) * run / 2.0 + overhead_s * run)
            else:  # the lead changes within the run (~0.3% of events)
                clock += decode_time(cost, batch, context, run)
            step += run
            blocked = False
            spent_kv += run * context + batch * run * (run - 1) // 2
            spent_tokens += batch * run
        if run == to_finish:
            while heap and heap[0][0] == step:
                _, admitted_token, item = heapq.heappop(heap)
                if alive.get(item, gone)[0] == admitted_token:
                    admitted = alive.pop(item)[1]
                    batch -= 1
                    offset -= prompts[item] - admitted
                    remove(admitted + remaining[item], prompts[item] - admitted)
                    if batch == 0:
                        held_bound = 0
            continue
        if run == to_fit:
            continue
        refused = None  # the evicted sequence had not ended: later projections change
        while True:  # preempt the newest running sequence
            admitted_token, item = stack.pop()
            if alive.get(item, gone)[0] == admitted_token:
                break
        admitted = alive.pop(item)[1]
        batch -= 1
        offset -= prompts[item] - admitted
        remove(admitted + remaining[item], prompts[item] - admitted)
        if batch == 0:
            held_bound = 0
        lost = step - admitted
        last_end = -1 if admitted + steps[item] == last_end else last_end
        spent_kv -= lost * prompts[item] + lost * (lost - 1) // 2
        spent_tokens -= lost
        fed -= prompts[item]
        waiting.appendleft(item)
        blocked = True


def _terms(cost: WorkerCost) -> tuple[float, float, float, float, float, float, float]:
    """``cost``'s fields in the order the loops unpack them: what ``stepsum.decode_time`` and
    ``WorkerCost.prefill_time`` read, bound once a play instead of once an event."""
    return (
        cost.mem_base_s,
        cost.mem_per_token_s,
        cost.flops_per_seq_s,
        cost.flops_per_token_s,
        cost.prefill_per_token_s,
        cost.overhead_s,
        cost.time_scale,
    )


MARGIN = 1e-9  # ``_sure``'s bound is taken this much (relatively) lower: the loops' clock and the bound
# add the same times in different orders, ~1e-13 apart after a play's thousand events


def _bounded(
    prompts: Sequence[int], steps: Sequence[int], stop_at: float
) -> tuple[float, tuple[int, int, int]]:
    """Where a play first looks at ``_sure`` (at once with a finite ``stop_at``, never without), and
    the queue's KV-token-steps, decode tokens and prompt tokens (``_sure``'s totals; zeros without)."""
    if stop_at == math.inf:
        return math.inf, (0, 0, 0)
    tokens = sum(steps)
    kv = sum(map(mul, prompts, steps)) + (sum(map(mul, steps, steps)) - tokens) // 2
    return 0.0, (kv, tokens, sum(prompts))


def _sure(cost: WorkerCost, clock: float, kv: int, tokens: int, prompt: int, longest: int) -> float:
    """At most the finish of a play at ``clock`` with ``kv`` KV-token-steps and ``tokens`` decode tokens
    left to decode and ``prompt`` tokens left to prefill (less ``MARGIN``).

    Why. A play stopped at a bound (the best order so far, the plateau pass's latest finish) used to
    run until its clock reached it, though most of what such a play decides is known long before: a
    candidate order 10% slower than the best, a queue that cannot end before the latest worker.
    The loops keep the work left as exact integers, and this bound lets them stop as soon as it is
    past ``stop_at``: every later decode step reads at most the cache (so at least ``kv / cap``
    steps remain) and runs at most ``max_num_seqs`` sequences; a step costs at least its memory
    term and at least its compute term, so the steps left cost at least the larger sum of each;
    prefill costs at least its compute. Preemption only adds work. It sits 10-17% below a
    cache-bound 910B's finish at a play's start and closes in as the play goes on. The loops look
    again only when the clock has advanced by what the bound still lacks (the sum of the clock and
    the bound grows no faster than the clock but on a preemption), a few dozen looks a play.
    """
    steps = max(longest, -(-tokens // cost.max_num_seqs), -(-kv // cost.kv_capacity_tokens))
    memory = cost.mem_base_s * steps + cost.mem_per_token_s * kv
    compute = cost.flops_per_seq_s * tokens + cost.flops_per_token_s * kv
    least = (
        (memory if memory > compute else compute)
        + cost.overhead_s * steps
        + cost.prefill_per_token_s * prompt
    )
    sure = clock + cost.time_scale * least
    return sure - MARGIN * sure


def _look(
    cost: WorkerCost, clock: float, stop_at: float, rest: tuple[int, int, int], longest: int
) -> tuple[float | None, float]:
    """A stopped play's look at its bound, shared by both loops: what the play reports where it stops
    (its clock past ``stop_at``, or ``_sure``'s bound past it), else None and the clock of the next
    look, which comes no sooner than the bound could reach ``stop_at`` (``_sure``)."""
    if clock >= stop_at:
        return clock, stop_at
    sure = _sure(cost, clock, *rest, longest)
    if sure >= stop_at:
        return sure, stop_at
    return None, clock + (stop_at - sure)


def _longest_left(
    steps: Sequence[int], waiting: deque[int], alive: dict[int, tuple[int, int]], step: int, last_end: int
) -> int:
    """At most the decode steps the longest item left needs: the latest running item's (``last_end``,
    kept at admission; -1 after the preemption of the one that held it, then found again), and the
    longer of the waiting line's ends (a subset's longest is still at most the longest: each
    candidate order keeps its longest waiting items at an end, a head of the longest or a tail that
    grows), so a look costs a few reads, not the running set's up to 256 items."""
    longest = max(steps[waiting[0]], steps[waiting[-1]]) if waiting else 0
    if last_end < 0:
        last_end = max([steps[item] + admitted for item, (_, admitted) in alive.items()], default=0)
    return max(longest, last_end - step)
