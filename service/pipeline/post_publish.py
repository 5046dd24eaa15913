"""The bookkeeping that follows a ``POST /schedule``'s publish, which its answer waits for only as long
as the caller's deadline (``X-Envoy-Expected-Rq-Timeout-Ms``) allows.

Once the step is out, what is left is bookkeeping: entering the id in its step's set, remembering worker
profiles, counting the step towards a retrain, taking the request's in-flight mark and planning entry
back, each Redis error logged, not raised (``_logged``). On a stalled Redis each is a command timeout
with its retries (~3.1 s at the default 1 s): five of them held a 200 for 15.7 s after its publish, and
chaos11's soak answered an 800 ms deadline after 4.07 s (docs/experiments.md, postpub47). A step already
published cannot become a 504, but its caller does not need that work before its answer. So the route
collects it (``later``, called by the pipeline where the work arises) and runs it, in order, on a thread
of its own (``bounded``), waiting for it until ``FIXED_S`` (the answer's encoding and write) before the
deadline: with Redis answering it lands in a few ms and nothing changes; on a stall the 200 goes out at
the deadline and the thread goes on, bounded by the Redis client's own timeouts, each failure logged. A
request with no deadline, or a pipeline run outside the route, runs the work in line.

At the replica's stop (``stopped``: the app's ``stopping`` event, ``service/api/stopping.py``) nobody
reads the answer any more (its handler was cancelled), so the planning thread does not wait for the
work: run in line, the steps not begun yet go on a daemon (``AFTER_PUBLISH``, which the stop waits for
one command timeout at most), and a wait for the work's own thread ends. Each held the planning thread,
and the process's exit, one command timeout with its retries a step on a stalled Redis, or to the
caller's deadline. The step under way at the stop, and the publish itself, still run to their end.

Why that is safe for an asked-for retrain (``service.learning.step_over``): the planning entry
(``service/pipeline/step_part.py``) is taken back last, after the id entered its step's set, so from
its arrival to then the part is in the entry or the set, and from its publish to its settle in the
active index as well. A replica that dies after answering and before entering the set leaves the entry
to lapse at its own deadline (the plan queue's timeout + the budget + 60 s), the part still in the
active index until it settles: the window a replica dying between the publish and the set always had,
now as long as a stall past the deadline lasts.
"""

from __future__ import annotations

import atexit
import contextvars
import functools
import logging
import math
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TypeVar

from service.api.settling import Settling
from service.delivery.errors import REDIS_FAILED
from service.logs import schedule_only_context
from service.pipeline.deadline import Deadline
from service.pipeline.publish_pace import FIXED_S

T = TypeVar("T")
_log = logging.getLogger("service.pipeline")
STOP_POLL_S = 0.05  # while a request waits for its bookkeeping's thread: how often it reads the stop


@dataclass
class _Tail:
    """One request's bookkeeping: each step with what it does (for the log) and the context it runs
    in (the schedule's id it was queued under, nothing else: ``later``), run in order; ``release``
    always runs last."""

    release: Callable[[], None]
    steps: list[tuple[str, contextvars.Context, Callable[[], object]]] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)  # set as ``run_in_the_background`` ends
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ended: bool = False  # the steps ran (``_error`` set if one raised)
    _answered: bool = False  # the request answered without waiting for the rest
    _error: BaseException | None = None
    # whether the replica stops: the planning thread hands the rest on; None: nothing stops it (a
    # pipeline run outside the route), and the request waits for its bookkeeping's thread in one wait
    stopped: Callable[[], bool] | None = None

    def stopping(self) -> bool:
        """Whether the replica stops (``stopped``)."""
        return self.stopped is not None and self.stopped()

    def run(self, first: int = 0) -> None:
        """Every step from the ``first``, each Redis error logged (``_logged``); any other error
        (a bug) ends the steps and is raised; the release runs whatever happened."""
        try:
            for what, context, call in self.steps[first:]:
                context.run(_logged, what, call)
        finally:
            self.release()

    def run_in_line(self) -> None:
        """``run`` on the request's thread until the replica stops: the steps left then, and the
        release, go on a daemon (module doc)."""
        first = 0
        try:
            while first < len(self.steps) and not self.stopping():
                what, context, call = self.steps[first]
                context.run(_logged, what, call)
                first += 1
        except BaseException:
            self.release()
            raise
        if first < len(self.steps):
            AFTER_PUBLISH.start(functools.partial(self._logged_run, first), "after-publish-stopped")
        else:
            self.release()

    def _logged_run(self, first: int) -> None:
        try:
            self.run(first)
        except Exception:  # nobody reads the request's answer: its handler was cancelled at the stop
            _log.exception("bookkeeping after a published step failed")

    def run_in_the_background(self) -> None:
        """``run`` on the bookkeeping's thread: an error is kept for the request still waiting, or
        logged once it has answered."""
        error: BaseException | None = None
        try:
            self.run()
        except BaseException as raised:  # the request raises it, or nobody hears it but the log
            error = raised
        with self._lock:
            self._ended, self._error, answered = True, error, self._answered
        self.done.set()
        if answered and error is not None:
            _log.error("bookkeeping after a published step failed", exc_info=error)

    def outcome(self) -> tuple[bool, BaseException | None]:
        """On the request's thread, done waiting: whether the steps ended, and the error they raised;
        where they did not, the request answers without them, and their thread logs any error."""
        with self._lock:
            self._answered = not self._ended
            return self._ended, self._error


