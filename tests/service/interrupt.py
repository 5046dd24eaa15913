"""Ctrl-C a real ``rollout-scheduler`` process once its worker processes exist, as a terminal would.

The command runs in a session of its own, so a SIGINT to its process group reaches it and its
workers (what a terminal's Ctrl-C does) and nothing of the test's own (its Redis server). It starts
with Python's SIGINT handler, as from a terminal, even when the tests run with SIGINT ignored (a
background job of a script, ``nohup``): it would inherit that and never hear the Ctrl-C.

It runs with ``faulthandler`` on, so that a crash says where it happened: round 60's CI saw one
``replay`` end by SIGSEGV (-11) after its "interrupted" line, with nothing more to go on, and 1,000+
runs on the loaded 2-core host did not crash again (replay61, docs/experiments.md). A crash then
prints every thread's Python stack on the command's stderr, which the tests' assertions show; one
that does not exit is made to (SIGABRT, the same stacks) rather than only timed out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0  # to import the command and spawn its workers on a loaded machine
EXIT_TIMEOUT_S = 30.0  # from the SIGINT to the command's exit, before it is stopped and its stacks shown
COMMAND = (
    "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from service.cli import main; main()"
)


@dataclass(frozen=True)
class Interrupted:
    """How an interrupted command ended."""

    code: int
    stderr: str
    exit_s: float  # from the SIGINT to the command's exit
    workers: tuple[int, ...]  # its worker processes' ids at the SIGINT


def interrupt(args: list[str], workers: int, settle_s: float, whole_group: bool = True) -> Interrupted:
    """Run ``rollout-scheduler ARGS``; once it has ``workers`` children, wait ``settle_s`` and send
    SIGINT to its process group (``whole_group``) or to it alone."""
    proc = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-c", COMMAND, *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        children = _await_children(proc, workers)
        time.sleep(settle_s)
        sent = time.monotonic()
        if whole_group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        err = _stderr_within(proc, EXIT_TIMEOUT_S)
        return Interrupted(proc.returncode, err, time.monotonic() - sent, children)
    except BaseException:
        _end(proc)
        raise


def _stderr_within(proc: subprocess.Popen[str], timeout_s: float) -> str:
    """The command's stderr once it has exited; one still running after ``timeout_s`` is aborted
    (SIGABRT: ``faulthandler`` prints every thread's stack) and the test fails showing them."""
    try:
        return proc.communicate(timeout=timeout_s)[1]
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGABRT)
        try:
            err = proc.communicate(timeout=10)[1]
        except subprocess.TimeoutExpired:
            err = _end(proc)
        raise AssertionError(f"still running {timeout_s:.0f} s after the SIGINT:\n{err}") from None


def _end(proc: subprocess.Popen[str]) -> str:
    """Kill whatever is left of the command's session and return its stderr. Its workers too: left
    running, they hold that stderr open and reading it to its end would hang the test."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.communicate()[1]


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _await_children(proc: subprocess.Popen[str], count: int) -> tuple[int, ...]:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the command ended before it was interrupted: {_end(proc)}")
        found = _workers(proc.pid)
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"the command never had {count} worker processes")


def _workers(pid: int) -> tuple[int, ...]:
    """Ids of ``pid``'s spawned multiprocessing workers (not its resource tracker), from /proc (Linux)."""
    out = []
    for proc_dir in Path("/proc").glob("[0-9]*"):
        try:
            parent = int((proc_dir / "stat").read_text().rpartition(")")[2].split()[1])
            command = (proc_dir / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if parent == pid and b"--multiprocessing-fork" in command:
            out.append(int(proc_dir.name))
    return tuple(out)


@contextlib.contextmanager
def handlers_kept(signals: Iterable[signal.Signals]) -> Iterator[None]:
    """This process's handlers of ``signals`` put back on the way out, whatever the code under test
    installed (a sidecar command arms its own): the tests that call it in-process run on."""
    before = {sig: signal.getsignal(sig) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
