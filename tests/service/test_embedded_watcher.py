"""The embedded server's watcher: a stop disarms it (it reads the owner's byte and exits of itself); a
server that ends of itself ends its watcher too; the owner's death, its pipe closed unwritten, has it
stop the server; and one server's stop leaves another's watcher armed. Left armed (no byte written,
the pipe left open), a watcher would be SIGKILLed at the end of ``WATCHER_EXIT_S`` instead, each stop
that much longer; left watching a server that ended and was reaped, it could signal a reused pid."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from service import embedded_watch
from service.embedded import EmbeddedServer, PortTakenError
from service.embedded_watch import Watch
from tests.service.polling import GONE_WITHIN_S, gone_within, waitable_within
from tests.service.procfs import children, has_pidfds, server_pid, unreaped


@pytest.fixture(params=["pidfd", "pid"])
def pidfds(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Watchers with a pidfd of their server, or without, as where the kernel has none."""
    if request.param == "pid":
        monkeypatch.setattr(embedded_watch, "_pidfd", lambda pid: None)
    return str(request.param)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A child process for a watcher to watch."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@pytest.mark.parametrize("end", ["stop", "kill"])
def test_a_stop_or_a_kill_disarms_the_watcher_which_exits_of_itself(end: str, pidfds: str) -> None:
    server = EmbeddedServer().start()
    watch = server._held.watch
    assert watch is not None
    getattr(server, end)()
    assert watch.process.returncode == 0  # exited on the byte, not SIGKILLed (-9) after WATCHER_EXIT_S
    server.stop()


def test_an_owner_gone_without_a_stop_has_the_watcher_stop_its_process(
    sleeper: subprocess.Popen[bytes], pidfds: str
) -> None:
    """The owner's death closes the pipe unwritten: the watcher reads end-of-file and sends SIGTERM."""
    watch = Watch.start(sleeper.pid)
    assert watch.fd is not None
    os.close(watch.fd)  # what the kernel does when the owner dies
    watch.fd = None
    assert sleeper.wait(timeout=GONE_WITHIN_S) == -signal.SIGTERM
    assert watch.process.wait(timeout=GONE_WITHIN_S) == 0


@pytest.mark.skipif(not has_pidfds(), reason="a watcher without a pidfd learns nothing of its server")
def test_a_server_that_ends_of_itself_ends_its_watcher_too() -> None:
    """A crash while the owner lives: the watcher learns of it by its pidfd and stops watching that
    pid, which the owner may reap and the system give to another process."""
    before = children()
    server = EmbeddedServer().start()
    try:
        pid = server_pid(server.url)
        (watcher,) = children() - before - {pid}
        os.kill(pid, signal.SIGKILL)  # a crash: unreaped, its pid is still its own
        assert gone_within(watcher, GONE_WITHIN_S), "the watcher still watches a server that ended"
    finally:
        server.stop()


def test_stopping_one_of_two_servers_leaves_the_others_watcher_armed() -> None:
    first, second = EmbeddedServer().start(), EmbeddedServer().start()
    try:
        first.stop()
        watch, proc = second._held.watch, second._held.proc
        assert watch is not None
        assert watch.fd is not None
        assert proc is not None
        assert watch.process.poll() is None
        os.close(watch.fd)  # the owner's death, as the second server's watcher sees it
        watch.fd = None
        proc.wait(timeout=GONE_WITHIN_S)  # stopped by its watcher
        assert watch.process.wait(timeout=GONE_WITHIN_S) == 0
    finally:
        first.stop()
        second.stop()


def test_a_disarmed_watcher_signals_nothing(sleeper: subprocess.Popen[bytes], pidfds: str) -> None:
    """The byte a stop writes is what disarms the watcher: without it the watcher read end-of-file as
    the pipe closed and sent its SIGTERM to a pid its owner may already have reaped (another
    process's by then). A process watched and then disarmed outlives the disarming."""
    watch = Watch.start(sleeper.pid)
    watch.disarm()  # what a stop or a kill does before it signals the server
    assert watch.process.returncode == 0
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper.wait(timeout=0.5)  # signalled, it would be gone in milliseconds