_COLLECTING: ContextVar[_Tail | None] = ContextVar("post_publish_tail", default=None)
# The threads that run on after their answer, waited for as the app stops, before its Redis pool is
# closed under them (``settle``), and at exit: daemons, as the give-ups' take-backs are.
AFTER_PUBLISH = Settling("the bookkeeping after a publish")
atexit.register(AFTER_PUBLISH.settle)


def later(what: str, call: Callable[[], object]) -> None:
    """Bookkeeping after a publish (``what``: for the log's ``step published, but <what> failed``):
    queued for the request's answer to wait for only until its deadline (``bounded``), or run at once
    where nothing collects it (a pipeline run outside the route, or a step queuing one of its own).
    Queued in a context of its own, the schedule's id alone (``logs.schedule_only_context``), not a
    copy of the request's: that carries the stop's clock and ``NEVER``, the caller's hard deadline and
    the predict stage's cutoff, so a step that checked one would give up at the stop the bookkeeping
    handed to a daemon precisely so that it runs; and it carries the request's collector, whose steps
    its thread has already read (docs/experiments.md, stop49)."""
    tail = _COLLECTING.get()
    if tail is None:
        _logged(what, call)
        return
    tail.steps.append((what, schedule_only_context(), call))


def bounded(
    serve: Callable[[], T],
    release: Callable[[], None],
    until: Deadline,
    stopped: Callable[[], bool] | None = None,
) -> T:
    """``serve()`` (the request's pipeline), its bookkeeping (``later``) collected and run after it,
    then ``release`` (the in-flight mark and planning entry taken back): waited for only until
    ``FIXED_S`` before the caller's deadline ``until``, in line where it sets none. A request that
    fails or is refused runs all of it in line before it answers: it leaves Redis as it found it.
    Once ``stopped()`` (the replica stops) the request waits for none of it (module doc)."""
    tail = _Tail(release)
    tail.stopped = stopped
    token = _COLLECTING.set(tail)
    try:
        answer = serve()
    except BaseException:
        _COLLECTING.reset(token)
        _run_refused(tail)
        raise
    _COLLECTING.reset(token)
    _wait(tail, until)
    return answer


def _wait(tail: _Tail, until: Deadline) -> None:
    """Run ``tail`` in line without a deadline; else on a thread, waited for until ``FIXED_S`` before
    the deadline (not at all once that passed: a publish that Redis held past it)."""
    left_s = until.left_s()
    if math.isinf(left_s):
        tail.run_in_line()
        return
    AFTER_PUBLISH.start(tail.run_in_the_background, "after-publish")
    _waited(tail, max(0.0, left_s - FIXED_S))
    ended, error = tail.outcome()
    if error is not None:
        raise error
    if not ended and tail.stopping():
        _log.warning("the replica stops; the bookkeeping after its publish goes on")
    elif not ended:
        _log.warning("answered at the caller's deadline; the bookkeeping after its publish goes on")


def _waited(tail: _Tail, wait_s: float) -> None:
    """Wait for ``tail``'s thread ``wait_s`` at most, or until the replica's stop, read every
    ``STOP_POLL_S`` (a wait on the thread's end is woken by nothing else); in one wait where nothing
    stops it."""
    if tail.stopped is None:
        tail.done.wait(wait_s)
        return
    until = time.monotonic() + wait_s
    while not tail.stopping() and (left_s := until - time.monotonic()) > 0:
        if tail.done.wait(min(STOP_POLL_S, left_s)):
            return


def _run_refused(tail: _Tail) -> None:
    """``tail`` of a request that raised, in line: an error of its own is logged, not raised over the
    request's (a refusal, or a failure after the publish that queued it)."""
    try:
        tail.run_in_line()
    except Exception:
        _log.exception("bookkeeping after a failed request failed")


def settle(timeout_s: float, left_s: float | None = None) -> int:
    """Wait for the bookkeeping threads still running, for ``timeout_s`` (at most ``left_s``), before
    the app closes its Redis pool; how many were cut (``Settling.settle``)."""
    return AFTER_PUBLISH.settle(timeout_s, left_s)


def _logged(what: str, call: Callable[[], object]) -> None:
    """Run bookkeeping that follows a publish (the step's set, worker profiles, the retrain counter),
    where a Redis error is logged and the step still answered 200. The step is out by then: an error
    answer would make a trainer send it again, and a retry without a ``schedule_id`` publishes the work
    twice. What is lost is documented where each is kept: a part missing from its step's set is seen
    by an asked-for retrain only while unsettled (the active index), as an older release's part
    (``service.learning.step_over``); the step's actuals are compared with each worker's previous
    profile; the retrain boundary is counted at the next step."""
    try:
        call()
    except REDIS_FAILED as error:
        _log.warning("step published, but %s failed: %s: %s", what, type(error).__name__, error)
