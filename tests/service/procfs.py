"""This process's children and open file descriptors, and whether a pid runs, read from ``/proc``
(Linux, no ``ps`` to spawn): what a server object dropped or never stopped must not leave behind; and
the pid an embedded server reports, to tell it from its watcher; and the embedded server a ``serve``
child runs, with its data dir; and an embedded server's owner run as a terminal's job, whose server a
test ends if it outlived the test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import redis

from service import embedded_watch

PROC = Path("/proc")


def open_fds() -> set[int]:
    """This process's open file descriptors (the listing's own included: it is the same each time)."""
    return {int(fd) for fd in os.listdir(PROC / "self" / "fd")}


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first, then ppid), or None."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()


def children() -> set[int]:
    """This process's children, zombies (ended, not yet reaped) included."""
    me, found = str(os.getpid()), set()
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and fields[1] == me:
                found.add(int(entry.name))
    return found


def unreaped(pid: int) -> bool:
    """Whether ``pid`` is still in the process table, a zombie (ended, not yet reaped) included: a
    child's pid is its own until its parent reaps it, and may be another process's after."""
    return _stat(pid) is not None


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: it exists and is no zombie."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def has_pidfds() -> bool:
    """Whether this kernel (5.3 and later, no seccomp filter refusing it) gives pidfds, which a watcher
    needs to learn that its server ended."""
    fd = embedded_watch._pidfd(os.getpid())
    if fd is None:
        return False
    os.close(fd)
    return True


def server_pid(url: str) -> int:
    """The pid of the server answering at ``url``, as it reports it."""
    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        return int(client.info("server")["process_id"])
    finally:
        client.close()


def kill_if_still_there(url: str, pid: int) -> None:
    """SIGKILL a server a test started and that outlived its owner, only while ``url`` still answers
    as ``pid``, so that no other process is signalled (the pid may be reused once it is gone)."""
    try:
        if not alive(pid):
            return
        os.kill(pid, signal.SIGCONT)  # a paused one answers nothing
        if server_pid(url) == pid:
            os.kill(pid, signal.SIGKILL)
    except (redis.RedisError, ProcessLookupError):
        pass


SERVERS = ("valkey-server", "redis-server")  # the embedded server's command names


def command_name(pid: int) -> str:
    """The command name of process ``pid``; empty once it is gone."""
    try:
        return (PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def end_server_if_left(pid: int) -> None:
    """SIGKILL ``pid`` where it is still an embedded server: the test's own, left running by a failed
    test (by its name, so that no process that reused the pid is signalled)."""
    if command_name(pid) in SERVERS:
        os.kill(pid, signal.SIGKILL)


def owner_in_own_session(script: str, *args: str) -> tuple[subprocess.Popen[str], list[str]]:
    """Run ``script`` with ``args`` in a session and process group of its own, as a terminal's job (the
    test is not in it): the process and its first line's words (none where it ended first)."""
    owner = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert owner.stdout is not None
    return owner, owner.stdout.readline().split()


def embedded_server_of(pid: int) -> tuple[int, Path]:
    """The pid of process ``pid``'s embedded server child and its data dir (the server runs in it:
    ``--dir``). A child still, in the session of its own it runs in (``embedded_spawn.spawn``)."""
    for child in (PROC / str(pid) / "task" / str(pid) / "children").read_text().split():
        if command_name(int(child)) in SERVERS:
            return int(child), Path(os.readlink(PROC / child / "cwd"))
    raise AssertionError("no embedded server process")
