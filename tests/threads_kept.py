"""No thread a test module started outlives it: a module that leaves one running fails its last test.

Why. Under ``--dist loadscope`` a pytest-xdist worker runs one module after another in one process,
and a thread a module left behind (an app's background pass, a keeper ticking, a pool's workers) ran
on into the modules after it, allocating and freeing beside their tests. A test about process-wide
state (the cycle collector, logging, signals, the environment, thread counts) then measured the
leftovers as well as itself: the fresh-clone CI of round 60 failed once in
tests/scheduler/test_gcpause.py so (threads61, docs/experiments.md).

How. ``threads_ended`` notes the threads alive as a module starts; as it ends (its fixtures torn
down), each thread started since is waited for, ``WAIT_S`` in all at most, and those still alive are
named (name, target) in the failure. Not flagged: threads started by a session-scoped fixture
(``owned_by_session``: they live for the session by design), and ``ALLOWED``, each with its reason.
A module that leaves nothing costs two ``threading.enumerate()`` calls, microseconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# For threads that are ending as the module ends (an app's last pass, a pool's workers): ~0.2 s on an
# idle host, more where five workers share two cores. A module that leaves nothing waits not at all,
# so a wide bound costs only the failing case; a narrow one would fail a module for a slow host.
WAIT_S = 10.0

# Threads that may outlive the module that started them: name -> why.
ALLOWED: dict[str, str] = {
    "cpsat-watch": "scheduler.policies.sat_watch: one per process, started by its first hard-deadline "
    "solve; between solves it sleeps on a condition (no CPU, no allocation), as in a replica",
}

_SESSION_OWNED: set[threading.Thread] = set()


@contextmanager
def owned_by_session() -> Iterator[None]:
    """Within: a session-scoped fixture's setup; the threads it starts are the session's, not the
    module's that first asked for it."""
    before = set(threading.enumerate())
    try:
        yield
    finally:
        _SESSION_OWNED.update(set(threading.enumerate()) - before)


def described(thread: threading.Thread) -> str:
    """``name (target)``: the thread's name and the function it runs (its class where it has none)."""
    target = getattr(thread, "_target", None)  # set by ``Thread(target=...)`` until the run ends
    if target is None:
        runs = f"{type(thread).__module__}.{type(thread).__qualname__}"
    else:
        runs = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"
    return f"{thread.name} ({runs})"


def left_running(before: set[threading.Thread], wait_s: float = WAIT_S) -> list[threading.Thread]:
    """The threads alive now that were not in ``before``, neither the session's nor ``ALLOWED``,
    each waited for until ``wait_s`` from now; those still alive then."""
    started = [
        thread
        for thread in threading.enumerate()
        if thread not in before and thread not in _SESSION_OWNED and thread.name not in ALLOWED
    ]
    until = time.monotonic() + wait_s
    for thread in started:
        thread.join(max(0.0, until - time.monotonic()))
    return [thread for thread in started if thread.is_alive()]


class ThreadsLeftError(AssertionError):
    """A test module left threads running after its last test and fixtures."""


@contextmanager
def threads_ended(wait_s: float = WAIT_S) -> Iterator[None]:
    """Within: one test module; after: ``ThreadsLeftError`` naming each thread it started that still
    runs ``wait_s`` later (``left_running``)."""
    before = set(threading.enumerate())
    yield
    left = left_running(before, wait_s)
    if left:
        named = "; ".join(described(thread) for thread in left)
        raise ThreadsLeftError(
            f"{len(left)} thread(s) this module started still run {wait_s:.0f} s after it ended: {named}. "
            "Stop and join what the module starts (tests/threads_kept.py)"
        )
