"""``serve`` on its embedded server in a child process, and that server found from the outside: what
the tests of a stop that waits on a stalled embedded server share (``test_exit_guard_embedded``,
``test_exit_signals``); the server itself is found by ``tests.service.procfs``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.service.bound_port import child_port
from tests.service.polling import until_status
from tests.service.procfs import embedded_server_of, end_server_if_left


def serve_embedded(tmp_path: Path, timeout_s: float, wait_s: float) -> tuple[subprocess.Popen[str], str]:
    """``serve`` on its embedded server (no ``REDIS_URL`` nor other ``ROLLOUT_*`` of this shell), at
    the command timeout ``timeout_s``, once ``/readyz`` answers (within ``wait_s``): the process, its
    stderr a pipe, and its base URL. A start that fails is killed and reaped here."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("ROLLOUT_")}
    env.update(ROLLOUT_REDIS_TIMEOUT_S=str(timeout_s), ROLLOUT_MODEL_DIR=str(tmp_path))
    command = [sys.executable, "-c", "from service.cli import main; main()", "serve", "--port", "0"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = child_port(proc, wait_s)  # the kernel's pick, which no one can take first (bound_port.py)
        until_status(f"http://127.0.0.1:{port}/readyz", 200, proc, wait_s)
    except BaseException:  # a start that failed its bound: the caller gets no process to end, so
        proc.kill()  # it is ended here (its embedded server's watcher ends that server with it)
        proc.communicate()
        raise
    return proc, f"http://127.0.0.1:{port}"


@contextmanager
def its_server_stalled(
    tmp_path: Path, timeout_s: float, wait_s: float
) -> Iterator[tuple[subprocess.Popen[str], int, Path]]:
    """``serve_embedded``, its server then stalled (SIGSTOPped: it takes no SIGTERM until it resumes):
    the process, the server's pid and its data dir. At the block's end a ``serve`` still running is
    killed and reaped, the server ended where it is still ours, its dir removed: what the test says of
    them, it says within the block."""
    proc, _ = serve_embedded(tmp_path, timeout_s, wait_s)
    server, data_dir = 0, None
    try:
        server, data_dir = embedded_server_of(proc.pid)
        os.kill(server, signal.SIGSTOP)
        yield proc, server, data_dir
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if server:
            end_server_if_left(server)
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)
