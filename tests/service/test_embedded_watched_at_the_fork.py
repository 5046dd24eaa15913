"""An embedded server is watched from its fork on: its owner ended between the fork and the moment
its ``Popen`` returns, by SIGKILL or by a forced exit's ``os._exit`` (a third stop signal,
``exit_guard.force``), still has its server ended, and its temporary dir removed.

The watcher was started once the server had been, with its pid: in between, the server ran in a
session of its own that no group signal reaches, with no watcher, and an owner that died there left
it running for good (exit53). Its watcher now starts first, and the server's own start tells it the
pid (``embedded_watch.Watch.before``). The window is held open by a ``Popen`` that returns only once
the test is done: the owner dies inside it every time.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from service.api import exit_guard
from service.embedded import EmbeddedServer
from tests.service.polling import GONE_WITHIN_S, gone_within, removed_within
from tests.service.procfs import end_server_if_left, owner_in_own_session, server_pid

WAIT_S = 60.0  # a bound against never, for a loaded host

# An owner whose ``Popen`` of its server never returns (within ``WAIT_S``), though the server is
# started: it writes the server's pid and data dir, then holds the spawn's thread. argv[1]: "kill" (the
# test SIGKILLs it), or "force" (its SIGTERM handler is a third stop signal's: ``exit_guard.force``,
# with ``serve``'s last act); argv[2], a data dir to use, or "" for a temporary one.
OWNER = f"""
import signal, subprocess, sys, threading
from pathlib import Path
from service.api import exit_guard
from service.embedded import EmbeddedServer, end_all_now
class NeverReturns(subprocess.Popen):
    def __init__(self, args, **kwargs):
        super().__init__(args, **kwargs)
        if "--dir" in args:
            print(self.pid, args[args.index("--dir") + 1], flush=True)
            threading.Event().wait({WAIT_S})
subprocess.Popen = NeverReturns
if sys.argv[1] == "force":
    exit_guard.enable(last_acts=(end_all_now,))
    signal.signal(signal.SIGTERM, lambda signum, frame: exit_guard.force("SIGTERM"))
EmbeddedServer(data_dir=Path(sys.argv[2]) if sys.argv[2] else None).start()
"""


def _owner(how: str, data_dir: str) -> tuple[subprocess.Popen[str], list[str]]:
    """The owner, in a session of its own as a terminal's job, and its first line's words: the server's
    pid and dir, once its ``Popen`` has forked it (none where the owner ended first)."""
    return owner_in_own_session(OWNER, how, data_dir)


def _ended(owner: subprocess.Popen[str]) -> int:
    """The owner's status, within ``WAIT_S`` (SIGKILLed, with its group, past it)."""
    try:
        owner.communicate(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(owner.pid, signal.SIGKILL)
        owner.communicate()
    return owner.returncode


def test_an_owner_killed_while_its_server_is_forked_leaves_no_server_nor_dir() -> None:
    owner, started = _owner("kill", "")
    try:
        assert started, f"the owner did not start a server: {owner.communicate()[1][-2000:]}"
        pid, data_dir = int(started[0]), Path(started[1])
        try:
            os.killpg(owner.pid, signal.SIGKILL)  # inside the window: its Popen has not returned
            assert _ended(owner) == -signal.SIGKILL
            assert gone_within(pid, GONE_WITHIN_S), f"valkey-server {pid} outlived its owner's SIGKILL"
            assert removed_within(data_dir, GONE_WITHIN_S), f"{data_dir} outlived its server"
        finally:
            end_server_if_left(pid)
    finally:
        _ended(owner)


def test_a_forced_exit_while_the_server_is_forked_leaves_no_server(tmp_path: Path) -> None:
    owner, started = _owner("force", str(tmp_path))
    try:
        assert started, f"the owner did not start a server: {owner.communicate()[1][-2000:]}"
        pid = int(started[0])
        try:
            os.kill(owner.pid, signal.SIGTERM)  # inside the window: its Popen has not returned
            assert _ended(owner) == exit_guard.FORCED_STATUS
            assert gone_within(pid, GONE_WITHIN_S), f"valkey-server {pid} outlived its owner's forced exit"
        finally:
            end_server_if_left(pid)
    finally:
        _ended(owner)


def test_the_server_keeps_no_end_of_the_pipe_its_start_told_its_pid_down() -> None:
    """The server's start (a shell) writes its pid down its stdout, the watcher's pipe, then becomes
    the server with /dev/null there: kept, the pipe's end was the server's for its whole run."""
    with EmbeddedServer() as server:
        stdout = os.readlink(f"/proc/{server_pid(server.url)}/fd/1")
    assert stdout == os.devnull, stdout
