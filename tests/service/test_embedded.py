"""The embedded valkey-server: it binds a port of its own, answers only as itself, and ends with its owner."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from service import embedded
from service.embedded import EmbeddedServer, PortTakenError
from service.ports import free_port
from tests.service.polling import GONE_WITHIN_S, gone_within, removed_within, running
from tests.service.procfs import children, has_pidfds, server_pid


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


def _kill_if_still_there(url: str, pid: int) -> None:
    """SIGKILL a server this test started and that outlived its owner, only while ``url`` still
    answers as ``pid``, so that no other process is signalled (the pid may be reused once it is gone)."""
    try:
        if not running(pid):
            return
        os.kill(pid, signal.SIGCONT)  # a paused one answers nothing
        if server_pid(url) == pid:
            os.kill(pid, signal.SIGKILL)
    except (redis.RedisError, ProcessLookupError):
        pass


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
            _kill_if_still_there(url, pid)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def test_a_stopped_server_leaves_no_process_of_its_own_behind() -> None:
    before = children()
    server = EmbeddedServer().start()
    pid = server_pid(server.url)
    assert pid in children() - before
    server.stop()
    assert children() == before  # the server and whatever watches it, both ended and reaped
    assert not running(pid)
