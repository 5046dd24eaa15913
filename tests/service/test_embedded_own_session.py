"""The embedded server runs in a session of its own: a signal to its owner's process group (a
terminal's Ctrl-C, a ``kill -TERM -PGID``) reaches the owner alone, whose stop ends the server last.

In the owner's group, the server ended at once of that signal, while the owner's stop still wrote to it
(``serve``: a step's publish, a mark's take-back, each met ``Connection refused``). Out of it, a
stop's handler that raises (``serve``'s ``exit_cleanly``) while ``Popen`` still returns must not
lose the process it started: no group signal ends that one any more (``embedded_spawn.spawn``), wherever
in the start the exception lands.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from tests.service.polling import GONE_WITHIN_S, gone_within, removed_within
from tests.service.procfs import end_server_if_left, kill_if_still_there, owner_in_own_session, server_pid

WAIT_S = 60.0  # a bound against never, for a loaded host
# How long an owner's window (its ``Popen`` slow to return, its ``Thread.start`` slow to) stays open:
# until the test's signal, whose handler's exception ends the sleep. A fixed 2 s window closed before
# the signal came on a loaded CI host, and the owner stopped outside it.
WINDOW_S = WAIT_S

# An owner whose stop on SIGTERM raises, as serve's does: at its stop it writes its server's answer to
# a PING asked after the signal, then stops the server.
ASKS_AFTER_THE_SIGNAL = """
import signal
import redis
from service.embedded import EmbeddedServer
def stop(signum, frame):
    raise SystemExit(0)
signal.signal(signal.SIGTERM, stop)
with EmbeddedServer() as server:
    try:  # the url inside: the test signals as it reads it, which may be before the next line runs
        print(server.url, flush=True)
        signal.pause()
    finally:
        print(redis.Redis.from_url(server.url).ping(), flush=True)
"""

# An owner whose ``Popen`` of its server returns only once the stop has come (or ``WINDOW_S``), though
# the server started, having written the server's pid; its stop says whether ``Popen`` had returned by
# then. ``Popen`` runs on the spawn's thread, which the handler's exception does not reach: the handler
# sets ``stopped``. The data dir, argv[1], is the test's: a temporary one, removed at the owner's exit
# while the server still started, left a server that ``Popen`` had lost ending of itself, which hid
# the loss.
STOPPED_WHILE_SPAWNING = f"""
import signal, subprocess, sys, threading
from pathlib import Path
from service.embedded import EmbeddedServer
spawning = []
stopped = threading.Event()
class SlowToReturn(subprocess.Popen):
    def __init__(self, args, **kwargs):
        super().__init__(args, **kwargs)
        if "--dir" in args:
            spawning.append(True)
            print(self.pid, flush=True)
            stopped.wait({WINDOW_S})
            spawning.clear()
subprocess.Popen = SlowToReturn
def stop(signum, frame):
    print("spawning" if spawning else "spawned", flush=True)
    stopped.set()
    raise SystemExit(0)
signal.signal(signal.SIGTERM, stop)
EmbeddedServer(data_dir=Path(sys.argv[1])).start()
"""


def _ended(owner: subprocess.Popen[str]) -> tuple[str, str]:
    """The owner's exit, within ``WAIT_S``: its stdout and stderr."""
    try:
        return owner.communicate(timeout=WAIT_S)
    finally:
        _gone(owner)


def _gone(owner: subprocess.Popen[str]) -> None:
    """Kill the owner, with its group, if it still runs: no owner outlives its test."""
    if owner.poll() is None:
        os.killpg(owner.pid, signal.SIGKILL)
        owner.wait()


def _stopped_in_its_window_ends_the_server(script: str, data_dir: Path, said: str) -> None:
    """Run ``script`` (an owner that starts its server on ``data_dir``, writes the server's pid, and holds
    a window of its start open) and SIGTERM its group: its stop lands inside the window (its handler
    says ``said``), the owner exits 0, and its server is gone all the same."""
    owner, started = owner_in_own_session(script, str(data_dir))
    try:
        assert started, f"the owner did not start a server: {_ended(owner)[1][-2000:]}"
        pid = int(started[0])
        try:
            os.killpg(owner.pid, signal.SIGTERM)
            out, err = _ended(owner)
            assert (owner.returncode, out.split()) == (0, [said]), err[-2000:]
            assert gone_within(pid, GONE_WITHIN_S), f"valkey-server {pid} outlived its owner's stop"
        finally:
            end_server_if_left(pid)
    finally:
        _gone(owner)


