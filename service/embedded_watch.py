"""The watcher that stops an embedded server when its owner dies without stopping it.

``prctl(PR_SET_PDEATHSIG)`` in a ``preexec_fn`` is not safe in a threaded parent (and Linux only), so
each server has a watcher: a tiny Python process whose stdin is the read end of a pipe that only the
owner holds open. The kernel closes it when the owner dies, however it dies; the watcher reads
end-of-file and sends the server SIGTERM. A stop first writes one byte down the pipe, which disarms the
watcher.

The watcher holds a pidfd of the server where the kernel has them (Linux 5.3), opened by the owner
while the server is its unreaped child, so the pidfd names that process and no later one with its pid.
A signal through it never reaches another process, however long the watcher waits; and the watcher
polls it, so a server that ends of itself (a crash) while its owner lives ends its watcher too, which
then watches nothing. Without pidfds the watcher signals the pid, and only a disarm before each reap
keeps it from a reused one: its owner asks whether the server ended without reaping it
(``EmbeddedServer``'s ``waitid`` with ``WNOWAIT``) and reaps it only once the watcher is disarmed.

An owner that dies can remove nothing, so the watcher also removes the server's temporary data dir,
once the pidfd says the server has ended (it writes its log there until then); without a pidfd it
cannot tell when, and leaves the dir.

A child the owner forks without exec (``os.fork``, a ``multiprocessing`` fork) gets a copy of every
descriptor, the pipe's write end too: close-on-exec does nothing there. Kept, that copy held the pipe
open past the owner's death, and the server ran on until the child exited too. So the child closes
its copies as it starts (``os.register_at_fork``): only the owner's death ends the pipe, as before.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import weakref
from dataclasses import dataclass

WATCHER_EXIT_S = 10.0  # wait for a disarmed watcher to exit before SIGKILL (it exits in milliseconds)

# The watcher: argv[1] is the server's pid, argv[2] a pidfd of it or -1, argv[3] its temporary dir or "";
# stdin, a pipe only the owner writes. A byte read is the owner disarming it; end-of-file, the owner gone
# without a stop; the pidfd readable, the server ended: nothing left to stop (and the owner, alive, keeps
# the dir). SIGCONT wakes a server stopped by SIGSTOP (the outage tests) to take the SIGTERM; the dir is
# removed once the pidfd says the server has ended, within a minute (one slower to end keeps it). Ctrl-C
# and a closed terminal reach the whole process group, of which its owner may die: the watcher runs in
# a session of its own, out of their reach, as its server does, and ignores both as well (a ``kill`` of
# a group it was put in).
WATCHER = """
import os, select, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
pid, pidfd, tmp_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
watched = select.poll()
watched.register(0, select.POLLIN)
if pidfd >= 0:
    watched.register(pidfd, select.POLLIN)
ready = dict(watched.poll())
if pidfd in ready or os.read(0, 1):
    sys.exit(0)
for signum in (signal.SIGTERM, signal.SIGCONT):
    try:
        if pidfd >= 0:
            signal.pidfd_send_signal(pidfd, signum)
        else:
            os.kill(pid, signum)
    except ProcessLookupError:
        pass
if pidfd >= 0 and tmp_dir:
    ended = select.poll()
    ended.register(pidfd, select.POLLIN)
    if ended.poll(60_000):
        import shutil
        shutil.rmtree(tmp_dir, ignore_errors=True)
"""


def _pidfd(pid: int) -> int | None:
    """A pidfd of ``pid``, or None where the platform, the kernel or a seccomp filter has none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


@dataclass(eq=False)  # by identity: kept in ``_ARMED``, a weak set
class Watch:
    """One armed watcher: its process and the write end of its pipe, until ``disarm``."""

    process: subprocess.Popen[bytes]
    fd: int | None  # the pipe's write end; None once disarmed
    pid: int  # the server it watches, the owner's child: to be reaped only after ``disarm``

    @classmethod
    def start(cls, pid: int, tmp_dir: str | None = None) -> Watch:
        """Start the watcher of server ``pid``, which must be this process's child, not yet reaped;
        ``tmp_dir``, the server's temporary data dir, for the watcher to remove if the owner dies.

        ``os.pipe`` and ``os.pidfd_open`` make close-on-exec descriptors: the server and any other
        child this process starts hold neither, so the owner's death is the only end-of-file the
        watcher can read; the watcher gets the pidfd by ``pass_fds`` only.

        The watcher runs in a session of its own: Ctrl-C and a closed terminal signal the owner's
        whole process group, and a watcher still starting (its Python not yet at the lines that
        ignore them) died of them with its owner, leaving the server it was there to stop.
        """
        read_end, write_end = os.pipe()
        pidfd = _pidfd(pid)
        try:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    "-c",
                    WATCHER,
                    str(pid),
                    str(-1 if pidfd is None else pidfd),
                    tmp_dir or "",
                ],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=() if pidfd is None else (pidfd,),
                start_new_session=True,  # in no group a terminal signals: see below
            )
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
            if pidfd is not None:
                os.close(pidfd)
        watch = cls(process, write_end, pid)
        _ARMED.add(watch)
        return watch

    def disarm(self) -> None:
        """Disarm the watcher and reap it: before the server is signalled or reaped by its owner, since
        once reaped its pid may be another process's, which the watcher must never signal."""
        if self.fd is not None:
            # A watcher that ended (its server did, or a kill) has nothing to disarm.
            with contextlib.suppress(OSError):
                os.write(self.fd, b"x")
            os.close(self.fd)
            self.fd = None
        _ARMED.discard(self)
        try:
            self.process.wait(timeout=WATCHER_EXIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def forget(self) -> None:
        """In a forked child: close this copy of the pipe's write end, unwritten. Its owner is the
        parent; a child's copy kept the pipe open past the parent's death. A ``disarm`` in the child
        then writes nothing (its parent's server is not the child's to stop)."""
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


# The watches armed in this process: a forked child closes its copies of their pipes (``forget``).
_ARMED: weakref.WeakSet[Watch] = weakref.WeakSet()


def _forget_in_child() -> None:
    """``os.register_at_fork``'s hook, run in each child of ``os.fork`` before it returns there."""
    for watch in list(_ARMED):
        watch.forget()
    _ARMED.clear()


os.register_at_fork(after_in_child=_forget_in_child)
