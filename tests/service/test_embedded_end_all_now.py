"""``embedded.end_all_now``, the last act of a forced exit (``service/api/exit_guard.py``): the server
is ended, and its watcher is disarmed before the server is reaped, as every other reap of this module
does (``embedded_watch``). Left armed over a reaped server, a watcher without a pidfd signals the pid
once the owner's ``os._exit`` closes its pipe: by then perhaps another process's (review50c)."""

from __future__ import annotations

import signal
import weakref

import pytest

from service import embedded, embedded_watch
from service.embedded import EmbeddedServer, end_all_now


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "pid"])
def test_end_all_now_ends_a_stalled_server_and_disarms_its_watcher_first(
    pidfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not pidfd:
        monkeypatch.setattr(embedded_watch, "_pidfd", lambda pid: None)
    server = EmbeddedServer().start()
    # this server only: the session's shared one is this process's too, and would be ended with it
    monkeypatch.setattr(embedded, "_HELD", weakref.WeakValueDictionary({0: server._held}))
    proc, watch = server._held.proc, server._held.watch
    assert proc is not None
    assert watch is not None
    try:
        server.signal(signal.SIGSTOP)  # stalled: takes no SIGTERM
        end_all_now()
        assert proc.returncode == -signal.SIGKILL
        assert watch.fd is None  # disarmed: nothing left to signal the reaped pid at the owner's end
        assert watch.process.returncode == 0  # it exited on the byte
    finally:
        server.stop()
