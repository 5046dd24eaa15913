"""``cpsat``: makespan-minimising placement with OR-Tools CP-SAT, never worse than ``lpt``.

A boolean per (trajectory, worker) does not scale (measured: 512 groups x 64 workers found no first
solution in 2 s on 2 cores), so the search is decomposed into pieces that each stay small:

1. ``lpt`` plan: the hint, the fallback, and the bar to beat (scheduled and played through the
   worker model, like every candidate).
2. Aggregate model (``scheduler.policies.levels``, realised in ``scheduler.policies.bandsearch``):
   how many workers of each device kind host each
   length band of the tail. Dozens of counts whatever the batch size, the least makespan at which
   they cover every band found by the bound's fluid-cover programme (CP-SAT past its state limit).
   List scheduling then places units inside the chosen bands (``lpt_assignment`` with tiers),
   passing over workers whose queue would overflow the KV cache if admitted at once. Where time
   allows, a second round places them again: calibrated by the first round's simulation, and with
   the units that would push a worker past a cap placed after all others, and with half the budget
   left on point predictions up to two more, each calibrated by the one before; under prefix affinity,
   more rounds with more workers in the cap band follow (``bandsearch.cap_band_rounds``). Where a
   round over the whole batch would not fit the budget (``scheduler.policies.copybudget``:
   ``FULL_ROUND`` for large batches, ``FIRST_ROUND`` for smaller ones), the batch is searched on one
   K-th of itself and one K-th of the pool, and the plan copied K times
   (``scheduler.policies.replicate``); where time is clearly left, from a sub-plan twice as large
   first (``_copied``).
3. Exact repair (``scheduler.policies.exchange``): while time is left, a CP-SAT model with one boolean
   per (unit, worker) over the slowest worker and the fastest few only (large-neighbourhood search
   over worker sets), accepted only when the worker model says those workers finish sooner.
4. Levelling (``scheduler.policies.balance``): the workers that do not decide the makespan get their
   units balanced among themselves, so none sits idle while another runs a crowded batch: the same
   predicted makespan, more robust to lengths that differ from the predictions. Then, on a searched
   plan without quantiles, the plateau pass (``scheduler.policies.plateau``): single-unit moves and
   swaps off whichever worker is latest, each kept only where plays say both workers end sooner, in
   the plays and time left (the 4,096 x 32 bench plans' H100s and upper 910Bs end on one plateau).
5. Robust choice (``scheduler.policies.robust``): when the trajectories carry their 0.5 and 0.9
   quantiles, the plan and the lpt plan are played over draws of the lengths, and the lpt plan is
   kept (``ROBUST_LPT``) if it is expected to finish sooner. The lpt plan's side is played before
   the search, on as many draws as fit (``robust.baseline``, timed), and the search ends that long
   before the deadline, so the choice fits; when not even that fits the search does not start: a
   plan searched on the point predictions and returned unjudged was far worse on the true lengths
   than lpt's.
6. Hedged orders (``scheduler.policies.robust_order``): with the same quantiles, each queue's order
   is judged again on a draw of the lengths, played as the engine will run it. Done for the lpt
   plan first, with the whole budget if need be, exactly as ``lpt`` does, so that cpsat never
   returns a worse-hedged lpt plan than ``lpt`` would; the search then ends that much earlier, so
   that a plan that beats lpt's can be hedged in turn. The lpt plan is then placed again for how
   late each device kind runs on draws (``lpt.calibrated``, ``scheduler.policies.robust_place``),
   with the whole budget too, as ``lpt`` does; the search gets what is left, and a search plan
   that wins on the predictions is hedged, not placed again.
7. The fastest kind first (``robust_fast.at_once_hedge``, as ``lpt`` does too): with the same
   quantiles, where the whole batch runs at once, a plan keeping the longest samples on the fastest
   kind is kept instead when expected, over draws, to end sooner. Done for the lpt plan before the
   search and before placing it again, as ``lpt`` does (``lpt.settled``); where it judged, the search
   ends that much earlier, so that a searched plan is judged against the same candidate (the service's
   1,024 x 16 batches: a search that ran to its end returned its plan unjudged, 2.65x the bound over
   draws where lpt's ran 1.89x; docs/experiments.md, budget49 and hedge49). A searched plan the
   candidate beats gives way to lpt's own plan (``_lpts_own``), the candidate or lpt's plan as lpt's
   judgment chose on the same draws, not to the candidate (review49a); so does one the judgment had
   no time for where lpt's was judged (``_stands``). (docs/solver.md numbers the steps
   finer: its 2-4 are 2 here, 5-7 are 3-5, 8-9 are 6, 10 is 7.)

Every candidate is ordered and played through ``scheduler.finish``; the fastest is returned, so the
result is never worse than ``lpt`` on the predictions (once hedged, orders bet on the draws
instead, for both policies alike). Hard constraints hold by construction: units are whole groups
under prefix affinity, and a unit only ever goes to its allowed workers (pins, exclusions, KV fit).
The time budget (``request.time_budget_s``) bounds the CP-SAT calls; status: the aggregate model's
``OPTIMAL``/``FEASIBLE`` when its plan won, ``FALLBACK_LPT`` when the lpt plan stayed best or the
plan returned is the one ``lpt`` returns (``_lpts_own``),
``BASELINE`` when the plan it would return finished later on the predictions than the length-blind
plans (``scheduler.policies.blindbar``) and the faster of those was returned instead.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler import clock
from scheduler.gcpause import collector_paused
from scheduler.giveup import stage
from scheduler.policies import bandsearch, replicate
from scheduler.policies.balance import level_below
from scheduler.policies.base import Placement
from scheduler.policies.blindbar import barred
from scheduler.policies.copybudget import LARGER_FIRST, LEAN_RESERVE, SMALLER_AFTER, copy_split
from scheduler.policies.exchange import improve
from scheduler.policies.lpt import Settled, bar_plans, opening, placed_from, settled
from scheduler.policies.ordering import refine_critical
from scheduler.policies.plan_draws import SAMPLES, priced
from scheduler.policies.plateau import lower
from scheduler.policies.problem import Problem
from scheduler.policies.robust import Baseline, Spread, baseline, judged
from scheduler.policies.robust_fast import FASTEST, JUDGED, UNJUDGED, at_once_judged
from scheduler.policies.robust_order import hedged
from scheduler.types import PlanRequest

BASELINE_COST = 1.0  # lpt phases the robust choice's lpt side takes before its pace is known (the
# first ``robust.MIN_SAMPLES`` draws, ``robust.baseline``): 0.6-1.1 at 4,096 x 32 and 16,384 x 128.
# Started with less left, its draws ran past the deadline on a loaded host, for a search that
# could not follow them. Of it ``plan_draws.DRAWING``, drawing the ``SAMPLES`` rows, is charged only
# for those not in hand (``plan_draws.priced``: the hedges before it may have drawn them)


class CpSatPolicy:
    """LPT, then an aggregate CP-SAT model of the tail, then exact CP-SAT repair; the best plan wins."""

    name = "cpsat"

    def plan(self, request: PlanRequest, problem: Problem | None = None) -> Placement:
        """Plan within ``request.time_budget_s``; never slower (predicted) than the lpt plan."""
        problem, deadline, spread, lpt_phase, waves, blind, assignment, lpt_plan = opening(
            request, problem, "FALLBACK_LPT"
        )
        hedge_started = clock.now()
        with stage("hedge"):
            lpt_hedged = hedged(problem, request, lpt_plan, spread, deadline, lpt_phase, waves)
        search_end = deadline  # a hedge that fitted is kept time for again, for a plan that differs
        if lpt_hedged is not lpt_plan:
            search_end -= clock.now() - hedge_started
        late = settled(problem, request, lpt_hedged, spread, deadline, lpt_phase, waves)  # lpt's own
        lpt_robust, lpt_fast = late.placed, late.final
        search_end -= _judging_kept(late)  # for a searched plan, against the same candidate
        base = None
        if spread is not None:  # priced less the rows the hedges before it drew (``plan_draws.priced``)
            reserve, seed = request.kv_admission, request.seed
            price = priced(BASELINE_COST, problem.draws(spread, seed), SAMPLES, lpt_phase)
            if clock.now() + price < search_end:
                with stage("robust baseline"):
                    base = baseline(problem, lpt_plan.queues, spread, reserve, seed, search_end)
        with stage("search"):
            best = self._search(problem, request, lpt_plan, assignment, lpt_phase, search_end, spread, base)
        status = best.status  # where the lpt plan stayed best: FALLBACK_LPT, or ROBUST_LPT
        blind = bar_plans(problem, request, blind, assignment, spread, deadline, lpt_phase)
        if best.queues != lpt_plan.queues:
            with stage("hedge"):
                best = hedged(problem, request, best, spread, deadline, lpt_phase, waves)
            with stage("at-once hedge"):
                judged_best = at_once_judged(
                    problem, request, best, spread, deadline, lpt_phase, late.candidate
                ).placement
            if _stands(judged_best, lpt_fast):  # over step 7's candidate, or neither judged
                with stage("bar"):
                    return barred(
                        problem, request, judged_best, blind, "BASELINE", spread, deadline, None, lpt_phase
                    )
            status = "FALLBACK_LPT"  # the candidate beat it, or it is lpt's plan: lpt's own (_lpts_own)
        final, first = _lpts_own(status, lpt_hedged, lpt_robust, lpt_fast)  # first: for the bar
        with stage("bar"):
            return barred(problem, request, final, blind, "BASELINE", spread, deadline, first, lpt_phase)

    def _search(
        self,
        problem: Problem,
        request: PlanRequest,
        lpt_plan: Placement,
        assignment: list[list[int]],
        lpt_phase: float,
        deadline: float,
        spread: Spread | None,
        base: Baseline | None,
    ) -> Placement:
        """Steps 2-5 of the module doc, from the lpt plan, by ``deadline``: the best plan found
        (``spread``: the request's quantiles, ``robust.spreads``; ``base``: the lpt plan played on
        draws of them, ``robust.baseline``, for the robust choice).

        With quantiles, the search ends early enough for the robust choice to play its plan on the
        draws the lpt plan was played on (as long as those plays took), and does not start when it
        cannot: a plan searched on the point predictions and not judged on draws was, on the true
        lengths, far worse than lpt's hedged one.
        """
        reserve = request.kv_admission
        if spread is not None and base is None:
            return lpt_plan  # no time was left even for the lpt plan's draws
        search_end = deadline - (base.cost_s + base.pending_s if base is not None else 0.0)
        if search_end <= clock.now():
            return lpt_plan
        left = search_end - clock.now()
        part = (
            copy_split(problem, request, lpt_phase, left, bandsearch.ROUND_FIXED_S)
            if spread is None
            else None
        )
        if part is None:
            more = bandsearch.EXTRA_ROUNDS if spread is None and not request.prefix_affinity else 0
            best, assignment = bandsearch.rounds(
                problem, request, lpt_plan, assignment, lpt_phase, search_end, more=more
            )
        else:
            best, assignment = self._copied(
                problem, request, part, lpt_plan, assignment, lpt_phase, search_end
            )
        repaired = improve(problem, assignment, best.queues, best.finish_s, reserve, search_end, request.seed)
        if repaired is not None:
            status = _found(best.status)
            queues, finishes = refine_critical(problem, repaired[0], repaired[1], reserve, search_end)
            best = Placement(queues, status, finish_s=finishes)
        if search_end - clock.now() > 2 * lpt_phase:  # levelling: an lpt pass and its ordering
            queues, finishes = level_below(problem, best.queues, best.finish_s, reserve)
            best = Placement(queues, best.status, finish_s=finishes)
        # The plateau lowered by plays (``plateau``), in what time is left, on a searched plan: where the
        # lpt plan stands (FALLBACK_LPT) it stands as ``lpt`` returns it; not on quantiles (unjudged).
        if spread is None and best.status != "FALLBACK_LPT":
            lowered = lower(problem, best.queues, best.finish_s, reserve, search_end - lpt_phase)
            if lowered is not None:
                best = Placement(lowered[0], best.status, finish_s=lowered[1])
        return _robust(problem, request, best, lpt_plan, deadline, base)

    def _copied(
        self,
        problem: Problem,
        request: PlanRequest,
        part: replicate.Split,
        best: Placement,
        assignment: list[list[int]],
        lpt_phase: float,
        deadline: float,
    ) -> tuple[Placement, list[list[int]]]:
        """The copies of ``part``'s sub-plan (``_copy``); where ``LARGER_FIRST`` lpt phases are left,
        first those of a sub-plan twice as large (half as many copies), then ``part``'s while
        ``SMALLER_AFTER`` are, the better plan kept: a larger sub-plan's own bound is nearer the
        whole batch's, but its copies are not better on every batch (docs/solver.md)."""
        if deadline - clock.now() >= LARGER_FIRST * lpt_phase:
            larger = replicate.split(problem, request, fewer=2)
            if larger is not None:
                best, assignment = self._copy(problem, larger, best, assignment, lpt_phase, deadline)
                if deadline - clock.now() < SMALLER_AFTER * lpt_phase:
                    return best, assignment
        return self._copy(problem, part, best, assignment, lpt_phase, deadline)

    def _copy(
        self,
        problem: Problem,
        part: replicate.Split,
        best: Placement,
        assignment: list[list[int]],
        lpt_phase: float,
        deadline: float,
    ) -> tuple[Placement, list[list[int]]]:
        """The search on one K-th of the batch and pool, copied K times (``scheduler.policies.replicate``),
        each copy played on its own lengths in its twin's order, the last worker's order refined;
        ``best`` and ``assignment`` where it does not beat them or no time is left for it.

        The sub-plan is its band rounds alone (``bandsearch.rounds`` on the sub-problem, barred by ``best``'s
        makespan, ending ``LEAN_RESERVE`` before the deadline for the copies), not cpsat's own plan of
        it: those were the same plans where both fitted (32,768 x 256, K = 16 and K = 8), but cpsat's
        was started where its lpt start and one round fitted, and its second round, or its first
        after an lpt start longer than a K-th of the whole one, then did not (docs/experiments.md,
        Solver, "cpsat: batches too big for a round")."""
        request = part.request  # sub-batch 0; its budget and admission are the whole request's
        stop = deadline - bandsearch.ROUND_RESERVE * request.time_budget_s
        bar = Placement((), best.status, finish_s=(max(best.finish_s),))
        end = deadline - LEAN_RESERVE * lpt_phase
        sub, _ = bandsearch.rounds(part.problem, request, bar, [], lpt_phase / part.copies, end)
        if sub is bar:
            return best, assignment
        with collector_paused():  # acyclic queues; a full collection here overran LEAN_RESERVE
            queues = replicate.spread_out(part, sub.queues, problem.prompts, len(problem.costs))
            finishes = tuple(problem.finishes(queues, request.kv_admission))
        queues, finishes = refine_critical(problem, queues, finishes, request.kv_admission, stop)
        if max(finishes) >= max(best.finish_s):
            return best, assignment
        return Placement(queues, _found(sub.status), finish_s=finishes), [list(q) for q in queues]


