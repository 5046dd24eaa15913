"""The replay's policy runs on worker processes: every step's runs as soon as its batch exists,
longest first, and each step's batch shipped compactly and built once per worker.

Why. A replayed step's predictions depend only on the trace's earlier steps, never on what the
policies made of them, so nothing needs a barrier between steps. With one (fit in the parent, then
the step's five runs on two processes, then the next fit) the pool idled through every fit and at
every step's tail, where one search was still running and the other process had nothing left. Here
the parent fits the next step while the pool plays what is ready, and keeps the pool fed from one
queue of every ready run, the most expensive first (an LPT list schedule across steps).

Shipping a batch as 4,096 ``Trajectory`` objects cost ~0.1 s to pickle in the parent and ~0.15 s to
unpickle in the worker, per run; as columns of plain values it costs a few milliseconds, and a
worker builds each step's batch once (``unpack``), however many of the step's runs it plays.

Each run's result depends only on its inputs (seeded, and planned on a frozen clock), so neither
the processes count nor the order of completion changes a figure; results are returned by key.
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any

from scheduler.types import Trajectory
from service.interrupts import wait_first

BUILT_KEEP = 16  # batches a worker keeps built: a few steps' predicted and true batches
_built: OrderedDict[tuple[str, int], tuple[Trajectory, ...]] = OrderedDict()  # per worker process


@dataclass(frozen=True, slots=True)
class Job:
    """One unit of work for the pool: ``fn(*args)``, reported under ``key`` (step, policy); lower
    ``rank`` first."""

    key: tuple[int, str]
    rank: tuple[int, ...]
    fn: Callable[..., Any]
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class ShippedBatch:
    """A batch of trajectories as columns, with an id under which a worker keeps it built."""

    ident: tuple[str, int]  # (replay id, batch number): unique across the pool's life
    columns: tuple[tuple[Any, ...], ...]  # one tuple per ``Trajectory`` field, in field order


def pack(batch: Sequence[Trajectory], number: int, replay_id: str) -> ShippedBatch:
    """``batch`` as plain columns (quantiles as item tuples), numbered ``number`` in replay ``replay_id``."""
    columns = (
        tuple(t.prompt_id for t in batch),
        tuple(t.sample_idx for t in batch),
        tuple(t.prompt_tokens for t in batch),
        tuple(t.max_new_tokens for t in batch),
        tuple(t.predicted_tokens for t in batch),
        tuple(tuple(t.quantiles.items()) for t in batch),
        tuple(t.group_id for t in batch),
        tuple(t.pinned_worker for t in batch),
    )
    return ShippedBatch((replay_id, number), columns)


def unpack(shipped: ShippedBatch) -> tuple[Trajectory, ...]:
    """The batch ``pack`` was given, built once per process and kept for the step's other runs."""
    batch = _built.get(shipped.ident)
    if batch is None:
        batch = tuple(
            Trajectory(p, s, pt, cap, planned, dict(q), g, pin)
            for p, s, pt, cap, planned, q, g, pin in zip(*shipped.columns, strict=True)
        )
        _built[shipped.ident] = batch
        while len(_built) > BUILT_KEEP:
            _built.popitem(last=False)
    else:
        _built.move_to_end(shipped.ident)
    return batch


def new_replay_id() -> str:
    """An id no other replay's batches share, so a worker never serves one replay another's batch."""
    return uuid.uuid4().hex


def play_pipelined(
    pool: Executor,
    steps: Iterable[Sequence[Job]],
    slots: int,
    done: Callable[[Job], None],
) -> dict[tuple[int, str], Any]:
    """Every job of every step, by key. ``steps`` yields each step's jobs once they can run (the
    parent's fit happens inside ``next``); up to ``slots`` jobs are handed to ``pool`` at once (more
    than its processes, so none idles while the parent fits), ready jobs lowest ``rank`` first.
    ``done`` is told each job as it finishes; a Ctrl-C is raised here even where Python dropped it
    (``service.interrupts.wait_first``)."""
    ready: list[tuple[tuple[int, ...], int, Job]] = []
    running: dict[Future[Any], Job] = {}
    results: dict[tuple[int, str], Any] = {}
    arrival = itertools.count()  # ties in rank: the earlier step first

    def top_up() -> None:
        while ready and len(running) < slots:
            job = heapq.heappop(ready)[2]
            running[pool.submit(job.fn, *job.args)] = job

    def collect(block: bool) -> None:
        for future in wait_first(running, block):  # wakes for a Ctrl-C (service.interrupts)
            job = running.pop(future)
            results[job.key] = future.result()
            done(job)

    for jobs in steps:
        for job in jobs:
            heapq.heappush(ready, (job.rank, next(arrival), job))
        top_up()
        collect(block=False)
        top_up()
    while running:
        collect(block=True)
        top_up()
    return results
