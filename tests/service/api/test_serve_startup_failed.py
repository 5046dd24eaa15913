"""``serve`` whose app's startup fails exits 3, uvicorn's startup failure, not 0.

Why. ``serve`` runs uvicorn's server itself (``service.serving.CountingServer``, whose stop signals
count toward the third) where it called ``uvicorn.run``. A supervisor (systemd, Kubernetes) reads the
status: 0 is a stop in order, and a replica that never came up must not read as one. uvicorn 0.55's
server raises ``SystemExit(3)`` itself at a failed startup (``Server.startup``); ``serve`` checks
``started`` after the run too, as ``uvicorn.run`` does, for a run that would return without serving
(none does in uvicorn 0.55: mutants54 found that check's removal changes no outcome). The child runs
the real ``serve`` with its real embedded Redis; only its app is one whose startup fails
(``lifespan.startup.failed``, as a startup that raised is told to uvicorn)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from service.ports import free_port

ROOT = Path(__file__).resolve().parents[3]
WAIT_S = 120.0  # a bound against never, for a loaded host

CHILD = """
import sys
from service import app as service_app

async def failing(scope, receive, send):
    await receive()  # lifespan.startup
    await send({"type": "lifespan.startup.failed", "message": "planted"})

service_app.create_app = lambda *args, **kwargs: failing
from service.cli import main
sys.argv = ["rollout-scheduler", "serve", "--port", sys.argv[1]]
main()
"""


def test_serve_whose_app_fails_its_startup_exits_3(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("ROLLOUT_")}
    env.update(ROLLOUT_MODEL_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(free_port())],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 3, done.stderr[-2000:]
    assert "Application startup failed" in done.stderr, done.stderr[-2000:]
