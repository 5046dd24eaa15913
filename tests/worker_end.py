"""A pytest-xdist worker whose session has finished is deaf to SIGINT: the one execnet sends it then
must not land in whatever Python runs in the worker's last steps.

Once every worker has reported its session finished, the controller tells them all to exit, and
execnet sends SIGINT to a worker still running its pytest 5 s later
(``execnet.gateway_base.WorkerGateway._terminate_execution``). The last worker to finish is then in
pytest's unconfigure: a full ``gc.collect()`` (hypothesis's gc callback on it) and the cleanups,
which on the loaded 2-core host can pass 5 s. Its KeyboardInterrupt landed in that callback and
printed a ``PytestUnraisableExceptionWarning`` after the last test, in 4 runs of rounds 61-62
(sigint62, docs/experiments.md); elsewhere it would cut the unconfigure short. The worker's results
are with the controller by then, and a user's Ctrl-C reaches the controller, which ends its workers
itself: only a KeyboardInterrupt nobody asked for is lost. A SIGINT before the session finished (a
controller gone mid-run) still stops the worker's tests as it did.
"""

from __future__ import annotations

import signal

import pytest


@pytest.hookimpl(trylast=True)  # after every other finish, the session fixtures' teardown among them
def pytest_sessionfinish(session: pytest.Session) -> None:
    """In an xdist worker, SIGINT ignored from here to the process's end (see the module docstring)."""
    if getattr(session.config, "workerinput", None) is not None:  # set in xdist workers only
        signal.signal(signal.SIGINT, signal.SIG_IGN)