def _robust(
    problem: Problem,
    request: PlanRequest,
    best: Placement,
    lpt_plan: Placement,
    deadline: float,
    base: Baseline | None,
) -> Placement:
    """``best``, or the lpt plan where the predictions' quantiles expect it to finish sooner
    (``scheduler.policies.robust``): status ``ROBUST_LPT``. Still never slower than lpt.

    Judged on the draws the lpt plan was played on before the search (``base``), as many as their
    measured pace fitted. A plan whose plays would end past ``deadline`` is not returned unjudged:
    the lpt plan stands (``FALLBACK_LPT``), as if the search had not run.
    """
    if base is None or best.queues == lpt_plan.queues:
        return best
    points = best.finish_s or tuple(problem.finishes(best.queues, request.kv_admission))
    verdict = judged(problem, best.queues, base, request.kv_admission, deadline, points)
    if verdict:
        return best
    return Placement(
        lpt_plan.queues, "ROBUST_LPT" if verdict is False else "FALLBACK_LPT", finish_s=lpt_plan.finish_s
    )


def _judging_kept(late: Settled) -> float:
    """Seconds the search ends earlier, so that a searched plan is at-once judged as lpt's was: what
    judging lpt's plan took, where it judged (``robust_fast.JUDGED``: the candidate taken, or lpt's
    plan kept); nothing where it did not.

    Why every judgment, also one that kept lpt's plan: a search that kept no time then runs to its
    end and its plan goes out without the judgment lpt's had (1 of 6 plans at 400 ms, 1,024 x 16,
    load 17, where only a judgment that took the candidate kept time: budget49). Judging the searched
    plan plays its side alone against the kept candidate (``Settled.candidate``), so this errs long."""
    return late.judging_s if late.final.at_once in JUDGED else 0.0


