"""A SIGTERM or SIGINT that reaches a sidecar before its run handles them stops it at once: the
counters line, all zero, and exit status 0, as a stopped run ends (service/sidecar/early_stop.py).

A push sidecar whose Redis Cluster is down at start-up waits for it before its event loop, and so
before its signal handlers, answering its liveness probe (``connecting``) meanwhile: a pod deleted
then, or a rollout that replaced it, sent a SIGTERM that killed the process by the signal (-15, 143
in the pod's status: a crash to a supervisor), and a Ctrl-C ended it with status 130.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from service.ports import free_port
from service.sidecar import launch
from service.sidecar.early_stop import STOP_SIGNALS
from service.sidecar.hurry import Hurry
from service.sidecar.session_settings import SessionStats
from tests.service.interrupt import handlers_kept
from tests.service.sidecar.procs import PROCESS_START_S, bound_url, cluster, counters_line, wait_http

SIGNALS = [signal.SIGTERM, signal.SIGINT]


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda sig: sig.name)
def test_a_sidecar_stopped_while_it_waits_for_its_cluster_at_start_exits_0_with_zero_counters(
    sig: signal.Signals, tmp_path: Path
) -> None:
    dead = free_port()  # nothing listens on ``dead``: the cluster is down
    with cluster(tmp_path) as procs:
        flags = ["--cluster", "--health-port", "0"]  # the kernel's pick (bound_url)
        sidecar = procs.sidecar("w0", f"http://127.0.0.1:{free_port()}", f"redis://127.0.0.1:{dead}", *flags)
        wait_http(f"{bound_url(sidecar)}/health", sidecar)  # up, and waiting for the cluster
        sidecar.signal(sig)
        line = counters_line(sidecar)
        status = sidecar.popen.wait(timeout=PROCESS_START_S)
    log = sidecar.log.read_text()
    assert status == 0, log[-2000:]
    assert json.loads(line) == {"worker_id": "w0", **asdict(SessionStats())}
    assert f"{sig.name} before the run started" in log
    assert "Traceback" not in log


@pytest.fixture
def stop_handlers() -> Iterator[None]:
    """This process's SIGTERM and SIGINT handlers, put back after the test."""
    with handlers_kept(STOP_SIGNALS):
        yield


@pytest.mark.usefixtures("stop_handlers")
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda sig: sig.name)
def test_a_stop_signal_before_uvicorn_handles_it_stops_the_pull_server(sig: signal.Signals) -> None:
    """Pull mode's handler until uvicorn's own are in (its event loop being made) was a no-op: a
    SIGTERM then was lost, and the sidecar served on until its SIGKILL. Now it has the server start
    and stop at once; uvicorn's re-raise of a signal it handled, after it stopped, changes nothing."""
    server = launch._pull_server(object(), 1.0, Hurry(grace_s=2.0))
    handler = signal.getsignal(sig)
    assert callable(handler)
    handler(sig, None)
    assert server.should_exit
