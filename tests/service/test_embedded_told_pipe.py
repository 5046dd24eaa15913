"""The pipe an embedded server's start tells its watcher the server's pid down (``Watch.before``,
``Watch.telling``) is the start's alone once the server runs, and nobody's once a start failed: the
owner keeps no end of it.

Why. The watcher reads that pipe to its end once its owner is gone, the starting server its last
writer; an owner that kept its own write end held a descriptor a server for nothing, and a start that
failed before the server ran (its shell could not be started) left one behind for good, in a process
that may start servers again and again (a test session, a ``serve`` retried). Real servers, real
watchers; the owner's and the watcher's descriptors read from ``/proc``.
"""

from __future__ import annotations

import os

import pytest

from service import embedded_watch
from service.embedded import EmbeddedServer
from tests.service.procfs import open_fds


def _pipes(pid: int | str) -> set[str]:
    """The pipes process ``pid`` holds an end of (``pipe:[inode]``)."""
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:  # the listing's own descriptor, closed since
            continue
        if target.startswith("pipe:"):
            found.add(target)
    return found


def test_a_running_servers_owner_shares_one_pipe_with_its_watcher_the_one_its_stop_writes_down() -> None:
    with EmbeddedServer() as server:
        watch = server._held.watch
        assert watch is not None
        shared = _pipes("self") & _pipes(watch.process.pid)
        stdin = os.readlink(f"/proc/{watch.process.pid}/fd/0")
    assert shared == {stdin}


def test_a_start_that_fails_before_its_server_runs_leaves_no_descriptor_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(embedded_watch, "SHELL", "/nonexistent/sh")  # the start itself cannot run
    before = open_fds()
    with pytest.raises(FileNotFoundError):
        EmbeddedServer().start()
    assert open_fds() == before
