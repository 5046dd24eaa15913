"""A process whose exit guard's bound passes while the interpreter's exit runs the service's
``atexit`` waits, for ``test_exit_guard_teardown.py``: the window made wide.

Run as ``python -m tests.service.api.guard_teardown_child``. A give-up's take-back (``GIVEN_UP``, one
of the service's ``atexit`` waits) runs until the guard fires; the guard is armed with no bound as the
exit begins (an ``atexit`` hook registered after that wait's, so run before it), so it fires while the
wait runs; its last act never returns, so the guard ends the process only ``LAST_ACTS_S`` on.
Meanwhile the wait ends (the guard fired) and the exit goes on to the interpreter's finalization,
where the guard's daemon can no longer run: an exit that does not wait for a guard that fired
ended 0, the status of a stop in order, where the guard's is ``FORCED_STATUS``.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable

from service.api import plan_thread

ACTS_S = 3.0  # the guard's wait for its last act: the exit's finalization ends well inside it


def main() -> None:
    """Arrange the wait, the guard's arming and its last act, then return: the exit follows. The
    guard is imported after the wait's module, as ``serve``'s imports may have it."""
    from service.api import exit_guard

    exit_guard.MIN_BOUND_S = 0.0
    exit_guard.LAST_ACTS_S = ACTS_S
    # the service's wait at exit: a take-back that ends once the guard has fired
    plan_thread.GIVEN_UP.start(_until(exit_guard._fired), "given-up", bound_s=20.0)
    # Python runs ``atexit`` hooks last registered first: this one before the wait's
    atexit.register(exit_guard.arm, 0.0)
    exit_guard.enable(last_acts=(_until(threading.Event()),))


def _until(event: threading.Event) -> Callable[[], None]:
    """A wait for ``event``, with no bound."""

    def wait() -> None:
        event.wait()

    return wait


if __name__ == "__main__":
    main()
