"""A signal that reaches a sidecar after its shutdown is over changes nothing: the exit status stays the
one the run chose, and the log gets no traceback.

Once the command has printed its counters line, the interpreter's teardown still takes 0.1-0.5 s
(docs/sidecar.md). A second SIGTERM or Ctrl-C landing then (an operator's second ``kill`` 0.2-1 s
after the first, chaos8's soak: 3 of 10 such exits) found the signals back at their defaults: push
mode's event loop resets them as it closes, and the interpreter resets Python handlers as it
finalizes. The process died by the signal (status -15/-2, 143/130 to a shell: a supervisor reads a
crash, and a loop that died lost its 70), or a KeyboardInterrupt hit an ``atexit`` hook and printed a
traceback into the JSON log, for a shutdown that had ended well.

Earlier, between the run's end and the command's deafness (the loop's close, the health server's
stop: a poll of up to 50 ms), a second signal met the default too: -15 with no counters line at all
(chaos9's soak: a SIGTERM 0.35 s after the first), or -2 for SIGINT; and after a run that raised (a
loop's death, exit 70; a Redis too old, exit 2) the loop's close put the defaults back for the whole
exit. Push mode now relays the signals to its loop by handlers of its own, left ignored however the
run ends (``stop_relay``); a stream of signals from the first to the exit holds it here,
``test_stop_signals_in_process.py`` the handlers it leaves.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tests.service.sidecar.procs import ROOT, Cluster, Proc, bound_url, cluster, counters_line, wait_http

SIGNALS = [signal.SIGTERM, signal.SIGINT]
EVERY_S = 0.001  # the gap between two signals of a stream: well inside the window it closed
LONGEST_S = 60.0  # a process still running by then is a failure of its own (a hung drain)


def _ready_push_sidecar(procs: Cluster, redis_url: str, engine_url: str) -> Proc:
    """A push sidecar of ``w0`` that drains for at most 1 s, once it is ready."""
    flags = ["--health-port", "0", "--drain-timeout", "1"]  # the kernel's pick (bound_url)
    sidecar = procs.sidecar("w0", engine_url, redis_url, *flags)
    wait_http(f"{bound_url(sidecar)}/ready", sidecar)
    return sidecar


def _signalled_again_after_its_counters(sidecar: Proc, sig: signal.Signals) -> int:
    """Stop ``sidecar`` with ``sig``, send ``sig`` again the moment its counters line is out (the
    teardown is still running then), and return its exit status."""
    sidecar.signal(sig)
    assert counters_line(sidecar), sidecar.log.read_text()[-2000:]
    sidecar.signal(sig)
    return sidecar.popen.wait(timeout=120)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda sig: sig.name)
def test_a_push_sidecar_signalled_again_after_its_counters_line_exits_0_without_a_traceback(
    sig: signal.Signals, redis_client: redis.Redis, redis_url: str, engine_url: str, tmp_path: Path
) -> None:
    with cluster(tmp_path) as procs:
        sidecar = _ready_push_sidecar(procs, redis_url, engine_url)
        status = _signalled_again_after_its_counters(sidecar, sig)
    assert status == 0
    assert "Traceback" not in sidecar.log.read_text()


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda sig: sig.name)
def test_a_pull_sidecar_signalled_again_after_its_counters_line_exits_0_without_a_traceback(
    sig: signal.Signals, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    with cluster(tmp_path) as procs:
        args = ["sidecar", "--worker-id", "w0", "--redis-url", redis_url, "--pull-api", "0"]
        sidecar = procs.spawn("sidecar-w0", [*args, "--drain-timeout", "1"])
        wait_http(f"{bound_url(sidecar)}/ready", sidecar)
        status = _signalled_again_after_its_counters(sidecar, sig)
    assert status == 0
    assert "Traceback" not in sidecar.log.read_text()


def _signalled_until_it_exits(sidecar: Proc, sig: signal.Signals) -> int:
    """Send ``sig``, then again every ``EVERY_S`` until the process ends; its exit status."""
    end = time.monotonic() + LONGEST_S
    while sidecar.popen.poll() is None and time.monotonic() < end:
        sidecar.signal(sig)
        time.sleep(EVERY_S)
    return sidecar.popen.wait(timeout=30)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda sig: sig.name)
def test_a_push_sidecar_signalled_until_it_exits_prints_its_counters_and_exits_0(
    sig: signal.Signals, redis_client: redis.Redis, redis_url: str, engine_url: str, tmp_path: Path
) -> None:
    with cluster(tmp_path) as procs:
        sidecar = _ready_push_sidecar(procs, redis_url, engine_url)
        status = _signalled_until_it_exits(sidecar, sig)
        out, _ = sidecar.popen.communicate(timeout=30)
    log = sidecar.log.read_text()
    assert status == 0, log[-2000:]
    assert [json.loads(line)["worker_id"] for line in out.splitlines() if line.startswith("{")] == ["w0"]
    assert "Traceback" not in log


# ``rollout-scheduler sidecar`` whose main loop, once it runs, says so and is held until the test has
# begun its signals (a line on stdin), then raises: a bug (the loop's death, exit 70) or a Redis
# found too old (exit 2), as ``RAISES`` names
RAISING_CHILD = """
import os, sys
from service.redis_conn import RedisTooOldError
from service.sidecar import runner

