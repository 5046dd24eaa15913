"""``serve`` on its embedded server, stopped by a signal to its whole process group while a step is
planned: a terminal's Ctrl-C under ``make run``, a ``kill -TERM -PGID``.

The embedded server ran in ``serve``'s group and took the same signal: it ended at once, while the
graceful stop still wrote to it. The step being planned was answered 503 (``Redis is unreachable``)
after its plan had run, its in-flight mark and planning entry left to lapse, and the reaper and the
model's follower each logged ``Connection refused``. The server now runs in a session of its own
(``service/embedded_spawn.py``): the step is published and answered 200 after the signal, the
log names no refused connection, and ``serve`` ends its server last, its data dir with it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from service.settings import Settings
from tests.service.api.slow_plan import STARTED
from tests.service.api.stopped_child import ROOT, began
from tests.service.api_helpers import batch_body
from tests.service.bound_port import child_port
from tests.service.polling import GONE_WITHIN_S, gone_within, removed_within, until_status
from tests.service.procfs import SERVERS, command_name, embedded_server_of

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads serve's processes from /proc"),
]
SLOW_SERVE = "tests.service.api.slow_plan"  # ``serve`` whose lpt plan spends its budget in checked parts
WAIT_S = 120.0  # a bound against never, for a loaded host
# The plan's budget: it runs past the signal, and ends well within the default graceful wait (10 s,
# ROLLOUT_GRACEFUL_SHUTDOWN_S unset here), so that the step is published during the stop, not cut by
# it: the test of what the default's wait gives a request in flight.
BUDGET_MS = Settings.model_fields["graceful_shutdown_s"].default * 1000 // 4
REFUSED = "Connection refused"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["Ctrl-C", "kill -TERM -PGID"])
def test_a_stop_of_serves_whole_group_keeps_its_embedded_server_answering_to_the_end(
    signum: int, tmp_path: Path
) -> None:
    """``serve`` runs in a process group of its own, as a terminal's job; a step whose plan runs
    ``BUDGET_MS`` is posted, and once the plan runs, ``signum`` goes to the whole group."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("ROLLOUT_")}
    env.update(ROLLOUT_MODEL_DIR=str(tmp_path), PYTHONPATH=str(ROOT), **{STARTED: str(tmp_path / "began")})
    command = [sys.executable, "-m", SLOW_SERVE, "serve", "--port", "0"]
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own, as a terminal's job: this test is not in it
    )
    server, data_dir = 0, Path()
    try:
        url = f"http://127.0.0.1:{child_port(proc, WAIT_S)}"  # the kernel's pick (bound_port.py)
        until_status(f"{url}/readyz", 200, proc, WAIT_S)
        server, data_dir = embedded_server_of(proc.pid)
        answers: list[tuple[float, int | str]] = []

        def post() -> None:
            body = batch_body(schedule_id="live", step=5, time_budget_ms=BUDGET_MS, policy="lpt")
            try:
                answer = httpx.post(f"{url}/schedule", json=body, timeout=WAIT_S).status_code
                answers.append((time.monotonic(), answer))
            except httpx.HTTPError as error:
                answers.append((time.monotonic(), repr(error)))

        poster = threading.Thread(target=post, daemon=True)
        poster.start()
        began(tmp_path / "began", proc, WAIT_S)
        signalled = time.monotonic()
        os.killpg(proc.pid, signum)
        _, logged = proc.communicate(timeout=WAIT_S)
        poster.join(WAIT_S)
        assert proc.returncode == 0, logged
        assert REFUSED not in logged, logged
        [(answered, answer)] = answers
        assert answer == 200, logged  # planned and published during the stop
        assert answered > signalled
        assert gone_within(server, GONE_WITHIN_S), "the embedded server outlived serve"
        assert removed_within(data_dir, GONE_WITHIN_S), f"{data_dir} outlived serve"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if server and command_name(server) in SERVERS:  # ours, left running: end it
            os.kill(server, signal.SIGKILL)
        if data_dir != Path():
            shutil.rmtree(data_dir, ignore_errors=True)
