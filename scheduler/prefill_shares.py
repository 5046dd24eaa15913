"""The exchange rates at which limit (d) charges prompt tokens, and why a blend of them is a bound.

A worker of one kind that runs ``N`` decode steps serving ``K`` KV-token-steps and prefills ``P``
prompt tokens by the makespan ``T`` has (``scheduler.tailbound``'s notation, time scale folded in)

    c * N + m * K + pp * P <= T        and        K <= U(N),

the first because every decode step reads the weights (``c``) and every cached token (``m``) and a
prefill costs at least ``pp`` a prompt token on the worker's clock, the second the ramp-up (at its
``k``-th step it holds at most ``min(cap, P_S + S * k)`` tokens; ``U(N) <= N * cap``). Write
``x = pp * P / m`` (the prefill in KV-token-steps) and ``A(N) = (T - c * N) / m``: then ``K + x <= A(N)``
and ``K <= U(N)``. For any ``alpha`` in ``[0, 1]``, ``K + alpha * x`` is largest at ``K = min(U, A)``,
``x = A - K``, so

    K + alpha * x <= alpha * A(N) + (1 - alpha) * min(U(N), A(N)),

maximised over ``N`` at least the worker's longest trajectory: ``KindLimits.serves_many`` at the rate
``r = alpha * pp / m``. Every trajectory's demand ``K_i + r * P_i`` must then be covered by the
workers' capacities, whichever worker hosts it and in whatever order it runs: a makespan ``T`` at
which the cover falls short is below every feasible play's, for every policy, admission rule
(prompt watermark or projected peak), eviction (restart or resume: both only add steps and prefill)
and stealing. A single ``r`` common to all kinds keeps each kind's ``alpha = r * m / pp <= 1`` when
``r`` is a share of the smallest ``pp / m`` (``tailbound._exchange``). Each share is a bound, so the
largest over any set of shares is one too: more shares never lower it.

The two ends each drop one cost: at share 1 the ramp-up (and with it the cache's size: a worker may
serve ``A(N)`` in its fewest steps), at share 0 the prefill. Where both bind, a share between credits
part of each: the bound rises with the share, nearly linearly, to a cliff where a worker would rather
prefill than decode and its capacity stops counting its cache, and there falls to what the ends
prove or below. On the issue-6 headline (long CoT, 256 x 16, prompts of 670 tokens on average, 8 H100
and 8 Ascend 910B, 7b; step 3 of trace seed 1) it runs from 818.1 s at share 0 to 824.8 s at 0.7 and
825.3 s at 0.75, and is limit (c)'s 812.7 s from 0.8 on; on small batches with many slots and long
prompts the cliff sat anywhere from 0.1 to 0.85, and fixed shares 0.75, 0.5 and 0.25 reached none of
what a scan found in most of them. So ``shares_bound`` bisects for it: a share that proves more than
the bound so far lies below the cliff (search higher), one that does not past it or past a smooth
peak (search lower). Whatever shares it tries, each is a bound: the search picks which, never
whether. On 68 such batches where a scan of 39 shares raised the bound, 4 steps reached 72% of the
scan's gain on average (3: 66%, 5: 76%, 6: 79%; none where the peak is smooth and early). The
benchmark's heavy-tailed batches bind at share 0 and gain nothing; each share that proves nothing
more costs one fluid probe (the bound 6.5-10.3 -> 8.7-13.8 ms at 4,096 x 32, 20.5-49.1 -> 27.7-57.6
ms at 16,384 x 128: process time, medians of 5), and the searches stop at the plan's fluid deadline.
The band cover, whose probes can be CP-SAT solves, tries only the ends (``PREFILL_SHARES``).
"""

from __future__ import annotations

from collections.abc import Callable

PREFILL_SHARES = (1.0, 0.0)  # the ends, shares of min over kinds of pp / m: prefill at 1, ramp-up at 0
BLEND_STEPS = 4  # bisection steps for the cliff: the share to within 1/16


def shares_bound(search: Callable[[float, float], float], known_s: float) -> float:
    """The largest bound ``search(share, low)`` proves (at least ``low``) over the ends, then over
    ``BLEND_STEPS`` blends bisecting for the cliff (module doc); at least ``known_s``."""
    bound = known_s
    for share in PREFILL_SHARES:
        bound = search(share, bound)
    below, above = 0.0, 1.0
    for _ in range(BLEND_STEPS):
        share = (below + above) / 2.0
        raised = search(share, bound)
        if raised > bound:
            bound, below = raised, share
        else:
            above = share
    return bound
