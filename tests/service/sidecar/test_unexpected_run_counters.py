"""A sidecar run that raised what nothing expects (a bug) prints the counters line too, with what it
had counted and, as ``error``, the last line of the traceback that still follows on stderr (the
``uncaught ...`` CRITICAL log line, ``service/logs.py``), exit 1;
and only a bind's ``OSError`` is a port taken (exit 2, ``cannot listen``).

Round 47 gave the exits the command decides (a loop's death, a refusal, a port taken) the counters
line; an uncaught exception still printed its traceback alone, so a fleet's logs grepped for counters
lines missed the sidecar that died so, and what it had accepted or handed back was told nowhere. And
any ``OSError`` out of a run was told as a port taken (``cannot listen: [Errno 24] Too many open
files``, exit 2: the status of a misconfiguration no restart fixes), where only the two binds
(``launch._binding``) mean that (helper review47c).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from service.delivery.protocol import Delivery
from service.ports import free_port
from service.sidecar import launch
from service.sidecar.launch import CannotListenError
from tests.service.sidecar.command_run import ARGS, balanced, caller_app, counted_then_raising
from tests.service.sidecar.procs import PROCESS_START_S, ROOT, Proc, cluster, item, publish, wait_until

BUGS: dict[str, tuple[Exception, str]] = {  # what the run raised, and the traceback's last line
    "a bug": (ZeroDivisionError("division by zero"), "ZeroDivisionError: division by zero"),
    "an OSError no bind raised": (
        OSError(24, "Too many open files"),
        "OSError: [Errno 24] Too many open files",
    ),
    "a library's error": (
        redis.exceptions.DataError("Invalid input"),
        "redis.exceptions.DataError: Invalid input",
    ),
}


@pytest.mark.parametrize("mode", ["push", "pull"])
@pytest.mark.parametrize("name", BUGS)
def test_a_run_that_raised_a_bug_prints_its_counters_and_the_traceback_s_last_line_then_exits_1(
    name: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    error, last_line = BUGS[name]
    monkeypatch.setattr(launch, f"run_{mode}", counted_then_raising(error))
    args = [*ARGS[:-2], "--pull-api", str(free_port())] if mode == "pull" else ARGS
    result = CliRunner().invoke(caller_app(), args)
    assert result.exit_code == 1
    assert result.exception is error  # not caught: the console script prints its traceback
    assert "cannot listen" not in result.stderr
    (line,) = result.stdout.splitlines()
    counters = json.loads(line)
    assert counters == {**counters, "worker_id": "w", "claimed": 3, "accepted": 2, "released": 1}
    assert list(counters)[-1] == "error"
    assert counters["error"] == last_line


@pytest.mark.parametrize("mode", ["push", "pull"])
def test_a_port_taken_at_the_bind_is_still_exit_2_cannot_listen(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launch, f"run_{mode}", counted_then_raising(CannotListenError(98, "in use")))
    args = [*ARGS[:-2], "--pull-api", str(free_port())] if mode == "pull" else ARGS
    result = CliRunner().invoke(caller_app(), args)
    assert result.exit_code == 2
    assert result.stderr.strip() == "sidecar: cannot listen: [Errno 98] in use"


# ``rollout-scheduler sidecar`` whose shutdown has a bug: the settle of the kept reports raises, outside
# every supervised loop, once SIGTERM stopped a run that had accepted its items
BUGGY_EXIT_CHILD = """
from service.sidecar.resends import Resends

async def settle(self, within_s):
    raise ZeroDivisionError("a bug in the shutdown")

Resends.settle = settle
from service.cli import main
main()
"""


def test_a_push_sidecar_whose_shutdown_raised_a_bug_prints_what_it_had_counted(
    redis_client: redis.Redis, redis_url: str, engine_url: str, tmp_path: Path
) -> None:
    """A real console-script process, on real Redis and engine-sim: the items accepted, then SIGTERM,
    then the bug. Exit 1, the traceback on stderr, and the counters line, balanced, on stdout."""
    delivery = Delivery(redis_client)
    publish(delivery, "s", {"w0": [item(f"p{i}", 0, 10) for i in range(3)]}, lease_ttl_ms=60_000)
    argv = ["sidecar", "--worker-id", "w0", "--drain-timeout", "1", "--engine-url", engine_url]
    with cluster(tmp_path) as procs:
        log = procs.workdir / "sidecar-w0.log"
        popen = subprocess.Popen(
            [sys.executable, "-c", BUGGY_EXIT_CHILD, *argv, "--redis-url", redis_url],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        sidecar = Proc("sidecar-w0", popen, log)
        procs.procs.append(sidecar)
        wait_until(lambda: delivery.progress("s").done == 3, PROCESS_START_S, "the three items accepted")
        popen.send_signal(signal.SIGTERM)
        counters: dict[str, Any] = dict(sidecar.stats(timeout_s=60.0))
        status = popen.wait(timeout=30)
    stderr = log.read_text()
    assert status == 1, stderr[-2000:]
    crash = json.loads(stderr.splitlines()[-1])  # the uncaught exception's one log line (``logs``)
    assert crash["level"] == "CRITICAL"
    assert crash["message"] == "uncaught ZeroDivisionError: a bug in the shutdown"
    assert "Traceback (most recent call last)" in stderr
    assert (counters["worker_id"], counters["accepted"]) == ("w0", 3)
    assert balanced(counters), counters
    assert counters["error"] == "ZeroDivisionError: a bug in the shutdown"