def _stands(searched: Placement, lpt_fast: Placement) -> bool:
    """Whether the searched plan, at-once judged (``searched``), goes to the bar rather than lpt's
    own plan (``lpt_fast``): where it differs from it and the judgment kept it or was not asked, or
    ran out of time where lpt's plan was not judged either. A plan the judgment had no time for is
    not returned over lpt's judged one (hedge49); one the candidate beat gives way to lpt's own
    (review49a)."""
    if searched.queues == lpt_fast.queues or searched.at_once == FASTEST:
        return False
    return searched.at_once != UNJUDGED or lpt_fast.at_once not in JUDGED


def _lpts_own(
    status: str, lpt_hedged: Placement, lpt_robust: Placement, lpt_fast: Placement
) -> tuple[Placement, Placement | None]:
    """The plan ``lpt`` returns before its bar (``lpt_fast``: hedged, placed again, at-once hedged),
    labelled ``status``, and the plan the bar may give back (``lpt.placed_from``), as ``lpt`` has them.

    Why, where the search found a plan of its own. The at-once hedge judges it against the
    fastest-kind-first candidate, which does not depend on the plan it is given, so a candidate
    that wins is no plan of the search's: it takes lpt's status, not the search's (``OPTIMAL`` would
    name a plan the search had not made; budget49), and only where lpt's own judgment, made on the
    same draws, chose it too. Where that judgment kept lpt's plan over it, the candidate is expected
    to end later than lpt's over those draws, and later on the predictions (22 prompts x 4 samples on
    an A100 and an Ascend 910B, p90 10% above p50: 9.78-10.17 s against lpt's 9.15-9.51 s, 8 batches
    of 10; docs/experiments.md, review49a). A searched plan that is lpt's own gets lpt's ``first`` for
    the bar, as ``lpt`` gives it."""
    placed_first = Placement(lpt_hedged.queues, status, finish_s=lpt_hedged.finish_s)
    final = replace(lpt_fast, status=status)  # its at-once verdict kept
    return final, placed_from(placed_first, lpt_robust, lpt_fast)


def _found(status: str) -> str:
    """The status of a plan the search found that differs from the lpt plan: ``FALLBACK_LPT``
    names that plan itself, so a different one found from it (repaired, or copied from a
    sub-plan that kept its own lpt plan) is ``FEASIBLE``."""
    return status if status != "FALLBACK_LPT" else "FEASIBLE"
