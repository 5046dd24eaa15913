"""A replica the exit guard ends leaves no embedded server behind, and says it was ended by its status.

``serve`` without ``REDIS_URL`` stops its embedded server after uvicorn returns: the watcher disarmed,
SIGTERM, then up to ``STOP_S`` (5 s) for the server to end. A server that does not answer (SIGSTOPped
here: a stalled server) held that wait past the guard's bound (5 s from the app's stop at a 1 s
command timeout), and ``os._exit`` cut it with the watcher already disarmed: the server ran on, stopped
for good, re-parented to PID 1, its port and temporary dir kept, and the process exited 0 as an
ordinary stop does. The guard's last acts now end such a server and remove its dir, and a forced exit
has its own status (``FORCED_STATUS``). No duration is asserted.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from service.api.exit_guard import EXIT_LOG, FORCED_STATUS
from service.ports import free_port
from tests.service.polling import GONE_WITHIN_S, gone_within, removed_within, until_status

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the child's processes from /proc"),
]
SERVERS = ("valkey-server", "redis-server")
WAIT_S = 90.0  # a bound against never, for a loaded host: the guard's is 5 s past the app's stop


def _embedded_server(pid: int) -> tuple[int, Path]:
    """The pid of ``pid``'s valkey-server child and its data dir (the server runs in it: ``--dir``)."""
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        if _name(int(child)) in SERVERS:
            return int(child), Path(os.readlink(f"/proc/{child}/cwd"))
    raise AssertionError("no embedded server process")


def _name(pid: int) -> str:
    """The command name of process ``pid``; empty once it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _serve(tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    """``serve`` on its embedded server (no ``REDIS_URL`` nor other ``ROLLOUT_*`` of this shell),
    at a 1 s command timeout, once ``/readyz`` answers."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("ROLLOUT_")}
    env.update(ROLLOUT_REDIS_TIMEOUT_S="1", ROLLOUT_MODEL_DIR=str(tmp_path))
    port = free_port()
    command = [sys.executable, "-c", "from service.cli import main; main()", "serve", "--port", str(port)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    until_status(f"http://127.0.0.1:{port}/readyz", 200, proc, WAIT_S)
    return proc, f"http://127.0.0.1:{port}"


def test_a_stalled_embedded_server_is_ended_with_its_dir_when_the_guard_ends_the_exit(tmp_path: Path) -> None:
    proc, _ = _serve(tmp_path)
    server, data_dir = _embedded_server(proc.pid)
    try:
        os.kill(server, signal.SIGSTOP)  # the server stalls: it takes no SIGTERM until it resumes
        proc.send_signal(signal.SIGTERM)
        _, logged = proc.communicate(timeout=WAIT_S)
        guarded = [line for line in logged.splitlines() if EXIT_LOG in line]
        assert (proc.returncode, len(guarded)) == (FORCED_STATUS, 1), logged
        assert gone_within(server, GONE_WITHIN_S), "the embedded server outlived serve"
        assert removed_within(data_dir, GONE_WITHIN_S), f"{data_dir} outlived serve"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if _name(server) in SERVERS:  # ours, left running: end it
            os.kill(server, signal.SIGKILL)
        shutil.rmtree(data_dir, ignore_errors=True)
