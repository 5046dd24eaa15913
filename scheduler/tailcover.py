"""The fluid cover of limit (d): how much of the batch's work the workers can take, trajectory by trajectory.

Why not bands. The band model (``scheduler.tailbands``) credits a worker with the *lower edge* of its
band's lengths, so its bound is only as tight as its grid; a grid every 1/32 of the longest length
is 2.5-3% tighter than quantile bands and costs a CP-SAT proof of 50-150 ms per probe. Here every
trajectory is its own band, and the question "can the workers take all the work by ``T``?" is
answered exactly, for the fluid relaxation, by a dynamic programme over worker counts instead of a
solver.

The relaxation. Sort the trajectories longest first and lay their demands (KV-token-steps plus
credited prefill, ``scheduler.tailbound``) end to end. A worker whose longest trajectory has ``L``
steps serves at most ``cap_c(L)`` of demand by ``T`` (``KindLimits.serves``: non-increasing in
``L``). In any schedule, list the workers by their longest trajectory, longest first: all
trajectories longer than the ``k+1``-th worker's longest sit on the first ``k``. So if the first
``k`` workers cover a prefix ``x`` of the laid-out demand, the next one can be credited with
``cap(L(x))``, ``L(x)`` the length of the first trajectory not fully covered, and never less than
it really serves: by induction the best coverage over every order of kinds,

    f(a) = max over kinds c with a_c >= 1 of  next_c(f(a - e_c)),    next_c(x) = x + cap_c(L(x)),

is at least the total demand whenever some schedule finishes by ``T`` (``next_c`` is increasing in
``x``, so the maximum over orders is the best prefix). A shortfall proves that none does.

Cost. ``f`` has one state per combination of worker counts, ``prod(n_c + 1)`` (16,641 for 128 + 128
workers); the states with ``sum(a) = d`` depend only on those with ``d - 1``, so one vectorised step
per worker (two kinds, the common inventory, on contiguous slices; one kind is a scalar chain).
Beyond ``MAX_STATES`` the two smallest kinds are merged into one whose capacity is the larger of
theirs at every length: more capacity than either, still a relaxation, only looser.

Speeds within a kind. Learned speeds give every worker its own time scale; a kind is then a family
of identical coefficients whose members differ in speed, cut into speed groups fastest first (a
group credited at its fastest member's capacity). The ``a``-th worker of a kind the programme places
is credited as its ``a``-th fastest member (``ranked_credits``): the state space stays one dimension
a kind. Why that is valid: every real worker is credited at least its own capacity by its rank's
credit, and swapping two members of one kind so that the faster comes first never lowers the cover
when the faster's advantage ``delta(x)`` never grows with the covered prefix ``x`` (the earlier
worker gains ``delta`` at the front, every later ``next`` keeps a lead of at least that, and the
later one gives back ``delta`` at a larger ``x``, no more). ``ranked_credits`` makes the credits so:
each group's credit is the previous one's less the largest advantage that is non-decreasing in the
length and no more than the true one (a running minimum from the longest length), so no credit is
below its group's capacity. Equal speeds (one group a kind) are the programme above, float for float.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scheduler.stepsum import FloatArray

IntArray = npt.NDArray[np.int64]
MAX_STATES = 1 << 16  # states of the programme; beyond, kinds are merged (a looser relaxation): at
# 512 + 512 workers the exact programme (263k states) took ~0.4 s a bound, merged ~0.1 s, 0.5% lower
Planes = tuple[tuple[IntArray, tuple[tuple[IntArray, IntArray], ...]], ...]


@dataclass(frozen=True, slots=True)
class Layout:
    """The batch's trajectories longest first, shared by every exchange rate's cover."""

    order: IntArray  # trajectory indices, longest first (stable)
    lengths: FloatArray  # the distinct lengths, longest first: capacities are asked for these only
    expand: IntArray  # expand[i]: index in ``lengths`` of the i-th longest trajectory; one more
    # entry, past the last trajectory, points at the shortest length


def layout(lengths: IntArray) -> Layout:
    """Sort once: the distinct lengths are what ``KindLimits.serves_many`` is evaluated on."""
    order = np.argsort(-lengths, kind="stable")
    negated, expand = np.unique(-lengths[order], return_inverse=True)
    expand = np.append(expand, expand[-1]) if expand.size else expand
    return Layout(order, -negated.astype(np.float64), expand.astype(np.int64))


class FluidCover:
    """One demand vector laid out longest first, probed at one makespan at a time."""

    def __init__(
        self,
        laid: Layout,
        demand: FloatArray,
        sizes: Sequence[int],
        ranks: Sequence[IntArray] | None = None,
        knotted: tuple[FloatArray, IntArray] | None = None,
    ) -> None:
        """``ranks[c][a]``: the speed group of kind ``c``'s ``a``-th fastest worker (non-decreasing,
        from 0); by default every kind is one group. ``knotted``: the lengths at which speed groups'
        rows are given, and the one each distinct length reads (``knots``; default: its own)."""
        self.expand = laid.expand
        self.lengths = laid.lengths if knotted is None else knotted[0]  # where rows are given
        self.columns = laid.expand if knotted is None else knotted[1][laid.expand]  # a row's, by position
        self.ends = np.cumsum(demand[laid.order])  # ends[i]: demand of the i + 1 longest trajectories
        self.total = float(self.ends[-1]) if self.ends.size else 0.0
        self.groups = _groups(sizes)  # kinds merged into one dimension each
        self.dims = tuple(sum(sizes[c] for c in group) for group in self.groups)  # workers per dimension
        self.ranks = [np.zeros(n, dtype=np.int64) for n in sizes] if ranks is None else ranks

    @functools.cached_property
    def ends_list(self) -> list[float]:
        """``ends`` as floats, for the one-kind chain's ``bisect`` only: built at its first probe (a
        list of the batch's size, built for every cover of a bound before, bound52)."""
        out: list[float] = self.ends.tolist()
        return out

    def shortfall(self, capacities: Sequence[FloatArray], reach: Sequence[FloatArray] | None = None) -> float:
        """``1 - best coverage / total``: positive proves that no schedule takes all the demand.

        ``capacities[c][u]``: what a worker of kind ``c`` serves when its longest trajectory has the
        ``u``-th distinct length (``Layout.lengths``); with speed groups a row per group, fastest
        first (``capacities[c][g, u]``), each row never above the one before, and ``reach[c][g]``
        the most steps a worker of that group can run by the makespan (longer: it hosts none of those
        lengths, whatever its row says there; default: every length). Past the last
        trajectory a worker is credited as if more of the shortest followed, so the value keeps
        falling (a slack) once the demand is covered, which is what the search in
        ``scheduler.tailbound`` interpolates on.
        """
        if self.total <= 0.0:
            return -1.0
        merged = [self._dimension(capacities, reach, group) for group in self.groups]
        if len(merged) == 1:
            return 1.0 - self._one_kind(*merged[0]) / self.total
        if len(merged) == 2:
            return 1.0 - self._two_kinds(merged[0], merged[1]) / self.total
        return 1.0 - float(self._table(merged)[-1]) / self.total

    def _dimension(
        self, capacities: Sequence[FloatArray], reach: Sequence[FloatArray] | None, group: list[int]
    ) -> Credits:
        """One dimension's credits by trajectory position, and each member's row in them (None: one
        row). Merged kinds lose their members' identities: every member at the best fastest group."""
        if len(group) == 1 and capacities[group[0]].ndim == 2:
            rows = capacities[group[0]]
            if reach is None:
                return ranked_credits(rows), self.ranks[group[0]]
            # lengths longest first: a group hosts a suffix of them, from the first no longer than its
            # reach (the mask ``lengths <= reach`` it stands for, without a mask's passes: review52d)
            firsts = np.searchsorted(-self.lengths, -reach[group[0]], side="left")
            return ranked_credits(rows, firsts=firsts), self.ranks[group[0]]
        fastest = [  # every worker of a kind at the fastest group's capacity, by position
            capacities[c][self.expand] if capacities[c].ndim == 1 else capacities[c][0][self.columns]
            for c in group
        ]
        return (fastest[0] if len(fastest) == 1 else np.maximum.reduce(fastest)), None  # one: no copy

    def chain(self, capacities: Sequence[FloatArray]) -> list[tuple[int, float]] | None:
        """The best cover's workers in chain order (longest level first), each as its kind and the
        demand covered before it; None when kinds would be merged (identities lost) or the best
        cover falls short. The planner turns these into band counts (``scheduler.policies.levels``).

        The full programme table is kept and walked back from the last state: at each state some
        kind's ``next`` from its predecessor gives the state's value (the same floats, recomputed).
        """
        if any(len(group) > 1 for group in self.groups) or self.total <= 0.0:
            return None
        if any(c.ndim > 1 and len(c) > 1 for c in capacities):  # ranks: not what levels asks for
            return None
        merged = [(capacities[group[0]].reshape(-1)[self.expand], None) for group in self.groups]
        shape = tuple(n + 1 for n in self.dims)
        strides = [math.prod(shape[c + 1 :]) for c in range(len(shape))]
        best, ends = self._table(merged) if len(merged) != 2 else self._two_kind_table(*merged), self.ends
        state = best.size - 1
        if best[state] < self.total:
            return None
        counts, links = list(self.dims), []
        while state > 0:
            for dim, stride in enumerate(strides):
                if counts[dim] == 0:
                    continue
                before = float(best[state - stride])
                if before + merged[dim][0][ends.searchsorted(before, side="right")] == best[state]:
                    links.append((dim, before))
                    state, counts[dim] = state - stride, counts[dim] - 1
                    break
            else:  # unreachable: every state's value came from one of its predecessors
                raise AssertionError("fluid cover table is inconsistent")
        return links[::-1]

    def _table(self, merged: Sequence[Credits]) -> FloatArray:
        """The programme's value at every state (flat, row-major over worker counts), plane by plane:
        the general case, and what ``chain`` walks back."""
        best = np.zeros(math.prod(n + 1 for n in self.dims))
        ends = self.ends
        shape = [n + 1 for n in self.dims]
        strides = [math.prod(shape[c + 1 :]) for c in range(len(shape))]
        for flat, steps in _planes(self.dims)[1:]:
            values = np.full(flat.size, -math.inf)
            for dim, (targets, sources) in enumerate(steps):
                covered = best[sources]
                at = ends.searchsorted(covered, side="right")
                credits, ranks = merged[dim]
                if ranks is None:
                    gained = covered + credits[at]
                else:  # the worker added is the kind's a-th, a = its count in the source state
                    members = ranks[(sources // strides[dim]) % shape[dim]]
                    gained = covered + credits[members, self.columns[at]]
                values[targets] = np.maximum(values[targets], gained)
            best[flat] = values
        return best

    def _two_kind_table(self, first: Credits, second: Credits) -> FloatArray:
        """``_table`` of two kinds, every state's value, from ``_two_kinds``'s planes (the same
        floats): what ``chain`` walks back, at half the general table's array calls a plane."""
        best = np.zeros(math.prod(n + 1 for n in self.dims))
        self._two_kinds(first, second, best)
        return best

    def _two_kinds(self, first: Credits, second: Credits, table: FloatArray | None = None) -> float:
        """The programme with two kinds (the common inventory), plane by plane: states ``(a, d - a)``
        of plane ``d`` ordered by ``a``, each the larger of the first kind's ``next`` from ``(a - 1,
        d - a)`` and the second's from ``(a, d - 1 - a)``.

        Each plane is a few 1-D calls on the plane before it as a whole: one search of its covered
        prefixes, each kind's credits gathered there and added into its own buffer, the first
        kind's shifted by one state, then the larger of the two. The same additions and maxima as
        state by state, so the same floats; a slice of the plane per kind, searched and gathered
        apart into a fresh plane, cost twice the calls (~14 us a plane, 0.45 ms a probe at 16 + 16
        workers, ~15 probes a cpsat plan between the bound and the band model). With ``table``
        (flat, row-major over the counts, as ``_table``'s) every plane is written into it too."""
        most_a, most_b = self.dims
        search, add, maximum = self.ends.searchsorted, np.add, np.maximum
        table_a, offsets_a = _flat(first, most_a, False)
        table_b, offsets_b = _flat(second, most_b, True)
        by_a = np.full(most_a + 2, -math.inf)  # [i]: the first kind's next into the plane's i-th state
        by_b = np.full(most_a + 2, -math.inf)  # the second kind's, unshifted. by_b[k] is read only
        # while the planes grow (d <= most_a: the state b = 0), before any plane wrote it: -inf there
        columns = self.columns
        previous, previous_low = np.zeros(1), 0
        for d in range(1, most_a + most_b + 1):
            k = previous.size
            at = search(previous, "right")
            where = at if offsets_a is None and offsets_b is None else columns[at]
            # state a from a - 1 (the member added: the kind's (a - 1)-th), one state up
            if offsets_a is None:
                add(previous, table_a[at], by_a[1 : k + 1])
            else:
                add(previous, table_a[offsets_a[previous_low : previous_low + k] + where], by_a[1 : k + 1])
            # state a from a (the member added: the second kind's (d - 1 - a)-th)
            if offsets_b is None:
                add(previous, table_b[at], by_b[:k])
            else:
                member = most_b - d + 1 + previous_low  # offsets_b backwards: d - 1 - previous_low on
                add(previous, table_b[offsets_b[member : member + k] + where], by_b[:k])
            low, high = max(0, d - most_b), min(d, most_a)
            plane = maximum(by_a[: k + 1], by_b[: k + 1])  # a from previous_low to previous_low + k
            previous, previous_low = plane[low - previous_low : high - previous_low + 1], low
            if table is not None:  # state (a, d - a) sits at a * (most_b + 1) + d - a
                table[low * most_b + d : high * most_b + d + 1 : most_b or 1] = previous
        return float(previous[0])

    def _one_kind(self, capacity: FloatArray, ranks: IntArray | None) -> float:
        """The programme with one kind is one chain of ``next``: a scalar loop (a plane per worker
        would cost a dozen array calls each), and once all is covered the rest add the last capacity
        (each its own, with speed groups)."""
        ends = self.ends_list
        rows: list[list[float]] = capacity.tolist() if ranks is not None else [capacity.tolist()]
        member: list[int] = ranks.tolist() if ranks is not None else [0] * self.dims[0]
        columns: list[int] = self.columns.tolist()
        covered, workers = 0.0, self.dims[0]
        for used in range(workers):
            if covered >= self.total:
                if ranks is None:
                    return covered + (workers - used) * rows[0][-1]
                return covered + sum(rows[g][columns[-1]] for g in member[used:])
            at = bisect.bisect_right(ends, covered)
            covered += rows[member[used]][at if ranks is None else columns[at]]
        return covered


Credits = tuple[FloatArray, IntArray | None]  # one dimension's credits by position (a row per speed
# group, or one), and which row each of its members (fastest first) reads, None: the only one


def _flat(credits: Credits, count: int, reverse: bool) -> tuple[FloatArray, IntArray | None]:
    """One dimension's credits as ``FluidCover._two_kinds`` gathers them: by position where the
    dimension has one row; else its rows flattened, and ``offsets[i]``, the start of the row of
    the member added to a state that has ``i`` of the dimension's workers already (one more entry,
    past its count, for states whose value is never read), backwards for the second dimension
    (``reverse``), whose count falls as a plane's first count rises."""
    table, ranks = credits
    if ranks is None:
        return table, None
    offsets = np.append(ranks[:count] * table.shape[1], 0)
    return table.ravel(), offsets[::-1] if reverse else offsets


KNOTS = 1024  # speed groups' capacities are asked at lengths every 1/1024 of the longest (rounded
# down: a worker at most 32 steps, ~0.05% of a makespan, short of its length is credited too much)


def knots(lengths: FloatArray, most: int = KNOTS) -> tuple[FloatArray, IntArray]:
    """The distinct ``lengths`` (longest first) rounded down to a grid of ``most`` steps over the
    longest (never below the shortest), and each length's grid point: rows of several speed groups
    are asked there, ~1,000 points where a big batch has 15,000 distinct lengths."""
    if lengths.size == 0:
        return lengths, np.zeros(0, dtype=np.int64)
    step = max(1.0, math.ceil(float(lengths[0]) / most))
    rounded = np.maximum(np.floor(lengths / step) * step, lengths[-1])
    negated, columns = np.unique(-rounded, return_inverse=True)
    return -negated, columns.astype(np.int64)


def ranked_credits(
    capacities: FloatArray, hosts: npt.NDArray[np.bool_] | None = None, firsts: IntArray | None = None
) -> FloatArray:
    """Credits for a kind's speed groups (rows, fastest first; columns the distinct lengths, longest
    first), each at least its own row where that group can host the length (``hosts``, default
    everywhere), never rising with the length, and its advantage over the next never rising as
    lengths shorten. ``firsts`` (the cover's case) stands for ``hosts`` where each group hosts every
    length from ``firsts[g]`` on (none where that is past the last): the same floats, without the
    mask's three passes a group (20% of this at 4,096 x 32 with learned speeds, review52d).

    Row ``g``'s credit is row ``g - 1``'s less ``d_g(u) = min over u' <= u, hosted, of
    (credit_{g-1}(u') - capacity_g(u'))``: no more than the true gap where the group hosts ``u`` (so
    its credit covers its capacity there), and never smaller at a longer length (so the order
    fastest-first is the best one, the module doc's exchange). Lengths longer than a group can run by
    the makespan take the gap at the longest it can: a worker's credit at a length it cannot host is
    never read for a real schedule (the programme's argument credits a worker at a length no longer
    than its own longest), only through the exchange, which asks for no more than this; the credit
    may be negative there. Without it the slowest groups, unable to run the batch's longest
    trajectory, held every gap at the fastest's few tokens there. Rows are first raised to the
    largest of the rows after them (a family's rows are ordered already, but for float noise), so
    every gap is at least 0 but for rounding, which the clip at 0 absorbs.
    """
    credits = capacities.astype(np.float64, copy=True)
    if credits.size == 0:
        return credits
    for g in range(len(credits) - 2, -1, -1):  # each row raised to the largest after it, row by row:
        np.maximum(credits[g], credits[g + 1], out=credits[g])  # an accumulate down axis 0 cost 3x
    raised = credits.copy()
    for g in range(1, len(credits)):
        if firsts is not None and firsts[g] >= credits.shape[1]:  # it hosts none: as ``hosts`` below
            credits[g] = credits[g - 1]
            continue
        gap = credits[g - 1] - raised[g]
        if firsts is not None:
            gap[: firsts[g]] = gap[firsts[g]]  # the gap at the longest length it can host
        elif hosts is not None:
            row = hosts[g]
            first = int(row.argmax())  # the longest length the group hosts
            if not row[first]:  # it hosts none: no gap is known, the credit stays the previous row's
                credits[g] = credits[g - 1]
                continue
            if not row[first:].all():
                gap = np.where(row, gap, math.inf)
            gap[:first] = gap[first]  # the gap at the longest length it can host
        np.minimum.accumulate(gap, out=gap)
        np.maximum(gap, 0.0, out=gap)
        np.subtract(credits[g - 1], gap, out=credits[g])
    return credits


def _groups(sizes: Sequence[int]) -> list[list[int]]:
    """Kinds as dimensions of the programme: the two smallest merged until the states fit."""
    groups = [[c] for c in range(len(sizes))]
    counts = list(sizes)
    while len(groups) > 1 and math.prod(n + 1 for n in counts) > MAX_STATES:
        first, second = sorted(range(len(counts)), key=lambda g: counts[g])[:2]
        groups[first] += groups[second]
        counts[first] += counts[second]
        del groups[second], counts[second]
    return groups


@functools.lru_cache(maxsize=32)
def _planes(sizes: tuple[int, ...]) -> Planes:
    """Per worker total ``d``: the flat indices of the states with ``sum(a) = d`` and, per kind, which
    of them have ``a_c >= 1`` (positions in that list) and the flat index of ``a - e_c`` for each."""
    shape = tuple(n + 1 for n in sizes)
    coords = np.indices(shape).reshape(len(shape), -1)
    totals = coords.sum(axis=0)
    strides = [int(np.prod(shape[c + 1 :])) for c in range(len(shape))]
    order = np.argsort(totals, kind="stable")
    starts = np.searchsorted(totals[order], np.arange(int(totals[-1]) + 2))
    planes = []
    for d in range(int(totals[-1]) + 1):
        flat = order[starts[d] : starts[d + 1]]
        steps = []
        for c, stride in enumerate(strides):
            targets = np.flatnonzero(coords[c][flat] >= 1)
            steps.append((targets, flat[targets] - stride))
        planes.append((flat, tuple(steps)))
    return tuple(planes)
