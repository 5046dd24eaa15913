"""``serve`` on its embedded server in a child process, and that server found from the outside: what
the tests of a stop that waits on a stalled embedded server share (``test_exit_guard_embedded``,
``test_exit_signals``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from service.ports import free_port
from tests.service.polling import until_status

SERVERS = ("valkey-server", "redis-server")


def serve_embedded(tmp_path: Path, timeout_s: float, wait_s: float) -> tuple[subprocess.Popen[str], str]:
    """``serve`` on its embedded server (no ``REDIS_URL`` nor other ``ROLLOUT_*`` of this shell), at
    the command timeout ``timeout_s``, once ``/readyz`` answers (within ``wait_s``): the process, its
    stderr a pipe, and its base URL."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("ROLLOUT_")}
    env.update(ROLLOUT_REDIS_TIMEOUT_S=str(timeout_s), ROLLOUT_MODEL_DIR=str(tmp_path))
    port = free_port()
    command = [sys.executable, "-c", "from service.cli import main; main()", "serve", "--port", str(port)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    until_status(f"http://127.0.0.1:{port}/readyz", 200, proc, wait_s)
    return proc, f"http://127.0.0.1:{port}"


def embedded_server(pid: int) -> tuple[int, Path]:
    """The pid of ``pid``'s valkey-server child and its data dir (the server runs in it: ``--dir``)."""
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        if process_name(int(child)) in SERVERS:
            return int(child), Path(os.readlink(f"/proc/{child}/cwd"))
    raise AssertionError("no embedded server process")


def process_name(pid: int) -> str:
    """The command name of process ``pid``; empty once it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
