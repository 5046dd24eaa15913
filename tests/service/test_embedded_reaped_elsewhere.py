"""An embedded server whose process another waiter reaped (a ``waitpid(-1)`` of a SIGCHLD handler, or
a library's reaper) is no process of ours any more: its pid may be anyone's. ``EmbeddedServer`` asks
whether its server ended without reaping it (``waitid`` with ``WNOWAIT``, ``ECHILD`` read as ended);
a signal then must not go to that pid."""

from __future__ import annotations

import os
import signal

import pytest

from service.embedded import EmbeddedServer


def test_a_server_reaped_elsewhere_is_not_signalled_by_its_old_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    """``signal`` sends by ``os.kill`` to a server not known to have ended: after another waiter
    reaped it, that pid named no process (``ProcessLookupError`` out of an outage test's SIGCONT) or
    one started since, which got the SIGSTOP meant for Redis. ``Popen.send_signal``, used before,
    polled first and took the ``ECHILD`` as the end."""
    sent: list[tuple[int, int]] = []
    kill = os.kill

    def recorded(pid: int, signum: int) -> None:
        sent.append((pid, signum))
        kill(pid, signum)

    server = EmbeddedServer().start()
    try:
        proc = server._held.proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGKILL)
        os.waitpid(proc.pid, 0)  # reaped by another waiter, not by the server object
        monkeypatch.setattr(os, "kill", recorded)  # what ``signal`` sends
        server.signal(signal.SIGSTOP)
        assert (proc.pid, signal.SIGSTOP) not in sent
        server.start()  # a restart after it: the dead server is taken as ended, a new one runs
        restarted = server._held.proc
        assert restarted is not None
        assert restarted.pid != proc.pid
    finally:
        server.stop()
