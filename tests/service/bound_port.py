"""The port a server a test starts has bound: asked for port 0, the kernel's pick, read back.

Why. A port picked free (``service.ports.free_port``) is free when picked, not when the server binds
it. A child ``serve`` spends seconds in its imports on a loaded host before it binds, and any other
process (another test's server, another run's on the same host, whose workers share no slices with
ours) could bind the port first: the child then failed to start, or, worse, the test's readiness
poll was answered by that other server. A server asked for port 0 binds a port the kernel gives it,
which no other socket holds, so there is nothing to race. The test then reads that port back: from
the uvicorn server's own socket in this process (``LiveServer``), or from the child's listening socket
(its inodes in ``/proc``, the namespace's listeners from the kernel: ``child_port``), so the child's
output is left whole for the test to read.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.service.listeners import listeners

PROC = Path("/proc")


def child_port(proc: subprocess.Popen[Any], timeout_s: float) -> int:
    """The TCP port ``proc`` (started with ``--port 0``) listens on, once it does, within ``timeout_s``
    of its own time (``own_s``): the time it waited in the run queue for a CPU another process held
    is not counted. Fails if it exits first or listens on more than one port (which would be ambiguous).

    Why its own time: ~90 % of a ``serve`` start is imports, CPU-bound, and at load ~30 on 2 cores
    the child waits for a CPU most of the time (a start of ~25 s took 60-110 s beside two burners,
    and 60 and 90 s wall bounds failed the first ``serve`` of three workers started at once). A child
    that hangs still fails: blocked (a lock, a socket, a sleep) it waits in no run queue, and spinning
    it runs; either way its own time grows as the wall clock's (or as its share of the CPU)."""
    called = time.monotonic()
    while True:
        ports = listening_ports(proc.pid)
        if ports:
            assert len(ports) == 1, f"{proc.args!r} listens on {sorted(ports)}: which is its server?"
            return ports.pop()
        assert proc.poll() is None, f"{proc.args!r} exited before it listened: {_stderr(proc)}"
        age, own = own_s(proc.pid, time.monotonic() - called)
        assert own < timeout_s, (
            f"{proc.args!r} did not listen within {timeout_s} s of its own ({age:.1f} s in all, "
            f"{age - own:.1f} s of them waiting for a CPU)"
        )
        time.sleep(0.05)


def own_s(pid: int, waited_s: float) -> tuple[float, float]:
    """Process ``pid``'s age and its own part of it: the age less the time its main thread waited in
    the run queue for a CPU another process held (``/proc/PID/schedstat``'s second field, in ns),
    so what it ran, and what it slept or blocked. Where the kernel keeps no such count, ``waited_s``
    (how long the caller has waited for it) is both."""
    try:
        ticks = int((PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19])
        age = float((PROC / "uptime").read_text().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")
        age = max(age, waited_s)  # never less than the caller saw: a container's own /proc/uptime
        # (lxcfs) would otherwise set the host's start ticks against its shorter uptime
        queued_ns = int((PROC / str(pid) / "schedstat").read_text().split()[1])
    except (OSError, IndexError, ValueError):  # gone (the caller's poll says so), or no such counts
        return waited_s, waited_s
    return age, age - queued_ns / 1e9


def listening_ports(pid: int) -> set[int]:
    """The TCP ports (IPv4 and IPv6) process ``pid`` holds a listening socket on; empty once it is gone.

    The child's socket inodes are read first (its ``fd`` links, ~0.08 ms): a child still in its
    imports holds none, and the namespace's listeners (``tests.service.listeners``) are not asked."""
    inodes = _socket_inodes(pid)
    if not inodes:
        return set()
    return {port for inode, port in listeners().items() if inode in inodes}


def _socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets among ``pid``'s open file descriptors (``socket:[inode]``)."""
    inodes: set[int] = set()
    try:
        fds = os.listdir(PROC / str(pid) / "fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(PROC / str(pid) / "fd" / fd)
        except OSError:  # closed since the listing
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def _stderr(proc: subprocess.Popen[Any]) -> str:
    """The last of an ended child's stderr, where it is a pipe."""
    err = proc.communicate()[1]
    if isinstance(err, bytes):
        err = err.decode(errors="replace")
    return (err or "")[-2000:]
