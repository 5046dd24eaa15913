"""``EmbeddedServer.start`` on a server that is ending restarts it: one whose main thread has exited
while its other threads still run their exit (``ps`` shows ``Zl``; ``waitid`` sees the process only
once its last thread is gone) was taken for a live server and kept, and the caller went on with a
server that no longer answered, until the next ``start`` restarted it. A crashed valkey-server is
in that state for as long as its slowest thread takes to exit (an fsync, a loaded host: seen once in
test_embedded_watcher at load ~20); here a stand-in process holds it for as long as the test needs.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from service.embedded import EmbeddedServer, _main_thread_gone
from tests.service.polling import GONE_WITHIN_S
from tests.service.procfs import alive

# The main thread exits (``pthread_exit``) while another thread lives on for argv[1] seconds: the
# process is ``Zl`` all that while, as a server in its exit is.
MAIN_THREAD_EXITS = """
import ctypes, os, sys, threading, time
threading.Thread(target=lambda: (time.sleep(float(sys.argv[1])), os._exit(0))).start()
print("up", flush=True)
ctypes.CDLL(None).pthread_exit(None)
"""


@pytest.fixture
def ending() -> Iterator[subprocess.Popen[bytes]]:
    """A child process in its exit: main thread gone (state ``Z``), not yet waitable."""
    proc = subprocess.Popen([sys.executable, "-c", MAIN_THREAD_EXITS, "120"], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"up\n"
    deadline = time.monotonic() + GONE_WITHIN_S
    while alive(proc.pid):
        assert time.monotonic() < deadline, "the stand-in's main thread did not exit"
        time.sleep(0.02)
    assert proc.poll() is None  # not waitable yet: its other thread still runs
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_a_start_on_a_server_in_its_exit_restarts_it(ending: subprocess.Popen[bytes]) -> None:
    server = EmbeddedServer().start()
    try:
        server.kill()  # its port and data dir kept, as a crash leaves them
        server._held.proc = ending  # the server, ending: its main thread gone, its others still exiting
        server.start()
        assert server._held.proc is not ending
        assert ending.returncode is not None  # ended and reaped before the new one started
        client = redis.Redis.from_url(server.url, socket_timeout=5)
        try:
            assert client.ping()
            assert int(client.info("server")["process_id"]) == server._held.proc.pid
        finally:
            client.close()
    finally:
        server.stop()


def test_a_live_process_whose_name_reads_as_a_state_is_not_taken_for_one_ending(tmp_path: Path) -> None:
    """``/proc/<pid>/stat`` puts the command's name in parentheses, and a name may hold ``) Z (``
    itself: the state is the field after the last ``)`` (review48a). A process named so, running,
    is not ending; reaped, nothing is asked of it."""
    named = tmp_path / "a) Z (b"
    named.symlink_to(sys.executable)  # the name a process shows is its program's, as exec'd
    proc = subprocess.Popen([str(named), "-c", "import time; time.sleep(120)"])
    try:
        assert Path(f"/proc/{proc.pid}/stat").read_text().startswith(f"{proc.pid} (a) Z (b) ")
        assert not _main_thread_gone(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert not _main_thread_gone(proc.pid)  # reaped: no /proc entry left to read
