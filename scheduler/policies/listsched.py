"""The look-up behind list scheduling with tiers: which workers a unit's placement prices.

``scheduler.policies.lpt`` places units longest first, each on the allowed worker whose load
estimate ends earliest once it is added; with tiers (``cpsat``'s realisation of its band counts)
a unit may only go to workers at its band or above, and a worker whose whole queue would no longer
run at once yields to one that still would. Pricing every allowed worker per unit is too slow
(32k units a plan), so this module keeps the structure that finds the winner after pricing a few:
one heap of current estimates per (kind, tier), the ordered scan over the tops of the heaps a
band may use, and the workers parked while no unit fits them. What a worker's estimate is, now
or with a unit added, is ``scheduler.policies.estimates``'s; its all-at-once KV peak is
``scheduler.policies.kvpeak``'s. The loop over units is ``scheduler.policies.listrun``'s, which
runs the common step of these methods inline on this state's lists (its public methods are that
loop's way back in for every other case).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence

from scheduler.policies.estimates import Estimates
from scheduler.policies.kvpeak import KvPeaks
from scheduler.policies.problem import Problem, Unit, worker_kinds

FIT_DEPTH = 4  # heap entries examined for a worker whose KV peak still fits
PARKED = -1.0  # a parked worker's ``current``: no estimate equals it, so its heap entries read stale
ABOVE_ALL = 1 << 62  # ``ListState.band`` before any heap joins: above every band
ORDERED_SCAN = True  # off: every unit scans every candidate heap (the reference the tests compare to)


class ListState:
    """Placements and one heap per (kind, tier) of current load estimates (``estimates``).

    Placing a unit pushes onto one heap only (its worker's), so every other heap keeps the same
    live top: ``tops`` caches each heap's live top until its next push, and a look-up for the next
    unit re-checks only whether that top fits it. The state is plain per-worker and per-heap lists,
    read inline on the hot path (``best_worker`` runs ~7 heap look-ups per unit, 32k units a plan).
    """

    def __init__(
        self,
        problem: Problem,
        tiers: Sequence[int],
        scale: Sequence[float],
        peaks: bool,
        waves: Sequence[float] | None = None,
    ) -> None:
        self.costs, self.tiers, self.units = problem.costs, tiers, problem.units
        workers = len(self.costs)
        self.kv = KvPeaks(problem)  # whether each worker's queue still runs all at once
        # each worker's totals and what a unit would make its estimate (with ``peaks``, past its slots
        # at its ``waves`` scale)
        self.estimates = Estimates(problem, scale, waves if peaks else None, self.kv)
        self.placed: list[list[int]] = [[] for _ in self.costs]
        self.current = [0.0] * workers
        self.kinds = worker_kinds(self.costs, problem.active)
        self.kind_of = {w: k for k, members in enumerate(self.kinds) for w in members}
        index: dict[tuple[int, int], int] = {}  # (kind, tier) -> heap number
        self.heaps: list[list[tuple[float, int]]] = []
        self.heap_of = [-1] * workers  # worker -> its heap number
        for k, members in enumerate(self.kinds):
            for w in members:
                h = index.setdefault((k, tiers[w]), len(index))
                if h == len(self.heaps):
                    self.heaps.append([])
                self.heaps[h].append((0.0, w))
                self.heap_of[w] = h
        self.groups = sorted(index.items())  # ((kind, tier), heap number), by (kind, tier)
        self.tops: list[tuple[float, int] | None] = [None] * len(self.heaps)  # live top, until a push
        self.ahead: list[list[tuple[float, int]] | None] = [None] * len(self.heaps)  # see _look_ahead
        # (id(allowed), band) -> the heap numbers to consult; [] when allowed is not made of whole kinds
        self.candidates: dict[tuple[int, int], list[int]] = {}
        self.peaks = peaks  # pass over workers whose queue would no longer run at once (cpsat)
        # the ordered scan (``_ordered``): units every active worker may take, above the lowest band
        ordered = ORDERED_SCAN and peaks and len(problem.active) > 8  # (else ``_kinds_of`` scans)
        self.everyone = len(problem.active) if ordered else -1
        # (estimate, worker, heap): each joined heap's live top, kept sorted (``_list``)
        self.meta: list[tuple[float, int, int]] = []
        self.listed: list[tuple[float, int, int] | None] = [None] * len(self.heaps)  # heap's entry there
        self.joined = [False] * len(self.heaps)
        self.to_join = sorted(((tier, h) for (_, tier), h in self.groups), reverse=True)  # highest first
        self.band = ABOVE_ALL  # ``meta`` holds every heap of tier >= this band, and no other (``join``)
        # parked: out of their heaps while no unit this long fits them (``_park``; single units only)
        self.parks = peaks and len(problem.units) == len(problem.steps)
        self.parked: list[tuple[int, int]] = []  # (-longest unit that may fit, worker)
        self.parked_at = [0.0] * workers  # a parked worker's estimate (its ``current`` reads PARKED)

    def place(self, worker: int, u: int, after: float | None) -> None:
        """Put unit ``u`` on ``worker`` and refresh its estimate (``after``, when already known)."""
        unit = self.units[u]
        if self.current[worker] == PARKED:  # parked, chosen because nothing fitted (``scan``)
            self.parked.remove(next(e for e in self.parked if e[1] == worker))
            heapq.heapify(self.parked)
        if self.peaks:
            self.kv.add(worker, unit)
        self.estimates.add(worker, unit)
        self.placed[worker].append(u)
        if after is None:
            after = self.estimates.now(worker)
        if self.parks and self._park(worker, unit.steps, after):
            self.refresh(self.heap_of[worker])  # its entries there are stale now
            return
        self.current[worker] = after
        h = self.heap_of[worker]
        heapq.heappush(self.heaps[h], (after, worker))
        self.refresh(h)

    def refresh(self, h: int) -> None:
        """Heap ``h`` changed: drop its cached top and look-ahead, and keep the ordered scan's view
        (the heap's live top, once)."""
        self.tops[h], self.ahead[h] = None, None
        if self.joined[h]:
            self._list(h, self._live_top(self.heaps[h]))

    def _list(self, h: int, top: tuple[float, int] | None) -> None:
        """Cache ``top`` as heap ``h``'s live top and make it ``h``'s one entry in ``meta``, which
        stays sorted: the ordered scan then reads the entries in order without popping them, and
        holds no stale ones. (A heap of tops, each pushed on change and stale ones skipped on the
        way, cost ~a sixth of a band round in pops and pushes: five a unit.)"""
        self.tops[h] = top
        entry = None if top is None else (top[0], top[1], h)
        old, meta = self.listed[h], self.meta
        if entry == old:
            return
        if old is not None:
            del meta[bisect.bisect_left(meta, old)]
        if entry is not None:
            bisect.insort(meta, entry)
        self.listed[h] = entry

    def _park(self, w: int, steps: int, after: float) -> bool:
        """Take ``w`` out of its heap while no unit ``steps`` long can fit it
        (``KvPeaks.longest_fitting``), since units only get shorter. Heaps full of such workers
        made each unit look past them (~10 ``fits`` a unit at 32,768 x 256; parked: ~4, and the
        placement 6-11% faster at 16,384 x 128 and up). ``unpark_for`` puts them back.
        """
        longest = self.kv.longest_fitting(w)
        if longest is None or longest >= steps:
            return False  # past its slots every unit fits (within its cache there); or one this long may
        self.current[w], self.parked_at[w] = PARKED, after
        heapq.heappush(self.parked, (-longest, w))
        return True

    def unpark_for(self, steps: int) -> None:
        """Put back every parked worker that a unit of ``steps`` steps may fit again."""
        parked = self.parked
        while parked and -parked[0][0] >= steps:
            w = heapq.heappop(parked)[1]
            self.current[w] = self.parked_at[w]
            h = self.heap_of[w]
            heapq.heappush(self.heaps[h], (self.current[w], w))
            self.refresh(h)

    def best_worker(self, unit: Unit, band: int) -> tuple[int, float | None]:
        """The allowed worker (tier >= band if any) whose estimate after adding ``unit`` is least,
        and that estimate when it was computed on the way."""
        if self.parked:
            self.unpark_for(unit.steps)
        if band > 0 and len(unit.allowed) == self.everyone:
            self.join(band)
            if self.meta:
                worker, after = self._ordered(unit)
                return (worker, after) if worker >= 0 else self.scan(unit, band)
        key = (id(unit.allowed), band)
        heaps = self.candidates.get(key)
        if heaps is None:
            heaps = self.candidates[key] = self._candidate_heaps(unit.allowed, band)
        if not heaps:
            return self.scan(unit, band)
        tops = self._tops(heaps, unit)
        if not tops:  # every candidate is parked: none fits, so the least estimate after decides
            return self.scan(unit, band)
        if band == 0 and len(tops) > len(self.kinds):
            # Short units (the lowest band, half of them) change a worker's estimate by a sliver:
            # the least-loaded worker of each kind is the candidate, as in plain LPT.
            per_kind: dict[int, tuple[float, int]] = {}
            kind_of = self.kind_of
            for top in tops:
                k = kind_of[top[1]]
                if k not in per_kind or top < per_kind[k]:
                    per_kind[k] = top
            tops = list(per_kind.values())
        if len(tops) == 1:
            return tops[0][1], None
        return self.estimates.least_after(tops, unit)

    def scan(self, unit: Unit, band: int) -> tuple[int, float]:
        """The least estimate after ``unit`` over every allowed worker at ``band`` or above (all
        allowed workers where none is), among those that still run at once with it when any does
        (with ``peaks``): where the heaps have no candidate to offer, as for pools of 8 or fewer."""
        pool = [w for w in unit.allowed if self.tiers[w] >= band] or list(unit.allowed)
        if self.peaks:
            pool = [w for w in pool if self.kv.fits(w, unit)] or pool
        after, worker = min((self.estimates.after(w, unit), w) for w in pool)
        return worker, after

    def join(self, band: int) -> None:
        """Make the ordered scan's heaps exactly those of tier ``>= band``: the heaps a unit of
        ``band`` may use. Units arrive longest first, so bands mostly fall and heaps only join; but
        the units a cap set aside are placed in a second pass, longest first again, where bands rise
        once: the heaps below the new band leave first (else their workers, a tier too low, won
        the scan: 44 of 440 such units at 2,048 x 64 seed 2; docs/experiments.md, Solver, 2026-12-05
        "tierfix")."""
        if band > self.band:
            self._leave_below(band)
        while self.to_join and self.to_join[0][0] >= band:
            h = self.to_join.pop(0)[1]
            self.joined[h] = True
            self._list(h, self._live_top(self.heaps[h]))
        self.band = band

    def _leave_below(self, band: int) -> None:
        """Take every joined heap of tier below ``band`` out of the ordered scan, back to ``to_join``."""
        for (_, tier), h in self.groups:
            if tier < band and self.joined[h]:
                self.joined[h] = False
                self._list(h, None)  # its entry leaves ``meta``
                self.to_join.append((tier, h))
        self.to_join.sort(reverse=True)  # in place: ``listrun`` holds it

    def _ordered(self, unit: Unit) -> tuple[int, float]:
        """``best_worker`` for a unit that every joined heap may take, scanning heaps by their top's
        estimate and stopping at the first top already above the best estimate-after found: a
        heap's candidates only come later and an estimate never falls, so none beyond can win.
        The same choice as scanning every heap (``_tops`` then ``least_after``): least estimate
        after, ties to the lower worker, among workers that still run at once when any does. At
        the higher bands (tens of heaps with a grid of bands) it looks at 2-4."""
        kv = self.kv
        others: list[tuple[float, int]] = []
        best, best_after = -1, 0.0
        single = len(unit.members) == 1
        count, slots, peak, limit, prompt_sum = kv.count, kv.slots, kv.peak, kv.limit, kv.prompt_sum
        p, n = unit.prompt_tokens, unit.steps
        for key, w, h in self.meta:  # sorted, every entry live (``_list``); nothing here changes it
            if best >= 0 and key > best_after:
                break
            top = (key, w)  # the heap's live top (``tops[h]``)
            if single:  # ``KvPeaks.fits`` inlined, as in ``_tops``: two calls a unit, ~a fifth of it
                c = count[w] + 1
                fits = peak[w] <= limit[w] and (c > slots[w] or prompt_sum[w] + p + c * n <= limit[w])
            else:
                fits = kv.fits(w, unit)
            candidate = top if fits else self.fitting_ahead(h, unit)
            if candidate is None:
                others.append(top)
            elif best < 0 or candidate[0] <= best_after:
                after = self.estimates.after(candidate[1], unit)
                if best < 0 or after < best_after or (after == best_after and candidate[1] < best):
                    best, best_after = candidate[1], after
        return (best, best_after) if best >= 0 else self.estimates.least_after(others, unit)

    def fitting_ahead(self, h: int, unit: Unit) -> tuple[float, int] | None:
        """The first of the next few entries of heap ``h`` whose worker still fits ``unit``."""
        for entry in (self.ahead[h] or self._look_ahead(h))[1:]:
            if self.kv.fits(entry[1], unit):
                return entry
        return None

    def _tops(self, heaps: list[int], unit: Unit) -> list[tuple[float, int]]:
        """The candidate entry of each heap: with ``peaks``, the tops whose worker still fits
        ``unit`` (or one of the next few, ``_look_ahead``) when any does, else every heap's live top."""
        cached, all_heaps = self.tops, self.heaps
        if not self.peaks:
            tops = []
            for h in heaps:
                top = cached[h]
                if top is None:
                    top = cached[h] = self._live_top(all_heaps[h])
                if top is not None:
                    tops.append(top)
            return tops
        fitting: list[tuple[float, int]] = []
        others: list[tuple[float, int]] = []
        single = len(unit.members) == 1
        kv = self.kv
        count, slots, peak, limit, prompt_sum = kv.count, kv.slots, kv.peak, kv.limit, kv.prompt_sum
        p, n = unit.prompt_tokens, unit.steps
        for h in heaps:
            top = cached[h]
            if top is None:
                top = cached[h] = self._live_top(all_heaps[h])
                if top is None:
                    continue
            w = top[1]
            if single:  # ``KvPeaks.fits`` inlined: the common case
                c = count[w] + 1
                fits = peak[w] <= limit[w] and (c > slots[w] or prompt_sum[w] + p + c * n <= limit[w])
            else:
                fits = self.kv.fits(w, unit)
            if fits:
                fitting.append(top)
                continue
            deeper = self.fitting_ahead(h, unit)
            if deeper is not None:
                fitting.append(deeper)
            else:
                others.append(top)
        return fitting or others

    def _live_top(self, heap: list[tuple[float, int]]) -> tuple[float, int] | None:
        """The least entry of ``heap`` that is still its worker's estimate: a placement pushes a new
        entry rather than updating the old one, so older entries are dropped here, lazily."""
        current = self.current
        while heap and heap[0][0] != current[heap[0][1]]:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def _look_ahead(self, h: int) -> list[tuple[float, int]]:
        """The ``FIT_DEPTH`` least-loaded live entries of heap ``h``, least first (cached until
        its next push): where a unit looks when the top's worker would no longer run at once."""
        heap, current = self.heaps[h], self.current
        seen: list[tuple[float, int]] = []
        while heap and len(seen) < FIT_DEPTH:
            entry = heapq.heappop(heap)
            if entry[0] == current[entry[1]]:
                seen.append(entry)  # else stale: dropped
        for entry in seen:
            heapq.heappush(heap, entry)
        self.ahead[h] = seen
        return seen

    def _candidate_heaps(self, allowed: Sequence[int], band: int) -> list[int]:
        """The (kind, tier) heap numbers to look at for ``allowed`` at ``band``; empty: scan ``allowed``."""
        kinds = self._kinds_of(allowed)
        if kinds is None:
            return []
        groups = [h for (k, tier), h in self.groups if k in kinds and tier >= band]
        return groups or [h for (k, _), h in self.groups if k in kinds]

    def _kinds_of(self, allowed: Sequence[int]) -> list[int] | None:
        """The kinds ``allowed`` consists of, when it is made of whole kinds and worth heap look-ups."""
        if len(allowed) <= 8:
            return None
        counts: dict[int, int] = {}
        for w in allowed:
            counts[self.kind_of[w]] = counts.get(self.kind_of[w], 0) + 1
        whole = all(len(self.kinds[k]) == n for k, n in counts.items())
        return sorted(counts) if whole else None
