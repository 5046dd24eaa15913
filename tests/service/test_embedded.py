"""The embedded valkey-server: it binds a port of its own, answers only as itself, and ends with its owner."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from service import embedded
from service.embedded import EmbeddedServer, PortTakenError
from service.ports import free_port
from tests.service.polling import GONE_WITHIN_S, gone_within, removed_within, running
from tests.service.procfs import children, has_pidfds, kill_if_still_there, server_pid


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port another process (this test) is listening on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_picked_port_taken_before_the_bind_is_picked_again(
    held_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    picks = iter([held_port, free_port()])
    monkeypatch.setattr(embedded, "free_port", lambda: next(picks))
    with EmbeddedServer() as server:
        assert server.port != held_port
        assert redis.Redis.from_url(server.url).ping()


def test_a_port_given_and_taken_is_refused_by_name(held_port: int) -> None:
    with pytest.raises(PortTakenError, match=r"(?i)address already in use"):
        EmbeddedServer(port=held_port).start()


def test_another_valkey_on_the_port_is_not_mistaken_for_ours() -> None:
    with EmbeddedServer() as first:
        second = EmbeddedServer(port=first.port)
        with pytest.raises(PortTakenError):
            second.start()  # the first answers PING on that port, but it is not this one's process
        second.stop()


def test_a_server_that_never_answers_is_not_left_running_after_the_failed_start() -> None:
    """With a password the readiness PING is refused: start fails, and must not leak the process."""
    server = EmbeddedServer(extra_args=("--requirepass", "s3cret"))
    with pytest.raises(embedded.EmbeddedServerError, match="did not answer"):
        server.start(timeout_s=1.0)
    with pytest.raises(ConnectionRefusedError):  # nobody listens there any more: not orphaned
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
    server.stop()


# A process that starts a server, says its URL and data dir and waits: a ``serve``, a pytest worker, a bench
OWNER = """
import time
from service.embedded import EmbeddedServer
server = EmbeddedServer().start()
print(server.url, server.data_dir, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("paused", [False, True], ids=["running", "paused by SIGSTOP"])
def test_a_server_whose_owner_is_sigkilled_stops_of_itself(paused: bool) -> None:
    """SIGKILL (the OOM killer, ``kill -9``, a killed pytest worker) runs no cleanup in the owner: its
    server went on running, re-parented to PID 1, holding its port and memory for good. One paused
    (an outage test's SIGSTOP) when its owner dies stops too; and where the watcher has a pidfd to see
    the server end, it removes the temporary data dir the owner no longer can."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        assert owner.stderr is not None
        said = owner.stdout.readline().split()
        assert said, f"the owner did not start a server: {owner.stderr.read()[-2000:]}"
        url, data_dir = said
        pid = server_pid(url)
        if paused:
            os.kill(pid, signal.SIGSTOP)
        owner.kill()
        owner.wait()
        try:
            assert gone_within(pid, GONE_WITHIN_S), f"valkey-server {pid} outlived its SIGKILLed owner"
            if has_pidfds():
                assert removed_within(Path(data_dir), GONE_WITHIN_S), f"{data_dir} outlived its server"
        finally:
            kill_if_still_there(url, pid)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


# An owner that dies of Ctrl-C outright, running no cleanup (as a CLI that restores SIGINT's default
# does), though the tests may run with SIGINT ignored (inherited); it dies of SIGHUP so already
GROUP_OWNER = "import signal; signal.signal(signal.SIGINT, signal.SIG_DFL)\n" + OWNER


@pytest.mark.parametrize(
    ("signum", "paused"),
    [(signal.SIGHUP, False), (signal.SIGINT, True)],
    ids=["SIGHUP: a closed terminal", "SIGINT: Ctrl-C, the server paused"],
)
def test_a_server_whose_owners_process_group_is_signalled_stops_with_its_owner(
    signum: int, paused: bool
) -> None:
    """A closed terminal or Ctrl-C signals the owner's whole process group: the owner dies of it,
    unstopped (no finalizer runs), and the server (in a session of its own, which the signal does not
    reach; a paused one takes no signal until it is continued) is left to the watcher, which must not
    die of the same signal."""
    owner = subprocess.Popen(
        [sys.executable, "-c", GROUP_OWNER],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own, as a terminal's job: this test is not in it
    )
    try:
        assert owner.stdout is not None
        assert owner.stderr is not None
        url = owner.stdout.readline().strip()
        assert url, f"the owner did not start a server: {owner.stderr.read()[-2000:]}"
        pid = server_pid(url)
        _until_watcher_ignores(owner.pid, pid, signum)
        if paused:
            os.kill(pid, signal.SIGSTOP)
        os.killpg(owner.pid, signum)
        owner.wait(timeout=30)
        try:
            assert gone_within(pid, GONE_WITHIN_S), f"valkey-server {pid} outlived its owner's {signum!r}"
        finally:
            kill_if_still_there(url, pid)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def _until_watcher_ignores(owner: int, server: int, signum: int, within_s: float = 10.0) -> None:
    """Wait until the watcher of ``owner``'s ``server`` ignores ``signum`` (its ``/proc`` status says
    so), up to ``within_s``: a signal that comes while its Python still starts ends it, whatever its
    first lines say (on a loaded host the server can answer before them). Past ``within_s`` the
    signal is sent anyway."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        listed = subprocess.run(["pgrep", "-P", str(owner)], capture_output=True, text=True).stdout
        for pid in {int(pid) for pid in listed.split()} - {server}:
            with contextlib.suppress(OSError):
                status = Path(f"/proc/{pid}/status").read_text().splitlines()
                ignored = int(next(line for line in status if line.startswith("SigIgn:")).split()[1], 16)
                if ignored >> (signum - 1) & 1:
                    return
        time.sleep(0.02)


def test_a_stopped_server_leaves_no_process_of_its_own_behind() -> None:
    before = children()
    server = EmbeddedServer().start()
    pid = server_pid(server.url)
    assert pid in children() - before
    server.stop()
    assert children() == before  # the server and whatever watches it, both ended and reaped
    assert not running(pid)
