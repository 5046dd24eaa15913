"""The at-once hedge's draws (``scheduler.policies.robust_fast``): ``SAMPLES`` draws of the lengths
and each plan's mean makespan on them with one trajectory run as long as the batch's longest p90.

The draws are drawn as the comparison asks for them (``LazyDraws``): it ends after 8 draws a side
on the service's batches (docs/experiments.md, review49c), and drawing all ``SAMPLES`` first cost
3.2 ms at 4,096 x 32 on a quiet host (1-9 ms loaded) against 0.6 ms for the first 8 (budget50).

Kept apart from the hedge itself so that each module holds one concept: this one what a plan is
worth on the draws, ``robust_fast`` which plan is judged against which and when time is left.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from scheduler.finish_draws import drawn_finishes
from scheduler.lognormal import bounded_lengths
from scheduler.policies.plan_draws import SeededDraws
from scheduler.policies.problem import Problem
from scheduler.policies.robust import SAMPLES, Z90, Spread
from scheduler.stepsum import FloatArray, planned_steps_array


class Draws(NamedTuple):
    """What both candidates are played on (common random numbers: the comparison is not at the
    mercy of sampling noise): ``SAMPLES`` draws of every trajectory's steps from the request's seed
    (``draw_matrix``), and the steps of each when it is the outlier."""

    steps: npt.NDArray[np.int64]  # (draws, trajectories)
    stretch: npt.NDArray[np.int64]  # the batch's longest p90, within each trajectory's cap


def outlier_draws(spread: Spread, seed: int) -> Draws:
    """``SAMPLES`` draws of the lengths (``draw_matrix``) and the outlier's steps: the batch's longest
    p90 (why: ``outlier_means``), within each trajectory's cap. All at once: ``LazyDraws`` draws the
    same ones a block at a time."""
    return LazyDraws(spread, seed).block(0, SAMPLES)


class LazyDraws:
    """``outlier_draws``' draws, drawn only as far as ``block`` asks, each row the one ``outlier_draws``
    gives to the last step (``plan_draws.SeededDraws``: why the same rows). ``rows``: the plan's
    draws (``Problem.draws``), shared with the bar and the other judgments of the plan, so what the
    hedge draws here none of them draws again; without, the hedge's own."""

    def __init__(self, spread: Spread, seed: int, rows: SeededDraws | None = None) -> None:
        medians, sigmas, caps = spread
        p90s = bounded_lengths(medians, sigmas, caps, np.full(len(medians), Z90))
        longest = planned_steps_array(p90s).max(initial=1)
        self.stretch: npt.NDArray[np.int64] = np.minimum(int(longest), planned_steps_array(caps))
        self._rows = SeededDraws(spread, seed) if rows is None else rows

    @property
    def drawn(self) -> int:
        """How many draws are in hand."""
        return self._rows.drawn

    def block(self, start: int, stop: int) -> Draws:
        """Draws ``start`` to ``stop`` (within ``SAMPLES``), drawing those not in hand yet."""
        return Draws(self._rows.rows(stop)[start:stop], self.stretch)


def outlier_means(
    problem: Problem, queues: Sequence[Sequence[int]], draws: Draws, reserve: bool
) -> FloatArray:
    """Mean makespan of ``queues`` on each draw in which one trajectory, equally likely any, runs as
    long as the batch's longest p90 (``draws.stretch``).

    Why the outlier: the draws alone trust each trajectory's p90, and on math100 the longest sample
    ran 3.8x its median, 28 of its own sigmas out; the predictor's p90 covered 84% of the samples.
    With one trajectory that long somewhere in the batch, a plan pays for it on the worker it lands
    on, which is what the comparison needs to see. Exact over where it lands: each worker's finish
    with its longest drawn trajectory stretched (a worker that runs at once ends with its longest,
    and which of its trajectories runs long barely matters), weighed by the worker's share of the
    batch, against the other workers' finishes on the draw itself. Every draw in one vectorised
    pass (``drawn_finishes``), each value the one a play of that draw gives, to the last bit.
    """
    drawn, stretched = drawn_finishes(
        problem.costs, problem.prompts, queues, draws.steps, draws.stretch, reserve
    )
    rows = np.arange(len(drawn))
    last = np.argmax(drawn, axis=1)  # the worker that ends the draw (the first of equals)
    first = drawn[rows, last]
    others = drawn.copy()
    others[rows, last] = -np.inf
    second = others.max(axis=1) if drawn.shape[1] > 1 else np.zeros(len(drawn))
    weighed = np.zeros(len(drawn))
    for w, queue in enumerate(queues):  # in worker order, one addition at a time, as a sum() of them
        weighed = weighed + len(queue) * np.maximum(stretched[:, w], np.where(last == w, second, first))
    total = sum(len(queue) for queue in queues)
    return weighed / total if total else np.zeros(len(drawn))
