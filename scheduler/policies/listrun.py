"""The loop of tier-aware list scheduling, with its common step written out in one function.

Why. cpsat's band round places every unit with ``lpt_assignment`` on tiers (``ListState``): at
4,096 x 32 that was ~80 ms of a round's ~92, and a 250 ms plan ran its first round only, ending
~160 ms in with ~85 ms left against the ~90 a second round needs (docs/experiments.md, Solver,
helper round2). Per unit the loop called ten to fifteen small methods (``best_worker``,
``join``, ``_ordered``, ``after`` twice, ``place``, ``KvPeaks.add``, ``_park``,
``longest_fitting``, ``refresh``, ``_list``, ``_live_top``), each reading its state through
``self``: calls and attribute reads, not arithmetic, were most of the ~19 us a unit.

How. ``place_units`` runs the step taken by most units inline, on the state's lists bound to
locals: a unit every active worker may take, above the lowest band, scanned in ``ListState.meta``
order (the ordered scan, ``ListState._ordered``), then placed (``ListState.place``) when it is one
trajectory and its worker is not parked. It is the same computation, operation for operation (the
estimate in the same float order, the same ties, the same heaps, look-aheads and parked workers),
so it places every unit where the methods do; any other unit, and any case the inline step does
not cover, calls the methods themselves. ``FUSED`` off runs the methods alone: the reference the
tests compare to, and what their spies on those methods observe.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence

from scheduler import clock, giveup
from scheduler.policies.base import BudgetSpent
from scheduler.policies.listsched import PARKED, ListState
from scheduler.policies.load import Rates
from scheduler.policies.problem import Unit

CHECK_EVERY = 512  # units placed between deadline checks (~5-10 ms of tier-aware placement)
FUSED = True  # off: every unit through ``ListState.best_worker`` and ``place`` (the reference)


def place_units(
    state: ListState,
    order: Sequence[int],
    bands: Sequence[int],
    cap_s: float | None,
    short: int,
    deadline: float | None,
) -> list[int]:
    """Place the units of ``order`` in turn, each on ``state.best_worker`` for its band
    (``bands``, per unit); with ``cap_s``, a unit under ``short`` steps whose worker would end past
    it is set aside instead (``lpt_assignment``): the units set aside, in order. With ``deadline``,
    raises ``BudgetSpent`` once past it (checked every ``CHECK_EVERY`` units, as the caller's hard
    deadline is: ``scheduler.giveup``)."""
    if not FUSED or not state.peaks:
        return _stepwise(state, order, bands, cap_s, short, deadline)
    return _fused(state, order, bands, cap_s, short, deadline)


def _check(deadline: float | None) -> None:
    """Between ``CHECK_EVERY`` units: give up past the caller's hard deadline (``giveup``), and
    raise ``BudgetSpent`` past ``deadline``."""
    giveup.check()
    if deadline is not None and clock.now() > deadline:
        raise BudgetSpent


def _stepwise(
    state: ListState,
    order: Sequence[int],
    bands: Sequence[int],
    cap_s: float | None,
    short: int,
    deadline: float | None,
) -> list[int]:
    """``place_units`` one method call at a time."""
    units, later = state.units, []
    for k, u in enumerate(order):
        if k % CHECK_EVERY == 0:
            _check(deadline)
        unit = units[u]
        worker, after = state.best_worker(unit, bands[u])
        if unit.steps < short and cap_s is not None:
            after = state.estimates.after(worker, unit) if after is None else after
            if after > cap_s:
                later.append(u)
                continue
        state.place(worker, u, after)
    return later


def _fused(
    state: ListState,
    order: Sequence[int],
    bands: Sequence[int],
    cap_s: float | None,
    short: int,
    deadline: float | None,
) -> list[int]:
    """``place_units`` with the ordered scan and the placement inline (module doc)."""
    units, later = state.units, []
    kv, estimates = state.kv, state.estimates
    count, slots, peak, limit, prompt_sum = kv.count, kv.slots, kv.peak, kv.limit, kv.prompt_sum
    least_prompt = kv.least_prompt
    load_steps, load_tokens, load_kv, load_prompt = (
        estimates.load_steps,
        estimates.load_tokens,
        estimates.load_kv,
        estimates.load_prompt,
    )
    coefficients = [_coefficients(r) for r in estimates.rates]
    scale, waves = estimates.scale, estimates.waves
    placed, current, heaps, heap_of = state.placed, state.current, state.heaps, state.heap_of
    tops, ahead, joined, listed, meta = state.tops, state.ahead, state.joined, state.listed, state.meta
    parked, parked_at, to_join = state.parked, state.parked_at, state.to_join
    everyone, parks = state.everyone, state.parks
    heappush, heappop, bisect_left, insort = heapq.heappush, heapq.heappop, bisect.bisect_left, bisect.insort
    for k, u in enumerate(order):
        if k % CHECK_EVERY == 0:
            _check(deadline)
        unit = units[u]
        members, n, u_tokens, u_kv, p, allowed = unit
        b = bands[u]
        worker = -1
        if b > 0 and len(allowed) == everyone:  # ``best_worker``'s ordered scan, inline
            if parked and -parked[0][0] >= n:
                state.unpark_for(n)
            if b != state.band:  # heaps join as bands fall (leave where they rise: the set-aside pass)
                state.join(b)
            if meta:
                single = len(members) == 1
                others: list[tuple[float, int]] = []
                best, best_after = -1, 0.0
                for key, w, h in meta:  # ``ListState._ordered``, step for step
                    if best >= 0 and key > best_after:
                        break
                    if single:
                        c = count[w] + 1
                        fits = peak[w] <= limit[w] and (c > slots[w] or prompt_sum[w] + p + c * n <= limit[w])
                    else:
                        fits = kv.fits(w, unit)
                    if fits:
                        candidate_key, cw = key, w
                    else:
                        deeper = state.fitting_ahead(h, unit)
                        if deeper is None:
                            others.append((key, w))
                            continue
                        candidate_key, cw = deeper
                    if best >= 0 and candidate_key > best_after:
                        continue
                    tokens = load_tokens[cw] + u_tokens  # ``Estimates.after``, operation for operation
                    sc = scale[cw]
                    if waves and count[cw] + len(members) > slots[cw]:
                        sc = waves[cw]  # past its slots: ``Estimates.scale_at``
                    if tokens <= 0:
                        after = sc * 0.0
                    else:
                        per_cache, per_slot, step_s, kv_s, over_s, seq_s, tok_s, prefill_s = coefficients[cw]
                        s, kvs = load_steps[cw], load_kv[cw] + u_kv
                        m: float = s if s > n else n
                        if kvs * per_cache > m:
                            m = kvs * per_cache
                        if tokens * per_slot > m:
                            m = tokens * per_slot
                        mem = m * step_s + kv_s * kvs
                        cmp = m * over_s + seq_s * tokens + tok_s * kvs
                        after = sc * ((mem if mem > cmp else cmp) + prefill_s * (load_prompt[cw] + p))
                    if best < 0 or after < best_after or (after == best_after and cw < best):
                        best, best_after = cw, after
                if best >= 0:
                    worker, placed_after = best, best_after
                else:
                    worker, placed_after = estimates.least_after(others, unit)
                    if worker < 0:
                        worker, placed_after = state.scan(unit, b)
        elif b == 0 and len(allowed) == everyone and not to_join and meta:
            if parked and -parked[0][0] >= n:
                state.unpark_for(n)
            chosen = _lowest_band(state, unit)
            if chosen is not None:
                worker, placed_after = chosen
        if worker < 0:
            worker, maybe = state.best_worker(unit, b)
            placed_after = maybe if maybe is not None else -1.0
        if n < short and cap_s is not None:
            if placed_after < 0.0:
                placed_after = estimates.after(worker, unit)
            if placed_after > cap_s:
                later.append(u)
                continue
        if len(members) != 1 or current[worker] == PARKED:
            state.place(worker, u, placed_after if placed_after >= 0.0 else None)
            continue
        # ``ListState.place``, ``KvPeaks.add`` and ``Estimates.add`` of a single trajectory, inline
        c = count[worker] + 1
        prompts = prompt_sum[worker] + p
        term = prompts + c * n
        if term > peak[worker] and c <= slots[worker]:  # the peak at once: within its slots
            peak[worker] = term
        count[worker], prompt_sum[worker] = c, prompts
        if n > load_steps[worker]:
            load_steps[worker] = n
        load_tokens[worker] += u_tokens
        load_kv[worker] += u_kv
        load_prompt[worker] += p
        placed[worker].append(u)
        if placed_after < 0.0:
            placed_after = estimates.now(worker)
        h = heap_of[worker]
        if parks and (c + 1 <= slots[worker] or peak[worker] > limit[worker]):  # ``ListState._park``,
            room = limit[worker] - prompts - least_prompt
            longest = 0 if peak[worker] > limit[worker] else int(room // (c + 1))  # ``longest_fitting``
            if longest < n:
                current[worker], parked_at[worker] = PARKED, placed_after
                heappush(parked, (-longest, worker))
                state.refresh(h)
                continue
        current[worker] = placed_after
        heap = heaps[h]
        heappush(heap, (placed_after, worker))
        tops[h], ahead[h] = None, None  # ``ListState.refresh`` and ``_list``, inline
        if joined[h]:
            while heap and heap[0][0] != current[heap[0][1]]:
                heappop(heap)
            top = heap[0] if heap else None
            tops[h] = top
            entry = None if top is None else (top[0], top[1], h)
            old = listed[h]
            if entry != old:
                if old is not None:
                    del meta[bisect_left(meta, old)]
                if entry is not None:
                    insort(meta, entry)
                listed[h] = entry
    return later


def _lowest_band(state: ListState, unit: Unit) -> tuple[int, float] | None:
    """``best_worker`` for a lowest-band unit every active worker may take, with every heap in
    ``meta``: each kind's least candidate (a heap's top, or the next that fits, among heaps with
    one that fits), then the least estimate after among them, read in ``meta`` order and stopped
    once no later heap can change either; the estimate after is -1.0 where ``best_worker`` leaves
    it to ``place``. None where fewer candidates fit than there are kinds (``best_worker`` then
    keeps them all, or every top): it decides those itself.

    Why. ``best_worker`` tests every heap's top for each of these units (a tenth of a round's
    units, a sixth of its placement at 4,096 x 32); the tops read in order settle it in a few."""
    kv, kind_of, kinds = state.kv, state.kind_of, len(state.kinds)
    count, slots, peak, limit, prompt_sum = kv.count, kv.slots, kv.peak, kv.limit, kv.prompt_sum
    single, p, n = len(unit.members) == 1, unit.prompt_tokens, unit.steps
    least: dict[int, tuple[float, int]] = {}  # kind -> its least candidate so far
    found, highest = 0, None  # candidates that fit; the greatest of ``least`` once every kind has one
    for key, w, h in state.meta:
        top = (key, w)
        if highest is not None and found > kinds and top > highest:
            break  # a later heap's candidate is no less than its top: every kind's least is settled
        if single:
            c = count[w] + 1
            fits = peak[w] <= limit[w] and (c > slots[w] or prompt_sum[w] + p + c * n <= limit[w])
        else:
            fits = kv.fits(w, unit)
        candidate = top if fits else state.fitting_ahead(h, unit)
        if candidate is None:
            continue
        found += 1
        k = kind_of[candidate[1]]
        if k not in least or candidate < least[k]:
            least[k] = candidate
            if len(least) == kinds:
                highest = max(least.values())
    if found <= kinds:
        return None
    tops = list(least.values())
    if len(tops) == 1:
        return tops[0][1], -1.0
    return state.estimates.least_after(tops, unit)


def _coefficients(r: Rates) -> tuple[float, float, float, float, float, float, float, float]:
    """``r``'s fields in the order ``_fused`` unpacks them."""
    return (r.per_full_cache, r.per_slot, r.step_s, r.kv_s, r.overhead_s, r.seq_s, r.token_s, r.prefill_s)
