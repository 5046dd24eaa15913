"""The port a server a test starts has bound: asked for port 0, the kernel's pick, read back.

Why. A port picked free (``service.ports.free_port``) is free when picked, not when the server binds
it. A child ``serve`` spends seconds in its imports on a loaded host before it binds, and any other
process (another test's server, another run's on the same host, whose workers share no slices with
ours) could bind the port first: the child then failed to start, or, worse, the test's readiness
poll was answered by that other server. A server asked for port 0 binds a port the kernel gives it,
which no other socket holds, so there is nothing to race. The test then reads that port back: from
the uvicorn server's own socket in this process (``LiveServer``), or from the child's listening socket
in ``/proc`` (``child_port``), so the child's output is left whole for the test to read.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

PROC = Path("/proc")
LISTEN = "0A"  # a socket's state in /proc/net/tcp when it listens


def child_port(proc: subprocess.Popen[Any], timeout_s: float) -> int:
    """The TCP port ``proc`` (started with ``--port 0``) listens on, once it does, within
    ``timeout_s``; fails if it exits first or listens on more than one (which would be ambiguous)."""
    deadline = time.monotonic() + timeout_s
    while True:
        ports = listening_ports(proc.pid)
        if ports:
            assert len(ports) == 1, f"{proc.args!r} listens on {sorted(ports)}: which is its server?"
            return ports.pop()
        assert proc.poll() is None, f"{proc.args!r} exited before it listened: {_stderr(proc)}"
        assert time.monotonic() < deadline, f"{proc.args!r} did not listen within {timeout_s} s"
        time.sleep(0.05)


def listening_ports(pid: int) -> set[int]:
    """The TCP ports (IPv4 and IPv6) process ``pid`` holds a listening socket on; empty once it is gone."""
    inodes = _socket_inodes(pid)
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / str(pid) / "net" / table).read_text().splitlines()[1:]
        except OSError:  # gone, or no IPv6
            continue
        for line in lines:
            fields = line.split()  # sl, local address, remote address, state, ..., inode (the tenth)
            if fields[3] == LISTEN and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets among ``pid``'s open file descriptors (``socket:[inode]``)."""
    inodes: set[str] = set()
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
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _stderr(proc: subprocess.Popen[Any]) -> str:
    """The last of an ended child's stderr, where it is a pipe."""
    err = proc.communicate()[1]
    if isinstance(err, bytes):
        err = err.decode(errors="replace")
    return (err or "")[-2000:]
