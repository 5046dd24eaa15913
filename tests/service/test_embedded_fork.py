"""A fork of a server's owner (a ``multiprocessing`` worker, a test's child) ends without touching the
server: its copy of the server object's finalizer runs at its exit, and releases nothing of its parent's
(``_Held.owner_pid``), so the parent's server keeps answering and its data dir stays. Nor does one that
lives on keep the server running past its parent's death (``embedded_watch``: the child closes its copy
of the watcher's pipe)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

from tests.service.polling import GONE_WITHIN_S, gone_within, running
from tests.service.procfs import kill_if_still_there, server_pid

# An owner that starts a server, forks a child that exits as Python exits (finalizers run), then says
# whether its server still answers and its data dir is still there, and stops it
OWNER = """
import os, sys
import redis
from service.embedded import EmbeddedServer
server = EmbeddedServer().start()
pid = os.fork()
if pid == 0:
    sys.exit(0)
os.waitpid(pid, 0)
client = redis.Redis.from_url(server.url, socket_timeout=5)
try:
    answers = client.ping()
except redis.RedisError:
    answers = False
print(answers, server.data_dir.exists(), flush=True)
client.close()
server.stop()
"""


def test_a_forked_child_of_the_owner_exiting_leaves_the_owners_server_running() -> None:
    done = subprocess.run([sys.executable, "-c", OWNER], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True"]


# An owner that starts a server and forks a child that lives on (a worker forked without exec), says
# the server's URL and the child's pid, and waits to be killed
FORKING_OWNER = """
import os, time
from service.embedded import EmbeddedServer
server = EmbeddedServer().start()
child = os.fork()
if child == 0:
    time.sleep(600)
    os._exit(0)
print(server.url, child, flush=True)
time.sleep(600)
"""


def test_a_forked_child_that_outlives_the_sigkilled_owner_does_not_keep_its_server_running() -> None:
    """The child's copy of the watcher's pipe kept it open past the owner's death: the watcher never
    read end-of-file, and the server ran on as long as the child did (for good, for a child that
    serves). The child closes its copy as it starts, so the owner's death alone ends the server."""
    owner = subprocess.Popen(
        [sys.executable, "-c", FORKING_OWNER], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    child = 0
    try:
        assert owner.stdout is not None
        said = owner.stdout.readline().split()
        assert said, f"the owner did not start a server: {owner.communicate()[1][-2000:]}"
        url, child = said[0], int(said[1])
        pid = server_pid(url)
        owner.kill()
        owner.wait()
        try:
            assert running(child), "the forked child must outlive its owner for this test to mean anything"
            assert gone_within(pid, GONE_WITHIN_S), f"valkey-server {pid} outlived its owner (its fork)"
        finally:
            kill_if_still_there(url, pid)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)  # re-parented to init (or a subreaper), which reaps it