def test_a_signal_to_the_owners_group_leaves_the_server_answering_until_the_owner_stops_it() -> None:
    owner, started = owner_in_own_session(ASKS_AFTER_THE_SIGNAL)
    try:
        assert started, f"the owner did not start a server: {_ended(owner)[1][-2000:]}"
        url = started[0]
        pid = server_pid(url)
        data_dir = Path(os.readlink(f"/proc/{pid}/cwd"))  # the server runs in it (``--dir``)
        try:
            assert os.getpgid(pid) != os.getpgid(owner.pid), "the server is in its owner's process group"
            os.killpg(owner.pid, signal.SIGTERM)
            out, err = _ended(owner)
            assert (owner.returncode, out.split()) == (0, ["True"]), err[-2000:]
            assert gone_within(pid, GONE_WITHIN_S), f"valkey-server {pid} outlived its owner's stop"
            assert removed_within(data_dir, GONE_WITHIN_S), f"{data_dir} outlived its server"
        finally:
            kill_if_still_there(url, pid)
            _gone(owner)
            shutil.rmtree(data_dir, ignore_errors=True)  # the owner's, once the owner is gone
    finally:
        _gone(owner)


def test_a_stop_while_the_server_is_being_started_ends_it(tmp_path: Path) -> None:
    _stopped_in_its_window_ends_the_server(STOPPED_WHILE_SPAWNING, tmp_path, "spawning")


# An owner whose stop lands in ``Thread.start`` of the thread that starts its server, once that thread's
# ``Popen`` has returned (its pid written): ``Thread.start`` waits for the new thread to run, a wait a
# handler's exception interrupts, and that exception left ``spawn`` before its own wait, the server
# started but handed to nobody. Its stop says whether the wait in ``start`` was under way.
STOPPED_IN_THREAD_START = f"""
import signal, subprocess, sys, threading, time
from pathlib import Path
from service.embedded import EmbeddedServer
returned = threading.Event()
class Announced(subprocess.Popen):
    def __init__(self, args, **kwargs):
        super().__init__(args, **kwargs)
        if "--dir" in args:
            print(self.pid, flush=True)
            returned.set()
subprocess.Popen = Announced
starting = []
start = threading.Thread.start
def slow_start(self):
    if self.name == "embedded-spawn":
        starting.append(True)  # before ``start``: a stop in its own wait is in the window too
    start(self)
    if self.name == "embedded-spawn":
        returned.wait()
        time.sleep({WINDOW_S})
        starting.clear()
threading.Thread.start = slow_start
def stop(signum, frame):
    print("starting" if starting else "started", flush=True)
    raise SystemExit(0)
signal.signal(signal.SIGTERM, stop)
EmbeddedServer(data_dir=Path(sys.argv[1])).start()
"""


def test_a_stop_while_the_servers_thread_is_being_started_ends_the_server(tmp_path: Path) -> None:
    _stopped_in_its_window_ends_the_server(STOPPED_IN_THREAD_START, tmp_path, "starting")


# An owner whose stop lands in ``Thread.start`` of the spawn's thread while that thread's ``Popen`` has
# not returned yet (the server forked, its pid written): ``Popen`` returns only once the owner has
# said it waits no more (``_Handoff.abandon``, which the script wraps to tell it), so the server comes
# to the thread after the owner left, with nobody holding it. Its stop says whether the wait in
# ``start`` was under way.
STOPPED_IN_THREAD_START_BEFORE_POPEN_RETURNS = f"""
import signal, subprocess, sys, threading, time
from pathlib import Path
from service import embedded_spawn
from service.embedded import EmbeddedServer
left = threading.Event()
abandon = embedded_spawn._Handoff.abandon
def told(self):
    abandon(self)
    left.set()
embedded_spawn._Handoff.abandon = told
class ReturnsOnceLeft(subprocess.Popen):
    def __init__(self, args, **kwargs):
        super().__init__(args, **kwargs)
        if "--dir" in args:
            print(self.pid, flush=True)
            left.wait({WINDOW_S})
subprocess.Popen = ReturnsOnceLeft
starting = []
start = threading.Thread.start
def slow_start(self):
    if self.name == "embedded-spawn":
        starting.append(True)
    start(self)
    if self.name == "embedded-spawn":
        time.sleep({WINDOW_S})
        starting.clear()
threading.Thread.start = slow_start
def stop(signum, frame):
    print("starting" if starting else "started", flush=True)
    raise SystemExit(0)
signal.signal(signal.SIGTERM, stop)
EmbeddedServer(data_dir=Path(sys.argv[1])).start()
"""


def test_a_server_started_after_its_owner_left_the_start_is_ended_by_the_spawns_thread(
    tmp_path: Path,
) -> None:
    """The stop's exception left ``spawn`` from ``Thread.start``, before its wait, and the server's
    ``Popen`` returned only after: the owner holds nothing to end, so the spawn's thread ends it."""
    _stopped_in_its_window_ends_the_server(STOPPED_IN_THREAD_START_BEFORE_POPEN_RETURNS, tmp_path, "starting")
