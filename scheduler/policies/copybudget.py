"""When cpsat searches one K-th of a batch and copies it instead of a band round over the whole
batch, and how much of the budget the copies are priced at: every figure in lpt phases (the
time the plan's lpt start took), so that a slow host and a large batch read alike.

Why a module of its own: these are the budget rules of ``scheduler.policies.replicate``'s
decomposition, apart from the search they decide about (``scheduler.policies.cpsat``, which
calls ``copy_split`` and reads the reserves); docs/solver.md, "Batches too big for a round".
"""

from __future__ import annotations

from scheduler.policies import replicate
from scheduler.policies.problem import Problem
from scheduler.types import PlanRequest

FULL_ROUND = 10.0  # a band round over the whole batch costs up to this many lpt phases (measured
# 4.7-7.8x at 32,768 x 256). Where they do not fit what is left, a batch that divides is searched
# on one K-th and copied (``cpsat._copied``). 32,768 x 256 bench batches: copies 1.044-1.055x the
# bound (15 plans, median 1.046), a full round 1.042-1.044x where it fits and 1.21x (the lpt plan) where
# it is cut short, which a loaded host did to 1-4 of 5. At 16,384 x 128 the full round fits (1.035x;
# a prototype of the copies that searched their orders: 1.041-1.044x), and the rule keeps it.
# Since ``listrun`` a full round at 32,768 x 256 is 3.8-4.0 lpt phases (process CPU), but 4.5 or 5
# here cut 3 of the 5 full rounds they started (10 plans each, load 5-6): kept at 10
FIRST_ROUND = 3.4  # below ``MIN_UNITS``, copies where fewer lpt phases (and ROUND_FIXED_S) are
# left: round 1 at 4,096 x 32 is ~3 of placement and ordering plus its solve, ~0.4 more on a host
# 2-2.4x slow, where rounds started at ROUND_COST's 3 were cut (planning clock at 2.2x process CPU,
# 20 plans each: 3.0 1.040 median / 1.096 mean, 3.4 1.043 / 1.089, 3.7 1.043 / 1.074; main 1.199;
# 3.4 and 3.7 within the noise over three runs, 3.7 copied more where round 1 fitted at 1.8x)
LEAN_RESERVE = 1.0  # lpt phases left for dealing and playing the copies of a sub-plan of rounds
# alone (``cpsat._copy``): 0.9-1.2 measured at 4,096 x 32 (K = 2), the round's stop reserve the rest
LARGER_FIRST = 4.0  # lpt phases left at which copies of a sub-plan twice as large go first
# (``cpsat._copied``). 32,768 x 256 (process CPU): the K = 8 copies cost 1.8-2.3 lpt phases, the
# K = 16 ones after them 1.2-1.5, and the copies start with 3.5-4.7 left on a quiet host. At 4.0,
# 15 plans 1.0472 -> 1.0450 (median; the 7 that took them each no worse than the K = 16 copies
# alone); at 3.5 or 3.75 one slow K = 8 copying was cut short (1.0563) with too little left for
# the K = 16 ones, at 2.5-3.0 most were
SMALLER_AFTER = 1.5  # lpt phases left after them at which the usual copies still follow: about what
# they cost (1.2-1.5), and they replace the plan only where they finish sooner; 1.5 and 2.0 took
# the same plans in 15 each (the larger copies left 2.1-2.4)


def copy_split(
    problem: Problem, request: PlanRequest, lpt_phase: float, left: float, round_fixed_s: float
) -> replicate.Split | None:
    """The split to search and copy where no full band round is expected to fit ``left`` (seconds
    of search; ``round_fixed_s``: a round's solve, ``bandsearch.ROUND_FIXED_S``), or None: full rounds,
    or none (the lpt plan).

    Why. A round cut short returns the lpt plan (~1.2x the bound), copies of a sub-plan ~1.04-1.05x.
    A batch of ``replicate.MIN_UNITS`` or more is copied below ``FULL_ROUND`` lpt phases; a smaller
    one only below ``FIRST_ROUND``, where round 1 would not fit either: a K = 2 sub-plan's round
    costs half of one. Nothing changes where a round fits (the frozen clock: every phase costs 0).
    The large-batch rule needs no lower limit of its own: below ``FIRST_ROUND`` the rule before it
    answers, and the sub-plan's rounds keep ``LEAN_RESERVE``.
    """
    if left <= LEAN_RESERVE * lpt_phase:
        return None
    if left < round_fixed_s + FIRST_ROUND * lpt_phase:
        return replicate.split(problem, request, least_units=0)
    if left < FULL_ROUND * lpt_phase:
        return replicate.split(problem, request)
    return None
