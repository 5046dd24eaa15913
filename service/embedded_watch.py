"""The watcher that stops an embedded server when its owner dies without stopping it.

``prctl(PR_SET_PDEATHSIG)`` in a ``preexec_fn`` is not safe in a threaded parent (and Linux only), so
each server has a watcher: a tiny Python process whose stdin is the read end of a pipe that only the
owner holds open. The kernel closes it when the owner dies, however it dies; the watcher reads
end-of-file and sends the server SIGTERM. A stop first writes one byte down the pipe, which disarms the
watcher.

The watcher is started before its server (``Watch.before``), whose own start (``TELL``, a shell)
writes its pid down a second pipe before it ``exec``s the server: a watcher started after the fork,
given the pid, left a window in which an owner SIGKILLed, or ended by ``os._exit`` (``serve``'s third
stop signal), left the server running for good, in a session of its own that no group signal reaches
(exit53).
Armed first, the watcher reads the pid to that pipe's end once its owner is gone: the starting server
is its last writer. PR_SET_PDEATHSIG would not have closed the window either: it fires as the thread
that forked ends (``embedded_spawn``'s, at once), and is set only once the child runs its
``preexec_fn``, after the fork.

The watcher holds a pidfd of the server where the kernel has them (Linux 5.3), opened while the server
is the owner's unreaped child (by the owner; by the watcher as it is told the pid, the owner alive),
so the pidfd names that process and no later one with its pid. A pid told after the owner's death is
opened at once, the server just started: reused only were it to end, be reaped by its new parent and
its pid be handed out again, all in between.
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

# The watcher: argv[1] is the server's pid or -1, argv[2] a pidfd of it or -1, argv[3] its temporary dir
# or "", argv[4] the read end of the pipe its pid is told down or -1 (``Watch.before``: started before
# the server, its pid not yet known); stdin, a pipe only the owner writes. A byte read is the owner
# disarming it; end-of-file, the owner gone without a stop; the pidfd readable, the server ended:
# nothing left to stop (and the owner, alive, keeps the dir). A pid told is the server's, written by
# its own start before its exec (``TELL``): told while the owner lives, the watcher opens its pidfd
# then; the owner gone first, it reads the pid to the end of that pipe, whose last writer is the
# starting server (none: no server was started). SIGCONT wakes a server stopped by SIGSTOP (the outage
# tests) to take the SIGTERM; the dir is removed once the pidfd says the server has ended, within a
# minute (one slower to end keeps it). Ctrl-C and a closed terminal reach the whole process group, of
# which its owner may die: the watcher runs in a session of its own, out of their reach, as its server
# does, and ignores both as well (a ``kill`` of a group it was put in).
# A pid of 0 or below is never the server's: ``kill`` would take it for the watcher's own group, or,
# at -1, for every process it may signal (a slip that ended every process in the container: mutants54's
# W4); with no pidfd, such a pid ends the watcher before any signal.
WATCHER = """
import os, select, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
pid, pidfd, tmp_dir, told = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def told_pid():
    data = b""
    while not data.endswith(b"\\n"):
        chunk = os.read(told, 32)
        if not chunk:
            return -1
        data += chunk
    return int(data)
def opened(pid):
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1
watched = select.poll()
watched.register(0, select.POLLIN)
if told >= 0:
    watched.register(told, select.POLLIN)
elif pidfd >= 0:
    watched.register(pidfd, select.POLLIN)
while True:
    ready = dict(watched.poll())
    if 0 in ready:
        break
    if pidfd >= 0 and pidfd in ready:
        sys.exit(0)
    if told >= 0 and told in ready:
        watched.unregister(told)
        pid, told = told_pid(), -1
        if pid < 0:
            sys.exit(0)
        pidfd = opened(pid)
        if pidfd >= 0:
            watched.register(pidfd, select.POLLIN)
if os.read(0, 1):
    sys.exit(0)
if told >= 0:
    pid = told_pid()
    if pid < 0:
        sys.exit(0)
    pidfd = opened(pid)
if pidfd < 0 and pid <= 0:
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

