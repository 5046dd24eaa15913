"""The sidecar's background loops, supervised: the first one to die stops the sidecar, which exits 70.

Why. Beside its main loop a sidecar runs loops nobody awaits until shutdown: the lease heartbeats, the
takeover (then the presence key), and in push mode the engine watch and the hang bound. Each catches
what it expects (a Redis outage, an engine down); an exception it did not expect (a bug, a bad value)
ended its task, said nothing until "Task exception was never retrieved" at garbage collection, and the
sidecar went on half alive: without heartbeats its leases lapsed and were stolen from a live engine
while ``/health`` said ok, and without the hang bound a stuck sequence was held for ever.

What an operator expects of a process with a broken part is that it dies loudly and is restarted, not
that it limps: so the first loop to die is logged once (CRITICAL, with its traceback), ``/health``
answers 503 ``failed`` naming it from then on, the sidecar stops claiming and hands back at once what
it holds (as at a second SIGTERM), and it exits with status 70 (``EX_SOFTWARE``: an internal error,
apart from 2 for bad flags and 0 for a clean stop), so the supervisor or Kubernetes restarts it; what a
hand-back could not return is recovered by the next process's takeover or by the reapers. A loop is
not restarted in place: a bug that killed it once kills it again, and restarts with backoff inside a
process would hide it behind a sidecar that looks alive.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("service.sidecar")
EXIT_LOOP_DIED = 70  # sysexits.h EX_SOFTWARE: the command's exit status after a loop died


class LoopDiedError(RuntimeError):
    """A background loop of the sidecar (or an item's task) ended on an exception it did not expect (or
    returned, which no loop does: each runs until cancelled); ``loop`` names it (``heartbeat loop``)."""

    def __init__(self, loop: str, error: BaseException | None) -> None:
        cause = "returned" if error is None else f"{type(error).__name__}: {error}"
        super().__init__(f"the sidecar's {loop} died ({cause})")
        self.loop = loop


@dataclass
class Supervisor:
    """Runs named loops as tasks; the first that dies is recorded in ``dead`` and ``on_death`` is called
    (the sidecar's way to stop). ``stop`` cancels the rest at shutdown."""

    on_death: Callable[[LoopDiedError], None] = lambda _: None
    dead: LoopDiedError | None = None
    _tasks: dict[str, asyncio.Task[Any]] = field(default_factory=dict, init=False)
    _stopping: bool = field(default=False, init=False)  # set by ``stop``: a return is the shutdown's

    def start(self, name: str, loop: Coroutine[Any, Any, Any]) -> None:
        """Run ``loop`` as the task ``name``, watched from now on."""
        task = asyncio.create_task(loop, name=f"sidecar-{name}")
        self._tasks[name] = task
        task.add_done_callback(functools.partial(self._ended, name))

    def fail(self, name: str, error: BaseException | None) -> None:
        """Record that the loop ``name`` died of ``error``: one CRITICAL line, with its traceback,
        the first time only (a second death during the hand-back says nothing new)."""
        if self.dead is not None:
            return
        self.dead = LoopDiedError(name, error)
        log.critical("%s; handing back what it holds and exiting", self.dead, exc_info=error)
        self.on_death(self.dead)

    def _ended(self, name: str, task: asyncio.Task[Any]) -> None:
        if task.cancelled():  # the shutdown's own cancel
            return
        error = task.exception()  # retrieved here: no "Task exception was never retrieved"
        if error is None and self._stopping:  # ended as it was cancelled: the shutdown's too
            return
        self.fail(name, error)

    async def stop(self) -> None:
        """Cancel every loop and wait until each has ended."""
        self._stopping = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
