"""The replay's pool: no barrier between steps, the costliest ready run first, batches shipped intact."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from scheduler.types import Trajectory
from service.replay.pool import Job, pack, play_pipelined, unpack

WAIT_S = 5.0  # far longer than a step's jobs take to be handed over


def _wait_for(event: threading.Event) -> bool:
    return event.wait(WAIT_S)


def _record(order: list[str], name: str, event: threading.Event) -> str:
    event.wait(WAIT_S)
    order.append(name)
    return name


def test_the_next_step_is_prepared_while_the_previous_steps_run_still_plays() -> None:
    """A barrier per step (the replay before) prepared step 1 only once step 0's runs had ended: the
    run waiting for step 1 to be prepared would then time out and return False."""
    prepared = threading.Event()

    def steps() -> Iterator[Sequence[Job]]:
        yield [Job((0, "a"), (0,), _wait_for, (prepared,))]
        prepared.set()  # what preparing step 1 (its fit) stands for
        yield [Job((1, "a"), (0,), _wait_for, (prepared,))]

    with ThreadPoolExecutor(2) as pool:
        results = play_pipelined(pool, steps(), slots=2, done=lambda _job: None)
    assert results == {(0, "a"): True, (1, "a"): True}


def test_ready_runs_start_costliest_first_across_steps_and_each_is_reported_once() -> None:
    order: list[str] = []
    release = threading.Event()
    reported: list[tuple[int, str]] = []

    def job(step: int, name: str, rank: int) -> Job:
        return Job((step, name), (rank,), _record, (order, f"{step}{name}", release))

    def steps() -> Iterator[Sequence[Job]]:
        yield [job(0, "lpt", 1), job(0, "cpsat", 0)]
        yield [job(1, "round_robin", 3), job(1, "cpsat", 0), job(1, "lpt", 1)]
        release.set()  # every step prepared: what is left runs in rank order

    with ThreadPoolExecutor(1) as pool:
        results = play_pipelined(pool, steps(), slots=1, done=lambda j: reported.append(j.key))
    assert order == ["0cpsat", "1cpsat", "0lpt", "1lpt", "1round_robin"]
    assert sorted(reported) == sorted(results)
    assert len(reported) == len(set(reported)) == 5
    assert results[(1, "lpt")] == "1lpt"


def test_a_shipped_batch_is_built_as_it_was_and_once_per_process() -> None:
    batch = (
        Trajectory("p0", 0, 120, 4096, 812.5, {0.5: 812.5, 0.9: 1730.0}),
        Trajectory("p0", 1, 120, 4096, 1.0, {}, group_id="g", pinned_worker="h100-0"),
        Trajectory("p1", 0, 33, 2048, 2048.0, {0.9: 2048.0, 0.5: 1500.25}),
    )
    shipped = pack(batch, 7, "test-replay")
    built = unpack(shipped)
    assert built == batch
    assert [list(t.quantiles) for t in built] == [list(t.quantiles) for t in batch]  # levels in order
    assert unpack(shipped) is built
    assert unpack(pack(batch[:1], 8, "test-replay")) == batch[:1]  # another number, another batch
