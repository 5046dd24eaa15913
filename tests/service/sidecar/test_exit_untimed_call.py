"""A sidecar stopped while its Redis calls wait on a stalled server that never answers still exits.

The process's exit joins the threads of its Redis calls (``asyncio.run`` waits for its executor's, the
interpreter for every thread no daemon), so a call that never returns would hold it until the pod's
SIGKILL, as it held ``serve``'s (``service/api/exit_guard.py``). The command's client bounds each
call by its socket timeout (5 s), so against a stalled server none is endless; here the calls have no
socket timeout (``untimed_child``), and the server is SIGSTOPped from before the SIGTERM until the
process has ended. It ends all the same: the exit's hang-up closes the connections those calls wait on
(``service/sidecar/hang_up.py``), so the sidecar needs no guard of its own (stop50). Without the
hang-up neither process ever exited (the bound against never below). No duration is asserted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from service.delivery.protocol import Delivery
from service.embedded import EmbeddedServer
from tests.service.sidecar.procs import (
    ROOT,
    Cluster,
    Proc,
    bound_url,
    cluster,
    item,
    publish,
    wait_http,
    wait_until,
)

pytestmark = pytest.mark.slow
UNTIMED = "tests.service.sidecar.untimed_child"
STALLED_S = 6.0  # the calls out at the stall wait longer than the command's socket timeout (5 s) would
WAIT_S = 90.0  # a bound against never, for a loaded host: the exit is due 1 s + 2 s after the SIGTERM


def _untimed(procs: Cluster, *args: str) -> Proc:
    """``sidecar <args>`` with no socket timeout on its Redis client, reaped by ``procs``."""
    log = procs.workdir / "sidecar-w0.log"
    command = [sys.executable, "-m", UNTIMED, "sidecar", "--worker-id", "w0", "--drain-timeout", "1", *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    popen = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=log.open("w"), text=True, env=env
    )
    proc = Proc("sidecar-w0", popen, log)
    procs.procs.append(proc)
    return proc


def _push(procs: Cluster, delivery: Delivery, redis_url: str) -> Proc:
    """A push sidecar running two long items: heartbeats and claims go on calling Redis."""
    engine = procs.engine_threads({"engine": 0.2})["engine"]  # ~25 s an item
    flags = ["--engine-url", engine, "--redis-url", redis_url, "--idle-poll", "0.05", "--max-num-seqs", "2"]
    sidecar = _untimed(procs, *flags)
    publish(delivery, "stalled", {"w0": [item(f"p{i}", 0, 200_000) for i in range(2)]}, 30_000)
    wait_until(lambda: delivery.progress("stalled").running == 2, 180, "both leased")
    return sidecar


def _pull(procs: Cluster, delivery: Delivery, redis_url: str) -> Proc:
    """A pull sidecar whose worker holds two items: its heartbeats go on calling Redis."""
    sidecar = _untimed(procs, "--pull-api", "0", "--redis-url", redis_url)
    base = bound_url(sidecar)  # the kernel's pick
    wait_http(f"{base}/ready", sidecar, 120)
    publish(delivery, "stalled", {"w0": [item(f"p{i}", 0, 10) for i in range(2)]}, 30_000)
    for _ in range(2):
        assert httpx.get(f"{base}/next?wait_s=10", timeout=60).status_code == 200
    return sidecar


@pytest.mark.parametrize("start", [_push, _pull], ids=["push", "pull"])
def test_a_sidecar_whose_calls_wait_on_a_server_that_never_answers_exits_on_sigterm(
    tmp_path: Path, start: Callable[[Cluster, Delivery, str], Proc]
) -> None:
    server = EmbeddedServer().start()
    try:
        with cluster(tmp_path) as procs:
            sidecar = start(procs, Delivery.from_url(server.url), server.url)
            server.signal(signal.SIGSTOP)
            try:
                time.sleep(STALLED_S)
                sidecar.signal(signal.SIGTERM)
                out, _ = sidecar.popen.communicate(timeout=WAIT_S)
            finally:
                server.signal(signal.SIGCONT)
        log = sidecar.log.read_text()[-3000:]
        assert sidecar.popen.returncode == 0, log
        assert any(line.startswith("{") for line in out.splitlines()), f"no counters line; log:\n{log}"
    finally:
        server.stop()
