"""The request's draws of the lengths, drawn once a plan and shared by every judgment that asks.

Why. The bar's weighing of a blind plan (``robust.least_expected``), its screen for outlived
predictions and its weighing of the plan placed again (``blindbar``), cpsat's baseline
(``robust.baseline``), the orders' hedge's screen for wide spreads (``robust_order``) and the at-once
hedge (``robust_fast``) each drew the same ``SAMPLES`` draws from the request's seed, ~4 ms a time at
4,096 x 32, twice or three times in one plan of the service's 80 ms default (docs/experiments.md,
budget51). Every one of them now reads the rows the plan's ``Problem`` keeps (``Problem.draws``).

How the same rows. The generator fills row after row, so successive blocks take the numbers one
pass would, and every element goes through the same arithmetic, with one exception:
``bounded_lengths`` takes a trajectory to log space where any of the draws in hand could overflow
its linear form, and a block cannot know the draws after it. So blocks are drawn only where no
standard normal numpy can draw (``Z_BOUND``) takes any trajectory there (every sane spread: sigma
under ~17, p90 below 3e9 times p50); elsewhere all ``SAMPLES`` at the first ask. Each consumer thus
reads exactly the rows ``draw_matrix(spread, default_rng(seed), SAMPLES)`` gives, which is what each
drew for itself before; the rows are read-only, so no consumer can change another's.

Why a lock. Extending the rows in hand reads the count drawn, draws from the one generator and
stores the longer array: two threads extending at once each drew their own block and one was kept,
so the rows depended on the threads' timing (rows skipped or swapped, or numpy asked for a negative
count: tests/scheduler/test_plan_draws_threads.py). No planner path asks one ``Problem``'s draws from
two threads (the service plans a request on one thread, ``bench solver`` and the replay each plan on
a ``Problem`` of their own), but ``planner.Prepared`` is shared by every plan of a request by design,
so a caller may plan two policies from it at once. Uncontended, the lock costs well under a
microsecond a call, a few calls a plan.
"""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt

from scheduler.lognormal import LOG_LIMIT, bounded_lengths
from scheduler.stepsum import FloatArray, planned_steps_array

SAMPLES = 32  # draws of the batch's lengths per comparison, where they fit (``robust.baseline``)
DRAWING = 0.5  # lpt phases drawing all ``SAMPLES`` rows takes, of the fixed price of every step that
# draws them first (``priced``): 0.32-0.47 at 1,024 x 16 and 4,096 x 32 (docs/experiments.md, draws52)
Z_BOUND = 40.0  # above any standard normal numpy draws (its ziggurat's tail ends near 13.7)
Spread = tuple[FloatArray, FloatArray, FloatArray]  # medians, log-normal sigmas, caps (``robust.spreads``)


def draw_matrix(spread: Spread, rng: np.random.Generator, count: int) -> npt.NDArray[np.int64]:
    """``count`` successive ``robust.draw_steps`` as the rows of one array, for plays vectorised
    across draws (``scheduler.finish_draws``): the generator fills it row after row with the numbers
    those calls would have drawn, and each element goes through the same arithmetic, so row ``k`` is
    the ``k``-th draw to the last step."""
    medians, sigmas, caps = spread
    normal = rng.standard_normal((count, len(medians)))
    return planned_steps_array(bounded_lengths(medians, sigmas, caps, normal))


class SeededDraws:
    """The rows of ``draw_matrix(spread, default_rng(seed), SAMPLES)``, drawn only as far as asked
    (module doc: the same rows either way)."""

    def __init__(self, spread: Spread, seed: int) -> None:
        self.spread, self.seed = spread, seed
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()  # one extend at a time (module doc)
        medians, sigmas, _ = spread
        self._steps: npt.NDArray[np.int64] = np.zeros((0, len(medians)), dtype=np.int64)
        with np.errstate(divide="ignore", invalid="ignore"):  # a zero median: drawn whole
            reach = np.abs(np.log(medians)) + Z_BOUND * sigmas
        self._whole = not bool((reach <= LOG_LIMIT).all())  # some spread may leave the linear form

    @property
    def drawn(self) -> int:
        """How many draws are in hand. Read without the lock: the count only grows, and a read
        racing an extend sees the count before it, so a price read from it (``priced``) can only
        charge more, never less, than what is left to draw."""
        return len(self._steps)

    def rows(self, stop: int) -> npt.NDArray[np.int64]:
        """The first ``stop`` draws (within ``SAMPLES``), drawing those not in hand yet; read-only.
        Safe to call from several threads at once: they read one pass's rows (module doc)."""
        stop = min(stop, SAMPLES)
        with self._lock:
            held = self._steps
            if stop > len(held):
                count = SAMPLES - len(held) if self._whole else stop - len(held)
                more = draw_matrix(self.spread, self._rng, count)
                held = more if not len(held) else np.concatenate((held, more))
                held.flags.writeable = False  # before any other thread can see it
                self._steps = held
        return held[:stop]


def priced(cost: float, draws: SeededDraws, stop: int, phase_s: float) -> float:
    """Seconds a step takes before its own pace is known, priced at ``cost`` lpt phases of
    ``phase_s`` with its first ``stop`` rows of ``draws`` (the plan's) still to draw: less
    ``DRAWING``'s share for those of them already in hand. Between ``cost - DRAWING * stop /
    SAMPLES`` and ``cost`` lpt phases; 0 on a frozen clock (``phase_s`` 0), as before.

    Why. The plan's draws are drawn once and shared: the bar's draws (``blindbar.DRAWS_COST``),
    cpsat's baseline (``cpsat.BASELINE_COST``) and the at-once hedge's check (``robust_fast.CHECK_COST``)
    were each priced as if they drew their rows, though the hedges before them may have drawn some
    or all of them, and a step priced whole was skipped in plans that had the time for what was
    left (docs/experiments.md, draws52 and review52b). What follows the drawing (the first plays)
    is charged in hand or not. One price for all three, so their reading of the rows in hand
    cannot drift apart."""
    stop = min(stop, SAMPLES)
    held = min(draws.drawn, stop)
    return phase_s * (cost - DRAWING * held / SAMPLES)
