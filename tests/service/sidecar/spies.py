"""Spies on a real session: what it was asked to do, recorded as it does it. The drain and shutdown
tests read from them the bound each hand-back was given, which no counter or log line says; the runner
tests, how many items the sidecar had started at once, the moment it started its n-th, and the moment
its first (or n-th) request reached the engine, which the engine can also be made to hold until the
sidecar has done what the test waits for."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from service.engine_sim.batch import Generation, SimulatedEngine
from service.sidecar.holdings import Held, Holdings
from service.sidecar.session import WorkerSession


def hand_back_bounds(session: WorkerSession, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The ``within_s`` of each of ``session``'s hand-backs from now on, in order; each still runs."""
    given: list[float] = []
    hand_back = session.hand_back

    async def recorded(helds: list[Any], within_s: float, died: str = "", hurry: Any = None) -> None:
        given.append(within_s)
        await hand_back(helds, within_s, died, hurry)

    monkeypatch.setattr(session, "hand_back", recorded)
    return given


class MostStarted(Holdings):
    """Holdings that remember the most leases the sidecar ever had started at once: what it sent to
    run together, counted as it decides, whatever the engine then saw of it. The engine's own
    ``max_running`` can stay below: the requests reach it one by one, and on a loaded host the first
    (~0.15 s) can finish before the last arrives."""

    most: int = 0
    starts: int = 0  # items started so far: what a ``held_generation`` can wait for

    def start(self, held: Held) -> None:
        super().start(held)
        self.starts += 1
        self.most = max(self.most, self.in_flight())


class Started(Holdings):
    """Holdings that call ``then()`` on the sidecar's loop as it starts its ``at``-th item: a test's
    stop or fault comes while those run, not at a poll that sees a count of running items, which
    a poll late on a loaded host also saw once the first items had ended and the next had started."""

    def __init__(self, max_in_flight: int, at: int, then: Callable[[], None]) -> None:
        super().__init__(max_in_flight)
        self.at, self.then, self.started = at, then, 0

    def start(self, held: Held) -> None:
        super().start(held)
        self.started += 1
        if self.started == self.at:
            self.then()


def first_generation(monkeypatch: pytest.MonkeyPatch, then: Callable[[], None]) -> None:
    """Call ``then()`` as the first request reaches an engine-sim served from this process
    (``procs.engine_threads``), on the engine's own thread, before it queues the request: nothing
    can answer or withdraw it before ``then`` returns, and whatever the sidecar does about it comes
    while the engine holds it. A lease lost or a schedule wiped then is lost or wiped mid-generation,
    not at a poll of Redis's ``running`` count, which a poll late on a loaded host (the ~0.5 s item
    already done) never saw again. ``then`` may block (a Redis call): the engine waits for it."""
    generation_at(monkeypatch, 1, then)


def generation_at(monkeypatch: pytest.MonkeyPatch, at: int, then: Callable[[], None]) -> None:
    """``first_generation`` at the ``at``-th request: every request before it has reached the engine
    too, so each was started by its sidecar (a sidecar in a process of its own, whose holdings a test
    cannot reach)."""

    async def call() -> None:
        then()  # a plain call on the engine's loop, which waits for it (it may block on Redis)

    _before_request(monkeypatch, at, call)


def held_generation(
    monkeypatch: pytest.MonkeyPatch, at: int, until: Callable[[], bool], bound_s: float = 10.0
) -> None:
    """Hold the ``at``-th request at an engine-sim served from this process (``procs.engine_threads``)
    until ``until()`` holds, then generate it: the sidecar counts the item running meanwhile, and
    what it decides beside it is decided while it runs, whenever its loop gets there, not in a
    window of the wall clock that a loop starved on a loaded host misses. ``until`` is asked every
    5 ms on the engine's loop, which keeps serving the other requests; ``bound_s`` ends the hold
    where it never holds (a sidecar that never does it: the test then fails on its asserts, not its
    timeout)."""

    async def hold() -> None:
        ends = time.monotonic() + bound_s
        while not until() and time.monotonic() < ends:
            await asyncio.sleep(0.005)

    _before_request(monkeypatch, at, hold)


def _before_request(monkeypatch: pytest.MonkeyPatch, at: int, before: Callable[[], Awaitable[None]]) -> None:
    """Await ``before()`` as the ``at``-th request reaches an engine-sim served from this process,
    on the engine's loop, before it generates that request: the one counting wrapper of
    ``SimulatedEngine.generate`` that ``generation_at`` and ``held_generation`` share."""
    generate = SimulatedEngine.generate
    seen = 0

    async def spied(engine: SimulatedEngine, prompt_tokens: int, output_tokens: int) -> Generation:
        nonlocal seen
        seen += 1
        if seen == at:
            await before()
        return await generate(engine, prompt_tokens, output_tokens)

    monkeypatch.setattr(SimulatedEngine, "generate", spied)
