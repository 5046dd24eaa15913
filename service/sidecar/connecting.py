"""The pull sidecar before Redis first answers: the session still to be made (``Connecting``), the 503
a worker's call gets meanwhile (``ConnectingError``, retried after ``CONNECTING_RETRY_AFTER_S``), and the
connect itself, run in a daemon thread.

Apart from ``pull_state`` because it is the one stretch of a pull sidecar's life with no session: the
routes are served from the start (``/health`` answers, a worker's calls are told to retry), the
connect may wait for ever on a cluster that is down, and a SIGTERM meanwhile must not be held up by
that wait (``asyncio.to_thread``'s threads are joined at exit; a daemon thread is not). The reports
refused meanwhile are remembered by ``PullState.reporting`` (at most ``REFUSED_KEPT``), and the
takeover waits up to ``REPORT_RETRY_GRACE_S`` past their ``Retry-After`` for their retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, cast

if TYPE_CHECKING:
    from service.sidecar.session import WorkerSession

T = TypeVar("T")


@dataclass(frozen=True)
class Connecting:
    """A session still to be made: ``connect`` blocks until Redis answers (a cluster down at start)."""

    worker_id: str
    connect: Callable[[], WorkerSession]


# the ``Retry-After`` of a 503 ``ConnectingError``: the worker's report comes back about this much later
CONNECTING_RETRY_AFTER_S = 1
# past that, how long the takeover still waits for such a report's retry before it hands back the
# predecessor's leases (a retry landing first keeps its finished item from being run again)
REPORT_RETRY_GRACE_S = 2.0
REFUSED_KEPT = 1024  # reports refused while connecting, awaited by the takeover (a bound, not a need)


class ConnectingError(RuntimeError):
    """The sidecar has not reached Redis yet: a 503, retry later."""

    def __init__(self) -> None:
        super().__init__("connecting to Redis")


async def in_daemon_thread(call: Callable[[], T]) -> T:
    """``call()`` in a daemon thread: a wait for Redis must not hold the process at exit after SIGTERM
    (``asyncio.to_thread``'s threads are joined at exit, and the wait for a cluster has no end)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: Exception | None) -> None:
        if done.cancelled():  # the server stopped before Redis answered
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(cast(T, result))

    def target() -> None:
        result: T | None = None
        error: Exception | None = None
        try:
            result = call()
        except Exception as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=target, name="redis-connect", daemon=True).start()
    return await done
