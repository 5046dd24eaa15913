"""A process whose exit guard's bound passes while the interpreter's exit runs the service's
``atexit`` waits, for ``test_exit_guard_teardown.py``: the window made wide.

Run as ``python -m tests.service.api.guard_teardown_child``. A give-up's take-back (``GIVEN_UP``, one
of the service's ``atexit`` waits) runs until the guard fires; the guard is armed with no bound at
the exit's start, after the hooks that ``enable`` and the import registered ran, so it fires while
that wait runs; its last act never returns, so the guard ends the process only ``LAST_ACTS_S`` on.
Meanwhile the wait ends (the guard fired) and the exit goes on to the interpreter's finalization,
where the guard's daemon can no longer run: an exit that does not wait for a guard that fired
ended 0, the status of a stop in order, where the guard's is ``FORCED_STATUS``.
"""

from __future__ import annotations

import atexit
import threading

from service.api import plan_thread

ACTS_S = 3.0  # the guard's wait for its last act: the exit's finalization ends well inside it


def main() -> None:
    """Arrange the wait, the guard's arming and its last act, then return: the exit follows. The
    guard is imported after the wait's module, as ``serve``'s imports may have it."""
    from service.api import exit_guard

    exit_guard.MIN_BOUND_S = 0.0
    exit_guard.LAST_ACTS_S = ACTS_S
    # the service's wait at exit: a take-back that ends once the guard has fired
    plan_thread.GIVEN_UP.start(exit_guard._fired.wait, "given-up", bound_s=20.0)
    # run last registered first: after ``enable``'s hook, before the import's waits
    atexit.register(exit_guard.arm, 0.0)
    exit_guard.enable(last_acts=(threading.Event().wait,))


if __name__ == "__main__":
    main()
