"""A stop signal that meets an exit no stop signal started (uvicorn's failed startup, status 3) does
not cut its cleanup: the embedded server is stopped and reaped, its dir removed, the status kept.

Why. ``serve``'s handler (``service.cli.exit_cleanly``) takes the first stop signal it hears as the
start of the exit (``SystemExit(0)``). An exit that began otherwise, uvicorn's ``SystemExit(3)`` at a
failed startup or a crash's exception (1), heard none, so a SIGTERM during its ``atexit`` cleanup
(the embedded server's stop, ``exit_guard.after_the_waits``) was taken as the first: ``SystemExit(0)``
raised inside the stop, ``Exception ignored in atexit callback`` printed, the server's stop cut before
its reap and the log line after it never said (review54). The exit now counts as begun whatever began
it (``service.cli.exit_begun``): the signal is logged and the cleanup goes on.

The child is the real ``serve`` on its real embedded server; its app's startup fails (or building
the app raises: a crash), and its server's stop stands still until the test has
signalled it (it says so first), so the signal lands in
the stop whatever the host's load.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import pytest

from service.api.exit_guard import FORCED_STATUS, SIGNALLED_LOG
from service.cli import SECOND_SIGNAL_LOG, UNSIGNALLED_EXIT_LOG
from tests.service.api.serve_child import FAILING_STARTUP, MAIN, serve_child
from tests.service.polling import GONE_WITHIN_S, gone_within, removed_within
from tests.service.procfs import embedded_server_of, end_server_if_left

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the child's processes from /proc"),
]
WAIT_S = 120.0  # a bound against never, for a loaded host
# serve whose startup fails (its last argument ``failed``) or whose app's building raises (``crash``),
# its embedded server's stop held (saying ``stopping``) until the test writes a line to its stdin
CHILD = (
    FAILING_STARTUP
    + """
from service import embedded

def held(stop):
    def stop_when_told(self):
        print("stopping", flush=True)
        sys.stdin.readline()  # the test's word, once it has signalled
        stop(self)
    return stop_when_told

def crashing(*args, **kwargs):
    raise RuntimeError("planted crash")

if sys.argv.pop() == "crash":
    service_app.create_app = crashing
embedded.EmbeddedServer.stop = held(embedded.EmbeddedServer.stop)
"""
    + MAIN
)


@contextmanager
def _stopping(how: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int, Path]]:
    """``CHILD`` ending ``how`` (``serve --port 0`` on the embedded server) once its server's stop is
    held: the child, that server's pid and its data dir. At the block's end the child is killed and
    reaped, and the server ended if it outlived it: what the test says of them, it says within."""
    child = serve_child(CHILD, ["serve", "--port", "0", how], tmp_path)
    server = 0
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "stopping\n", child.communicate(timeout=WAIT_S)[1][-2000:]
        server, data_dir = embedded_server_of(child.pid)
        yield child, server, data_dir
    finally:
        child.kill()
        child.wait()
        if server:
            end_server_if_left(server)


@pytest.mark.parametrize(
    ("how", "sig", "status"),
    [("failed", signal.SIGTERM, 3), ("failed", signal.SIGINT, 3), ("crash", signal.SIGTERM, 1)],
    ids=["failed-startup-SIGTERM", "failed-startup-SIGINT", "crash-SIGTERM"],
)
def test_a_stop_signal_during_an_unsignalled_exits_cleanup_leaves_the_server_stopped_and_the_status(
    how: str, sig: signal.Signals, status: int, tmp_path: Path
) -> None:
    with _stopping(how, tmp_path) as (child, server, data_dir):
        child.send_signal(sig)
        _, err = child.communicate("go\n", timeout=WAIT_S)
        assert child.returncode == status, err[-2000:]
        assert "Exception ignored" not in err, err[-2000:]
        assert err.count("Traceback") == (how == "crash"), err[-2000:]  # the crash's own, printed once
        assert [UNSIGNALLED_EXIT_LOG in line for line in err.splitlines()].count(True) == 1, err[-2000:]
        assert "embedded valkey-server stopped" in err, err[-2000:]
        assert gone_within(server, GONE_WITHIN_S), "the embedded server outlived serve"
        assert not data_dir.exists(), f"{data_dir} outlived serve"


def test_a_third_stop_signal_during_a_failed_starts_cleanup_forces_it_and_ends_the_server(
    tmp_path: Path,
) -> None:
    """The first signal logged, the second logged, the third forces the exit (70): the guard's last acts
    end the embedded server and remove its dir, its stop still held."""
    with _stopping("failed", tmp_path) as (child, server, data_dir):
        assert child.stderr is not None
        for line in (UNSIGNALLED_EXIT_LOG, SECOND_SIGNAL_LOG):  # each heard before the next is sent
            child.send_signal(signal.SIGTERM)
            assert _logged(child.stderr, line), line
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=WAIT_S)
        assert child.returncode == FORCED_STATUS, err[-2000:]
        assert SIGNALLED_LOG in err, err[-2000:]
        assert gone_within(server, GONE_WITHIN_S), "the embedded server outlived serve"
        assert removed_within(data_dir, GONE_WITHIN_S), f"{data_dir} outlived serve"


def _logged(stream: IO[str], line: str) -> bool:
    """Whether ``line`` comes on ``stream`` before it ends (read up to it)."""
    return any(line in got for got in iter(stream.readline, ""))
