"""A SIGTERM or SIGINT that reaches ``rollout-scheduler sidecar`` while the command line is still
being imported stops it as one a moment later does: exit 0, the counters line, all zero.

The early handlers (service/sidecar/early_stop.py) were armed by the command's first line, after the
root CLI's imports and every command group's (0.6-0.8 s on the 2-core dev host): a stop then, a pod
deleted as it started, killed the process by the signal (-15; 143, a crash, to Kubernetes). The
console script's entry (``service.cli.main``) now arms them before it imports the command line.

The child stands still as the command line's first heavy import (Typer) begins, and says so: the
test signals it then, whatever the host's load, and no sleep of the test's decides the outcome.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import asdict

import pytest

from service.sidecar.session_settings import SessionStats
from tests.service.api.held_in_imports import stand_still
from tests.service.sidecar.procs import ROOT

# ``rollout-scheduler`` as the console script runs it, held still at its first import of Typer
CHILD = stand_still("typer", "importing typer")
ARGS = ["sidecar", "--worker-id", "w0", "--redis-url", "redis://127.0.0.1:1/0"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda sig: sig.name)
def test_a_sidecar_stopped_while_the_command_line_is_imported_exits_0_with_zero_counters(
    sig: signal.Signals,
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *ARGS],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "importing typer\n"
        child.send_signal(sig)
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 0, err[-2000:]
    assert json.loads(out.splitlines()[-1]) == {"worker_id": "w0", **asdict(SessionStats())}
    assert f"{sig.name} before the run started" in err
    assert "Traceback" not in err
