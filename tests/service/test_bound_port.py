"""A server asked for port 0 is found on the port the kernel gave it: nothing to race for."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from service.settings import Settings
from tests.service.api_helpers import LiveServer
from tests.service.bound_port import child_port, listening_ports
from tests.service.listeners import diag_listeners, table_listeners

# a child that listens on a port the kernel picks, says which on stdout, and waits for its stdin to close
LISTENER = (
    "import socket, sys; s = socket.create_server(('127.0.0.1', 0)); "
    "print(s.getsockname()[1], flush=True); sys.stdin.read()"
)
pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the child's sockets from /proc")


def _listener(*code: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", "; ".join(code) or LISTENER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_child_on_port_0_is_found_on_the_port_it_bound() -> None:
    child = _listener()
    try:
        assert child.stdout is not None
        said = int(child.stdout.readline())
        assert child_port(child, 60) == said
        with socket.create_connection(("127.0.0.1", said), 5):
            pass
    finally:
        child.communicate("", timeout=30)


def test_a_connected_or_merely_bound_socket_is_no_listening_port() -> None:
    """Only the child's own listening sockets count: not a bound one (``serve``'s check that its port
    is free), nor a connection it made (its Redis client)."""
    code = (
        "import socket, sys",
        "b = socket.socket(); b.bind(('127.0.0.1', 0))",
        "srv = socket.create_server(('127.0.0.1', 0)); c = socket.create_connection(srv.getsockname())",
        "srv.close(); print(b.getsockname()[1], c.getsockname()[1], flush=True); sys.stdin.read()",
    )
    child = _listener(*code)
    try:
        assert child.stdout is not None
        child.stdout.readline()
        assert listening_ports(child.pid) == set()
    finally:
        child.communicate("", timeout=30)


def test_the_kernels_sock_diag_and_its_proc_tables_name_the_same_listeners() -> None:
    """What ``child_port`` asks the kernel (sock_diag: listening sockets only) and the ``/proc``
    tables it read before (and reads where sock_diag is missing) agree, socket for socket: the IPv4
    and IPv6 listeners, and neither a merely bound socket nor either end of a connection."""
    with ExitStack() as held:
        four = held.enter_context(socket.create_server(("127.0.0.1", 0)))
        six = held.enter_context(socket.create_server(("::1", 0), family=socket.AF_INET6))
        bound = held.enter_context(socket.socket())
        bound.bind(("127.0.0.1", 0))
        client = held.enter_context(socket.create_connection(four.getsockname()[:2], 5))
        served = held.enter_context(four.accept()[0])
        ours = {os.fstat(s.fileno()).st_ino: s for s in (four, six, bound, client, served)}
        expected = {os.fstat(s.fileno()).st_ino: s.getsockname()[1] for s in (four, six)}
        by_diag = diag_listeners(socket.AF_INET) | diag_listeners(socket.AF_INET6)
        by_table = table_listeners(Path("/proc/self/net"))
        assert {i: p for i, p in by_diag.items() if i in ours} == expected
        assert {i: p for i, p in by_table.items() if i in ours} == expected


def test_a_child_that_exits_before_it_listens_fails_with_its_stderr() -> None:
    child = _listener("import sys; sys.exit('refused: no port for you')")
    with pytest.raises(AssertionError, match="refused: no port for you"):
        child_port(child, 60)


def test_a_child_that_sleeps_instead_of_listening_fails_within_its_own_time() -> None:
    """A blocked child waits in no run queue: all of its wait is its own, and a hang still fails."""
    child = _listener("import time; time.sleep(120)")
    try:
        with pytest.raises(AssertionError, match=r"did not listen within 1\.0 s of its own"):
            child_port(child, 1.0)
    finally:
        child.kill()
        child.communicate(timeout=30)


@contextmanager
def _burners(cpu: int, n: int) -> Iterator[None]:
    """``n`` busy loops on CPU ``cpu`` alone, for as long as the block runs."""
    code = f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"
    burners = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait(timeout=30)


@pytest.mark.slow
def test_the_time_a_child_waits_for_a_cpu_others_hold_is_not_counted_against_its_start() -> None:
    """A start on a loaded host is mostly waiting for a CPU (serve's: ~3 s of its own in 15-54 s at
    load ~17-18): a child that needs half a second of CPU before it listens, on one CPU with three
    busy loops, takes at least four times that (two seconds) in all, and is found within 1.5 s."""
    cpu = min(os.sched_getaffinity(0))
    spin = f"import os, time\nos.sched_setaffinity(0, {{{cpu}}})\nwhile time.process_time() < 0.5: pass\n"
    with _burners(cpu, 3):
        child = _listener(spin + LISTENER)
        try:
            assert child.stdout is not None
            assert child_port(child, 1.5) == int(child.stdout.readline())
        finally:
            child.communicate("", timeout=30)


def test_a_live_server_given_no_port_serves_on_the_one_it_bound(live_settings: Settings) -> None:
    with LiveServer(live_settings) as server:
        assert server.port > 0
        assert server.port in listening_ports(int(Path("/proc/self").resolve().name))
        assert httpx.get(f"{server.url}/healthz", timeout=30).status_code == 200
