"""The replay's pool: no barrier between steps, the costliest ready run first, batches shipped intact."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import pytest

from scheduler.types import Trajectory
from service import interrupts
from service.replay.pool import Job, pack, play_pipelined, unpack

WAIT_S = 5.0  # far longer than a step's jobs take to be handed over
RUN_S = 1.0  # a run the parent waits for once every step is prepared


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


def _ran(started: threading.Event) -> bool:
    started.set()
    return True


def test_a_run_done_by_a_steps_end_is_reported_and_its_slot_refilled_while_the_next_step_is_prepared() -> (
    None
):
    """One slot, two runs of step 0: once the first is done, the step's end hands the second out, so it
    plays while the parent fits the step after (none idles while the parent fits), and the first is
    reported then, not once every step is prepared (the progress bar moves as runs end)."""
    first, second = threading.Event(), threading.Event()
    reported: list[tuple[int, str]] = []
    seen: dict[str, object] = {}

    def steps() -> Iterator[Sequence[Job]]:
        yield [Job((0, "a"), (0,), _ran, (first,)), Job((0, "b"), (1,), _ran, (second,))]
        first.wait(WAIT_S)
        yield []  # step 1: its fit is over, nothing of its own to play
        seen["second started during step 2's fit"] = second.wait(WAIT_S)
        seen["reported by then"] = list(reported)
        yield []

    with ThreadPoolExecutor(1) as pool:
        results = play_pipelined(pool, steps(), slots=1, done=lambda j: reported.append(j.key))
    assert results == {(0, "a"): True, (0, "b"): True}
    assert seen == {"second started during step 2's fit": True, "reported by then": [(0, "a")]}


def test_waiting_for_the_runs_polls_at_intervals_not_in_a_busy_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once every step is prepared the parent waits for the runs left: in slices (a Ctrl-C is
    raised between them, ``service.interrupts.wait_first``), not a spin that would take a core from
    the workers on a 2-core host."""
    waits: list[float | None] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        waits.append(kwargs.get("timeout"))
        return wait(*args, **kwargs)

    monkeypatch.setattr(interrupts, "wait", counted)
    with ThreadPoolExecutor(1) as pool:
        play_pipelined(pool, [[Job((0, "a"), (0,), time.sleep, (RUN_S,))]], slots=1, done=lambda _job: None)
    assert len(waits) <= 2 + RUN_S / interrupts.POLL_S * 2, waits[:10]
