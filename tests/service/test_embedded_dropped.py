"""A server object dropped without ``stop()``, or never stopped before its owner exits, is stopped by
its finalizer: server and watcher ended and reaped, the pipe's write end closed, the temporary data
dir removed. Dropped, it used to leave both processes running and the pipe open: once the server
ended and ``subprocess`` reaped it, the still-armed watcher could signal that pid, by then perhaps
another process's, when the owner died."""

from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from service.embedded import EmbeddedServer
from tests.service.procfs import alive, children, open_fds, server_pid

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc (Linux)")


def _end_children_left(before: set[int]) -> None:
    """SIGKILL and reap the children this test started and left: unreaped, their pids are still theirs."""
    for pid in children() - before:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _start_and_drop() -> tuple[int, Path, int]:
    """Start a server and drop the only reference to it; its pid, data dir and port."""
    server = EmbeddedServer().start()
    assert server.data_dir is not None
    found = server_pid(server.url), server.data_dir, server.port
    del server
    gc.collect()
    return found


def test_a_server_dropped_without_stop_is_stopped_and_leaves_nothing_open() -> None:
    # Earlier tests' garbage in this worker closes its sockets when collected (the drop's collect
    # did, mid-test): collected first, and only a descriptor new since then counts as left open.
    gc.collect()
    fds, before = open_fds(), children()
    try:
        pid, data_dir, port = _start_and_drop()
        assert children() == before, "the server or its watcher still runs, or is left unreaped"
        assert open_fds() - fds == set(), "the watcher's pipe is still open"
        assert not alive(pid)
        assert not data_dir.exists()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
    finally:
        _end_children_left(before)


# An owner that starts a server, says its pid and data dir, and exits without stopping it
OWNER = """
import redis
from service.embedded import EmbeddedServer
server = EmbeddedServer().start()
client = redis.Redis.from_url(server.url)
print(client.info("server")["process_id"], server.data_dir, flush=True)
client.close()
"""


def test_a_server_never_stopped_is_stopped_before_its_owner_exits() -> None:
    """At interpreter exit the owner stops the server itself, then removes its data dir. It used to
    leave the server to its watcher, still running once the owner was gone, its dir removed under it.
    (The watcher ends such a server within ~100 ms of valkey's shutdown tick: nothing is left behind.)"""
    done = subprocess.run([sys.executable, "-c", OWNER], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr[-2000:]
    pid, data_dir = done.stdout.split()
    assert not alive(int(pid)), "the server outlived its owner's exit"
    assert not Path(data_dir).exists()
