"""A SIGTERM or SIGINT that reaches ``rollout-scheduler serve`` while it still imports the app stops
it as one a moment later does: exit 0, no traceback, nothing left behind.

``serve`` installed its handlers (exit 0 by ``SystemExit``) only once it had imported the app:
6-17 s after the exec at load 11-15 on the 2-core dev host (exit51, docs/experiments.md), where a
SIGTERM (a ``docker compose stop``, a pod deleted as it starts) killed it by the signal: -15, 143 to
Kubernetes, a crash. The console script's entry (``service.cli.main``) now installs them first.

The child stands still as the app's module begins to import, and says so: the test signals it then,
whatever the host's load, and no sleep of the test's decides the outcome. It runs with the embedded
server (no ``REDIS_URL``) and a temporary dir of the test's own, which the stop must leave empty.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.service.api.held_in_imports import STAND_STILL, held_in_imports


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda sig: sig.name)
def test_serve_stopped_while_it_imports_the_app_exits_0_leaving_nothing(
    sig: signal.Signals, tmp_path: Path
) -> None:
    child = held_in_imports(STAND_STILL, ["serve", "--port", "0"], tmp_path)  # never bound: stopped first
    try:
        child.send_signal(sig)
        _, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 0, err[-2000:]
    assert "Traceback" not in err
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith("rollout-valkey-")] == []
