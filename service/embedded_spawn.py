"""The embedded server's start (``spawn``): in a session of its own, and held by its owner whatever a
stop's handler raises while it starts.

Apart from ``service/embedded.py``, which runs the server, because this is one concern of its own: a
process started out of every group signal's reach has no end but its owner's, so no point of the
start may lose it (review52a found two that did).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Protocol

# What the exit status of a start that never became the server says (``Watch.telling``'s shell, by
# POSIX's rule for a command it cannot run): the binary is not there, or is there and the kernel would
# not run it (no execute permission, a noexec mount, another architecture's binary).
NOT_RUN = {127: "its binary not found", 126: "its binary found but not executable"}


def not_a_program(path: str) -> str | None:
    """Why ``path``, the server's binary, is a file the kernel would refuse to run but the start's
    shell would run as a script, or None: a text file without ``#!``, or an empty one.

    The start ``exec``s the server from a shell (``embedded_watch.TELL``), and a POSIX shell whose
    ``exec`` meets the kernel's ENOEXEC runs the file as a script of its own: a text file pointed
    at as the binary ran its lines as commands, and its first unknown word's 127 was said as
    ``its binary not found`` (trace55). ``Popen`` of the binary had raised ``Exec format error``.
    A program (ELF, or any format with a NUL in its first bytes) and a script with ``#!`` (a
    wrapper) are run as before; a file not executable or that cannot be read, or a bare name (looked
    up on PATH by the shell), is left to the shell's own words (``NOT_RUN``)."""
    if os.sep not in path or not os.access(path, os.X_OK):  # not executable: the shell's 126 says it
        return None
    try:
        with open(path, "rb") as handle:
            head = handle.read(512)
    except OSError:
        return None
    if not head:
        return "is an empty file"
    if head.startswith(b"#!") or b"\0" in head:
        return None
    return "is a text file without '#!'"


class Holder(Protocol):
    """What a started server is handed to (``embedded._Held``): its owner's stop ends ``proc``."""

    proc: subprocess.Popen[bytes] | None


def spawn(
    args: list[str], held: Holder, stdout: int = subprocess.DEVNULL, stderr: int = subprocess.DEVNULL
) -> None:
    """Start the server as ``held.proc``, in a session of its own, as its watcher is: Ctrl-C and a
    ``kill`` of the owner's process group (``make run``'s) reached the server too, which ended at once,
    while the owner's graceful stop still wrote to it (a step's publish, a mark's take-back: each met
    ``Connection refused``). Out of the group, the owner ends it last (``stop``), its watcher if the
    owner dies unstopped.

    Started on a thread of its own: a stop's handler (``serve``'s ``exit_cleanly``) raises in the main
    thread only, and raised inside ``Popen`` after the fork it lost the new process, which no group
    signal ends any more. The thread itself hands the process to ``held`` (``_Handoff``), so that no
    point of the main thread's, where a handler may raise, stands between the process and its owner:
    the main thread waits for the thread however often a signal's exception interrupts its wait, then
    raises the first such exception, and the caller ends the server ``held`` has. Where the exception
    left before that wait (in ``Thread.start``, which waits for the thread to run), the thread ends its
    server itself. It waits on an event, not ``Thread.join``: Python 3.11's join, interrupted so, marks
    a thread that still runs as ended (bpo-45274's cleanup), and the server was lost again.

    ``stdout``: the server's start's stdout (its watcher's pipe for its pid, which the caller started
    first: ``embedded_watch.Watch.before``); the server's own is /dev/null. ``stderr``: the start's and
    the server's (the server's log: what a start that never became the server said, why a server
    ended before its log was open)."""
    handoff = _Handoff(held)
    interrupted: BaseException | None = None
    try:
        threading.Thread(target=handoff.start, args=(args, stdout, stderr), name="embedded-spawn").start()
        while not handoff.done.is_set():
            try:
                handoff.done.wait()
            except BaseException as error:  # a stop's handler raised here: the spawn goes on regardless
                interrupted = interrupted or error
    finally:
        handoff.abandon()  # a no-op once the thread is done: it handed the server over, or failed
    if interrupted is not None:
        raise interrupted
    if handoff.failed:
        raise handoff.failed[0]


class _Handoff:
    """One ``spawn``: the thread's side (``start``), and the owner's word that it waits no more
    (``abandon``). A lock makes the two exclusive: a server ``Popen`` returns is ``held``'s, ended by
    its owner's stop, or, started after the owner left, ended by the thread, never neither."""

    def __init__(self, held: Holder) -> None:
        """``held``: what the server started is handed to."""
        self.held = held
        self.done = threading.Event()  # the thread handed the server over, ended it, or failed
        self.failed: list[BaseException] = []  # ``Popen``'s exception, raised by the main thread
        self._lock = threading.Lock()
        self._abandoned = False

    def start(self, args: list[str], stdout: int, stderr: int) -> None:
        """The thread: start the server and hand it to ``held``, or end it where the owner has left."""
        try:
            proc = subprocess.Popen(
                args,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )
        except BaseException as error:  # handed to the main thread: raised there
            self.failed.append(error)
            self.done.set()
            return
        with self._lock:
            kept = not self._abandoned
            if kept:
                self.held.proc = proc
        self.done.set()
        if not kept:  # no group signal reaches it, and its owner, alive, holds its watcher armed
            proc.kill()
            proc.wait()

    def abandon(self) -> None:
        """The owner waits no more: a server ``start`` has not handed over yet is the thread's to end."""
        with self._lock:
            self._abandoned = True


def how_it_ended(pid: int) -> str:
    """How our ended child ``pid``, a server's start, ended, for the error that says it ended at start:
    ``status 127: its binary not found`` (``NOT_RUN``), ``status 1``, ``SIGKILL``; "" where it is not
    known yet (its last thread still ending) or any more (reaped elsewhere). Asked without reaping it
    (``WNOWAIT``): its owner reaps it only once its watcher is disarmed (``embedded._Held.ended``).
    Its shell's stderr says the same in words (``sh: 1: exec: ...: not found``), where it has one.

    Why. The start is a shell that ``exec``s the server (``embedded_watch.TELL``, review53d): a binary
    that cannot be run ends the shell, 127 or 126, where ``Popen`` of the binary itself had raised an
    ``OSError`` naming it, and the start's error named no reason (``valkey-server exited at start: ``,
    nothing after it)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return ""
    if info is None:
        return ""
    if info.si_code != os.CLD_EXITED:  # killed by a signal, or dumped its core
        try:
            return signal.Signals(info.si_status).name
        except ValueError:  # a real-time signal: no name
            return f"signal {info.si_status}"
    meaning = NOT_RUN.get(info.si_status)
    return f"status {info.si_status}" + (f": {meaning}" if meaning else "")
