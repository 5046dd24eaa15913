"""Threads sharing one problem's play and at-once memos (``Problem.plays``, ``Problem.at_once``) get
the answers a lone thread gets: the memos need no lock.

Why none. Each entry is stored whole (one dict assignment, atomic in CPython) and is true whoever
wrote it: an at-once verdict is a function of its key, and a play's entry is its finish or the clock
it was stopped at past a bound, which ``Problem.played`` answers only where it settles the question
asked. A race can play a queue twice, or keep a stopped play over a whole one (a play again later),
never an answer of another value. A lock held across the play would queue the threads behind each
other's plays. No planner path shares a problem between threads (the service plans each request on
one thread; the replay's pool pickles a problem with fresh memos), but ``planner.Prepared`` may be
(docs/experiments.md, sched54)."""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from scheduler.benchgen import bench_request
from scheduler.finish import worker_finish
from scheduler.policies.problem import Problem, build_problem

THREADS = 8
_BENCH = bench_request(256, 4, 0)
REQUEST = dataclasses.replace(  # caches of 60,000 tokens: each worker's 64 items run in waves
    _BENCH,
    inventory=dataclasses.replace(
        _BENCH.inventory,
        workers=tuple(dataclasses.replace(w, kv_capacity_tokens=60_000) for w in _BENCH.inventory.workers),
    ),
)


@pytest.fixture(autouse=True)
def often_switched() -> Iterator[None]:
    """Threads switched every microsecond, so that their look-ups and stores interleave."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def _queues() -> tuple[tuple[int, ...], ...]:
    """Four queues of the batch, each in a few orders: 64 items on a worker run in waves."""
    return tuple(tuple(range(w, 256, 4))[::step] for w in range(4) for step in (1, -1))


def test_threads_asking_the_same_at_once_verdicts_all_get_a_lone_threads() -> None:
    queues = _queues()[::2]
    lone = build_problem(REQUEST).runs_at_once(queues, True)
    for _ in range(10):
        problem = build_problem(REQUEST)
        with ThreadPoolExecutor(THREADS) as pool:
            answers = list(pool.map(problem.runs_at_once, [queues] * THREADS, [True] * THREADS))
        assert answers == [lone] * THREADS


def _exact(problem: Problem, worker: int, queue: tuple[int, ...]) -> float:
    """The queue's finish played whole, read past every memo."""
    return worker_finish(problem.costs[worker], *problem.lengths(queue), True)


Answer = tuple[tuple[int, ...], float, float]  # a queue, the bound asked, the answer


def _plays(problem: Problem, exact: dict[tuple[int, ...], float], thread: int, trial: int) -> list[Answer]:
    """One thread's asks: every queue (queue ``index`` on worker ``index // 2 % 4``), starting at
    its own, each whole or stopped at a bound below or above its finish."""
    queues = list(enumerate(_queues()))
    answers = []
    for index, queue in queues[thread % len(queues) :] + queues[: thread % len(queues)]:
        bound = (math.inf, 0.9 * exact[queue], 1.1 * exact[queue])[(thread + index + trial) % 3]
        cost = problem.costs[index // 2 % 4]
        answers.append((queue, bound, problem.played(cost, queue, True, stop_at=bound)))
    return answers


def test_threads_playing_the_same_queues_to_different_bounds_get_what_a_lone_thread_gets() -> None:
    """Every answer is the finish where the play ends before the bound asked (or there is none),
    and at least the bound where it does not."""
    exact = {
        queue: _exact(build_problem(REQUEST), index // 2 % 4, queue) for index, queue in enumerate(_queues())
    }
    for trial in range(5):
        problem = build_problem(REQUEST)
        with ThreadPoolExecutor(THREADS) as pool:
            futures = [pool.submit(_plays, problem, exact, thread, trial) for thread in range(THREADS)]
        for future in futures:
            for queue, bound, answer in future.result():
                if exact[queue] < bound:
                    assert answer == exact[queue]
                else:
                    assert answer >= bound
