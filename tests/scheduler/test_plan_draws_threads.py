"""A plan's draws (``plan_draws.SeededDraws``) asked from several threads at once are still the rows
of one pass from the seed: a draw is never torn, skipped or taken twice by a race.

Why. ``rows`` extends the rows in hand from one generator. No planner path asks one ``Problem``'s
draws from two threads today (the service plans a request on one thread; the bench and the replay
plan each request on its own ``Problem``), but ``planner.prepare``'s ``Prepared`` is documented as
shared by every plan of a request, and a caller planning two policies from it at once would race:
two extends each drawing from the generator, one of them kept, and the plan would depend on the
threads' timing. Run without the lock, the threads below get rows other than the one pass's. And
``Problem.draws``' memo builds one ``SeededDraws`` a seed: without its lock, threads asking first each
built (and drew) their own.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pytest

from scheduler.benchgen import bench_request
from scheduler.policies.plan_draws import SAMPLES, SeededDraws, Spread, draw_matrix
from scheduler.policies.problem import Problem, build_problem

THREADS = 8
TRIALS = 20  # fresh draws raced, each from its own seed
TRAJECTORIES = 4_096  # wide rows, so a block's drawing leaves the interpreter long enough to race


@pytest.fixture
def switching_often() -> Iterator[None]:
    """The interpreter switching threads as often as it can, so that a race shows when there is one."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def _spread() -> Spread:
    rng = np.random.default_rng(0)
    medians = rng.uniform(100.0, 2_000.0, TRAJECTORIES)
    sigmas = rng.uniform(0.2, 1.0, TRAJECTORIES)
    return medians, sigmas, np.full(TRAJECTORIES, 16_384.0)


def _raced(draws: SeededDraws) -> tuple[list[tuple[int, npt.NDArray[np.int64]]], list[str]]:
    """What every thread read, asking ``draws`` for growing stops, all starting at once, and what
    any of them raised (a torn extend can ask numpy for a negative count of draws)."""
    start = threading.Barrier(THREADS)
    read: list[tuple[int, npt.NDArray[np.int64]]] = []
    raised: list[str] = []

    def ask(first: int) -> None:
        start.wait()
        try:
            for stop in range(1 + first, SAMPLES + 1, 3):
                read.append((stop, draws.rows(stop).copy()))  # list.append: atomic under the GIL
        except ValueError as error:
            raised.append(str(error))

    threads = [threading.Thread(target=ask, args=(k % 3,)) for k in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return read, raised


@pytest.mark.usefixtures("switching_often")
def test_threads_asking_one_plans_draws_at_once_all_read_the_rows_of_one_pass() -> None:
    spread = _spread()
    torn: list[tuple[int, int]] = []
    raised: list[str] = []
    for seed in range(TRIALS):
        whole = draw_matrix(spread, np.random.default_rng(seed), SAMPLES)
        draws = SeededDraws(spread, seed)
        read, errors = _raced(draws)
        raised += errors
        read.append((SAMPLES, draws.rows(SAMPLES)))  # and what is kept once they are done
        torn += [(seed, stop) for stop, rows in read if not np.array_equal(rows, whole[:stop])]
    assert (torn, raised) == ([], [])


def _first_asks(problem: Problem, spread: Spread, seed: int) -> list[SeededDraws]:
    """What each of ``THREADS`` threads got, all asking ``problem``'s draws at once, first."""
    start = threading.Barrier(THREADS)
    got: list[SeededDraws] = []

    def ask() -> None:
        start.wait()
        got.append(problem.draws(spread, seed))  # list.append: atomic under the GIL

    threads = [threading.Thread(target=ask) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return got


@pytest.mark.usefixtures("switching_often")
def test_threads_asking_a_problem_for_its_draws_first_all_get_the_one_draws_it_keeps() -> None:
    """``Problem.draws``' memo builds one ``SeededDraws`` a seed and spread: threads asking first each
    built their own and drew its rows (the same rows, seeded: only the work was lost)."""
    spread = _spread()
    bare = build_problem(bench_request(64, 2, 0))
    built: list[int] = []
    for seed in range(TRIALS):
        problem = dataclasses.replace(bare)  # the same problem with fresh memos
        got = _first_asks(problem, spread, seed)
        built.append(len({id(draws) for draws in [*got, problem.draws(spread, seed)]}))
    assert built == [1] * TRIALS