# The server's start when its watcher runs first (``Watch.telling``): a POSIX shell whose stdout is
# the write end of the watcher's pipe for its pid. It writes its own pid there and becomes the server
# (``exec``: the same pid, the owner's child still), its stdout /dev/null, the pipe closed. A shell,
# not ``python -I -S``: ~45 ms less at each start on this host, alternated (review53d); its pipe is
# its stdout because dash redirects no descriptor above 9 (``>&12``: "Bad fd number"). A server that
# cannot be exec'd ends the shell, 127 (not found) or 126 (not executable), its line on its stderr,
# the server's log, which the start's error quotes with the status (``EmbeddedServer._ended_at_start``).
TELL = 'echo $$ && exec "$@" >/dev/null'
SHELL = "/bin/sh"


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
    pid: int | None  # the server it watches, the owner's child: to be reaped only after ``disarm``
    told: int | None = None  # the write end of the pipe the server's pid is told down (``before``)

    @classmethod
    def start(cls, pid: int, tmp_dir: str | None = None) -> Watch:
        """Start the watcher of server ``pid``, which must be this process's child, not yet reaped;
        ``tmp_dir``, the server's temporary data dir, for the watcher to remove if the owner dies.
        A server started before its watcher is unwatched in between: the embedded server's own is
        started after it (``before``)."""
        pidfd = _pidfd(pid)
        try:
            return cls._launch(pid, pidfd, tmp_dir, None)
        finally:
            if pidfd is not None:
                os.close(pidfd)

    @classmethod
    def before(cls, tmp_dir: str | None = None) -> Watch:
        """Start a watcher for a server not yet started, whose start (``telling``) tells it the
        server's pid, then ``spawned``. Started after the fork, a watcher left a window: an owner
        SIGKILLed, or ended by ``os._exit`` (a third stop signal: ``exit_guard.force``), between the
        server's fork and its watcher's start left a server in a session of its own that nothing
        ended (exit53). Started before, it is armed at the fork: the owner gone, it reads the pid to
        the end of that pipe, whose last writer is the server's start, which writes it before its
        ``exec`` whether or not its owner still lives."""
        read_end, write_end = os.pipe()
        try:
            watch = cls._launch(None, None, tmp_dir, read_end)
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        watch.told = write_end
        return watch

    def telling(self, args: list[str]) -> list[str]:
        """The command that starts the server of ``args`` and tells this watcher its pid first (``TELL``),
        to be started with ``told`` as its stdout."""
        assert self.told is not None
        return [SHELL, "-c", TELL, "sh", *args]

    def spawned(self, pid: int) -> None:
        """The server ``pid`` has been started (its own start told the watcher its pid): close the pipe
        that told it, so that only the server's start held it."""
        self.pid = pid
        self._close_told()

    @classmethod
    def _launch(cls, pid: int | None, pidfd: int | None, tmp_dir: str | None, told: int | None) -> Watch:
        """The watcher's process, armed: ``pid`` and its ``pidfd`` if known, else ``told``, the read end
        of the pipe its pid comes down.

        ``os.pipe`` and ``os.pidfd_open`` make close-on-exec descriptors: the server and any other
        child this process starts hold neither, so the owner's death is the only end-of-file the
        watcher can read; the watcher gets the pidfd and ``told`` by ``pass_fds`` only.

        The watcher runs in a session of its own: Ctrl-C and a closed terminal signal the owner's
        whole process group, and a watcher still starting (its Python not yet at the lines that
        ignore them) died of them with its owner, leaving the server it was there to stop.
        """
        read_end, write_end = os.pipe()
        passed = tuple(fd for fd in (pidfd, told) if fd is not None)
        try:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    "-c",
                    WATCHER,
                    str(-1 if pid is None else pid),
                    str(-1 if pidfd is None else pidfd),
                    tmp_dir or "",
                    str(-1 if told is None else told),
                ],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=passed,
                start_new_session=True,  # in no group a terminal signals: see above
            )
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        watch = cls(process, write_end, pid)
        _ARMED.add(watch)
        return watch

    def _close_told(self) -> None:
        """Close this process's copy of the pipe that tells the pid, once the server's start holds its
        own, or none will: the watcher reads its end, or no server, there."""
        if self.told is not None:
            with contextlib.suppress(OSError):
                os.close(self.told)
            self.told = None

    def disarm(self) -> None:
        """Disarm the watcher and reap it: before the server is signalled or reaped by its owner, since
        once reaped its pid may be another process's, which the watcher must never signal."""
        if self.fd is not None:
            # A watcher that ended (its server did, or a kill) has nothing to disarm.
            with contextlib.suppress(OSError):
                os.write(self.fd, b"x")
            os.close(self.fd)
            self.fd = None
        self._close_told()
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
        self._close_told()


# The watches armed in this process: a forked child closes its copies of their pipes (``forget``).
_ARMED: weakref.WeakSet[Watch] = weakref.WeakSet()


def _forget_in_child() -> None:
    """``os.register_at_fork``'s hook, run in each child of ``os.fork`` before it returns there."""
    for watch in list(_ARMED):
        watch.forget()
    _ARMED.clear()


os.register_at_fork(after_in_child=_forget_in_child)