async def held_then_raises(self, stop):
    print("raising", flush=True)
    sys.stdin.readline()
    if os.environ["RAISES"] == "too-old":
        raise RedisTooOldError("Redis at the test's is too old")
    raise ZeroDivisionError("a bug in the main loop")

runner.Sidecar._serve = held_then_raises
from service.cli import main
main()
"""
RAISED = {  # what the run raises: the command's status, and its one line
    "loop-died": (70, "sidecar: the sidecar's main loop died (ZeroDivisionError: a bug in the main loop)"),
    "too-old": (2, "sidecar: Redis at the test's is too old"),
}


def _raising_push_sidecar(procs: Cluster, raises: str, redis_url: str, engine_url: str) -> Proc:
    """A push sidecar of ``w0`` held where its run raises (``RAISING_CHILD``), once it is there."""
    log = procs.workdir / "sidecar-w0.log"
    args = ["sidecar", "--worker-id", "w0", "--engine-url", engine_url, "--redis-url", redis_url]
    popen = subprocess.Popen(
        [sys.executable, "-c", RAISING_CHILD, *args, "--drain-timeout", "1"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "RAISES": raises},
    )
    sidecar = Proc("sidecar-w0", popen, log)
    procs.procs.append(sidecar)
    assert popen.stdout is not None
    assert popen.stdout.readline() == "raising\n", log.read_text()[-2000:]
    return sidecar


def _released_and_signalled_until_it_exits(sidecar: Proc, sig: signal.Signals) -> int:
    """Send ``sig``, let the held run raise, and go on sending ``sig`` every ``EVERY_S`` until the
    process ends: the whole raising exit under the stream. Its exit status."""
    assert sidecar.popen.stdin is not None
    sidecar.signal(sig)
    sidecar.popen.stdin.write("\n")
    sidecar.popen.stdin.close()
    return _signalled_until_it_exits(sidecar, sig)


@pytest.mark.parametrize("raises", RAISED)
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda sig: sig.name)
def test_a_push_sidecar_signalled_through_a_run_that_raised_exits_with_the_run_s_status(
    sig: signal.Signals,
    raises: str,
    redis_client: redis.Redis,
    redis_url: str,
    engine_url: str,
    tmp_path: Path,
) -> None:
    """Not -15 or -2 (a death by the signal: the loop's close had put the defaults back), nor a
    ``KeyboardInterrupt`` through the exit: the status the command chose and its one line."""
    status, line = RAISED[raises]
    with cluster(tmp_path) as procs:
        sidecar = _raising_push_sidecar(procs, raises, redis_url, engine_url)
        exited = _released_and_signalled_until_it_exits(sidecar, sig)
    log = sidecar.log.read_text()
    assert exited == status, log[-2000:]
    assert line in log.splitlines()
    assert "KeyboardInterrupt" not in log
