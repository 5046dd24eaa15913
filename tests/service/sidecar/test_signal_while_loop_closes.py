"""A push sidecar signalled again and again from its first SIGTERM to its exit still prints its
counters line and exits 0: no moment of its shutdown has the stop signals at their defaults.

Push mode takes SIGTERM and SIGINT through its event loop's handlers, and the loop puts the defaults
back as it closes, inside ``asyncio.run``, before the command's run returns and makes the process deaf
to them (chaos8's fix, ``test_exit_signal_after_run.py``). In between (the loop's close, the health
server's stop: a poll of up to 50 ms, more on a loaded host) a second signal met the default: the
process died by it, -15 with no counters line at all (chaos9's soak: a SIGTERM 0.35 s after the first,
the 16 items it drained done by then), or -2 for SIGINT. ``early_stop.deaf_after_run`` closes the gap
(helper leftover45); ``test_stop_signals_in_process.py`` holds the handlers it leaves, this the
process's exit across it.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import redis

from service.ports import free_port
from tests.service.sidecar.procs import Proc, cluster, wait_http

SIGNALS = [signal.SIGTERM, signal.SIGINT]
EVERY_S = 0.001  # the gap between two signals of the stream: well inside the window it closes
LONGEST_S = 60.0  # a process still running by then is a failure of its own (a hung drain)


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
    port = free_port()
    with cluster(tmp_path) as procs:
        flags = ["--health-port", str(port), "--drain-timeout", "1"]
        sidecar = procs.sidecar("w0", engine_url, redis_url, *flags)
        wait_http(f"http://127.0.0.1:{port}/ready", sidecar)
        status = _signalled_until_it_exits(sidecar, sig)
        out, _ = sidecar.popen.communicate(timeout=30)
    log = sidecar.log.read_text()
    assert status == 0, log[-2000:]
    assert [json.loads(line)["worker_id"] for line in out.splitlines() if line.startswith("{")] == ["w0"]
    assert "Traceback" not in log
