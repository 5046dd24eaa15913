"""``serve``'s embedded server is stopped after the exit's waits for late work, not as its command
returns: that work writes to it.

Threads started after the app stopped (a give-up's take-back, a step's bookkeeping after its publish:
``plan_thread``, ``mark_hop``, ``post_publish``) are waited for at the process's exit, and a planning
thread still running is joined by the interpreter before that; the server was stopped before both,
and each write met ``Connection refused``, a user's step published late left without its bookkeeping
on the dev default (review52a). The owner here is ``serve``'s: ``redis_for`` handing the stop to
``exit_guard.after_the_waits``; its late work, a step's bookkeeping started after the block's end.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.service.polling import GONE_WITHIN_S, gone_within, removed_within
from tests.service.procfs import SERVERS, command_name

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the server's process from /proc")
WAIT_S = 60.0  # a bound against never, for a loaded host
LATE_S = 0.5  # how long after the block's end the late work writes

# argv[1]: the model dir. Prints the server's pid and data dir, then what the late work read back.
OWNER = f"""
import sys, time
import redis
from service.api import exit_guard
from service.pipeline.post_publish import AFTER_PUBLISH
from service.redis_conn import redis_for
from service.settings import Settings
with redis_for(Settings(model_dir=sys.argv[1]), stop_at=exit_guard.after_the_waits) as ready:
    client = redis.Redis.from_url(ready.redis_url, socket_timeout={WAIT_S})
    print(client.info("server")["process_id"], client.config_get("dir")["dir"], flush=True)
def late():
    time.sleep({LATE_S})
    client.set("late", "written")
    print(client.get("late").decode(), flush=True)
AFTER_PUBLISH.start(late, name="late-bookkeeping", bound_s={WAIT_S})
"""


def test_work_started_after_the_block_ends_writes_to_the_server_which_the_exit_then_stops(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("ROLLOUT_")}
    owner = subprocess.run(
        [sys.executable, "-c", OWNER, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    started = owner.stdout.split()
    assert len(started) >= 2, owner.stderr[-2000:]
    pid, data_dir = int(started[0]), Path(started[1])
    try:
        assert (owner.returncode, started[2:]) == (0, ["written"]), owner.stderr[-2000:]
        assert gone_within(pid, GONE_WITHIN_S), f"valkey-server {pid} outlived its owner"
        assert removed_within(data_dir, GONE_WITHIN_S), f"{data_dir} outlived its server"
    finally:
        if command_name(pid) in SERVERS:  # ours, left running: end it
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(data_dir, ignore_errors=True)