def test_a_restart_after_the_server_died_disarms_the_dead_servers_watcher(pidfds: str) -> None:
    """Left armed, the old watcher would wait as long as its owner lives (without a pidfd it learns
    nothing of its server), then signal a pid reaped long before (another process's by then)."""
    server = EmbeddedServer().start()
    try:
        old, proc = server._held.watch, server._held.proc
        assert old is not None
        assert proc is not None
        server.signal(signal.SIGKILL)  # died without a stop (the OOM killer)
        assert waitable_within(proc.pid, GONE_WITHIN_S)  # a zombie, left for the restart to reap
        server.start()
        assert old.process.returncode == 0  # disarmed (or ended with its server) and reaped by the restart
        assert server._held.watch is not old
    finally:
        server.stop()


@pytest.fixture
def disarms(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """Each watcher's disarm, as its server's pid and whether that pid was still unreaped then."""
    seen: list[tuple[int, bool]] = []
    disarm = Watch.disarm

    def recorded(watch: Watch) -> None:
        assert watch.pid is not None  # each disarm here follows its server's start
        seen.append((watch.pid, unreaped(watch.pid)))
        disarm(watch)

    monkeypatch.setattr(Watch, "disarm", recorded)
    return seen


def _crashed(server: EmbeddedServer) -> int:
    """SIGKILL ``server``'s process behind its owner's back (a crash): its pid, once it has ended."""
    pid = server_pid(server.url)
    os.kill(pid, signal.SIGKILL)
    assert waitable_within(pid, GONE_WITHIN_S)  # ended: a zombie until its owner reaps it
    return pid


def _restarted_after_a_crash(server: EmbeddedServer) -> None:
    _crashed(server)
    server.start()


def _signalled_after_a_crash(server: EmbeddedServer) -> None:
    _crashed(server)
    server.signal(signal.SIGCONT)  # what an outage test sends a paused server that died meanwhile
    server.stop()


def _started_on_a_taken_port(server: EmbeddedServer) -> None:
    with pytest.raises(PortTakenError):  # its server exits at start, seen by ``_wait_ready``
        EmbeddedServer(port=server.port).start()


@pytest.mark.parametrize(
    "ending", [_restarted_after_a_crash, _signalled_after_a_crash, _started_on_a_taken_port]
)
def test_a_server_that_ended_is_reaped_only_after_its_watcher_is_disarmed(
    ending: Callable[[EmbeddedServer], None], disarms: list[tuple[int, bool]], pidfds: str
) -> None:
    """Without a pidfd the watcher signals the server's pid when the owner dies, so that pid must stay
    the server's (unreaped) while the watcher is armed. ``Popen.poll`` (in ``start``, in the wait for
    the server to answer, and in ``send_signal`` under ``signal``) reaped an ended server first: an
    owner killed then had its watcher SIGTERM whatever process the pid had gone to, and after a
    ``signal`` that lasted until the next stop. (With a pidfd the watcher cannot reach another
    process, but the order is the same code's.)"""
    server = EmbeddedServer().start()
    try:
        ending(server)
    finally:
        server.stop()
    assert disarms, "no watcher was disarmed"
    assert all(still for _, still in disarms), f"reaped before its watcher's disarm: {disarms}"


# An owner in a group of its own: it starts a process to watch (in no group of its, so the signal
# below spares it), says its pid, starts the watcher and at once signals its whole group with SIGHUP
# (a closed terminal), before the watcher's Python can have reached its first line; it dies of it.
GROUP_HUNG_UP = """
import os, signal, subprocess
from service.embedded_watch import Watch
quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}  # not holding our pipes open
watched = subprocess.Popen(["sleep", "600"], start_new_session=True, **quiet)
print(watched.pid, flush=True)
Watch.start(watched.pid)
os.killpg(0, signal.SIGHUP)
"""


def test_a_signal_to_the_owners_group_as_the_watcher_starts_leaves_it_to_stop_its_process() -> None:
    """A closed terminal or Ctrl-C signals the owner's whole process group. A watcher in that group
    and still starting died of it (it ignores both only from its first lines on), leaving the
    process it was to stop running once the owner died of the same signal."""
    owner = subprocess.run(
        [sys.executable, "-c", GROUP_HUNG_UP],
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )
    assert owner.returncode == -signal.SIGHUP, owner.stderr[-2000:]
    watched = int(owner.stdout.split()[0])
    try:
        assert gone_within(watched, GONE_WITHIN_S), "the watched process outlived its owner's SIGHUP"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(watched, signal.SIGKILL)
