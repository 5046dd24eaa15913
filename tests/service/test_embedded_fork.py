"""A fork of a server's owner (a ``multiprocessing`` worker, a test's child) ends without touching the
server: its copy of the server object's finalizer runs at its exit, and releases nothing of its parent's
(``_Held.owner_pid``), so the parent's server keeps answering and its data dir stays."""

from __future__ import annotations

import subprocess
import sys

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
