"""``serve``'s uvicorn server (``service.serving.CountingServer``) counts a stop signal it heard
once, whichever way its run ends: the next one ``exit_cleanly`` hears is the second, logged, not
taken for uvicorn's replay of the first.

uvicorn raises the signals it heard again only where its run returns. A run whose startup failed
after it heard one (``sys.exit(3)``) raised instead, and the replay awaited was never cleared: the
user's next Ctrl-C, during the exit's waits, raised ``SystemExit(0)`` there (the embedded server's
stop cut), unlogged and uncounted (review53d). The child runs a real uvicorn server whose app's
startup raises the signal at itself, then fails; no sleep decides the outcome.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from service.cli import SECOND_SIGNAL_LOG

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 90.0  # a bound against never, for a loaded host

CHILD = """
import logging, signal
import uvicorn
from service.cli import exit_cleanly
from service.serving import CountingServer

async def app(scope, receive, send):
    await receive()  # lifespan.startup
    signal.raise_signal(signal.SIGTERM)  # heard by uvicorn's handler while the startup runs
    await send({"type": "lifespan.startup.failed", "message": "planted"})

logging.basicConfig(level=logging.WARNING)
for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, exit_cleanly)
server = CountingServer(uvicorn.Config(app, port=0, lifespan="on", log_config=None))
try:
    server.run()
except SystemExit as ended:
    print("run ended", ended.code, flush=True)
try:
    signal.raise_signal(signal.SIGTERM)  # the user's second, during the exit
except SystemExit as raised:
    print("the second raised", raised.code, flush=True)
else:
    print("the second was heard", flush=True)
"""


def test_a_signal_heard_before_a_failed_startup_leaves_the_next_one_the_second() -> None:
    """The startup failed after uvicorn heard SIGTERM: the run ends 3 (uvicorn's startup failure),
    and the next SIGTERM is the second one heard (its line logged), not a replay that raises."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=WAIT_S, env=env, cwd=ROOT
    )
    assert done.stdout.splitlines() == ["run ended 3", "the second was heard"], done.stdout + done.stderr
    assert SECOND_SIGNAL_LOG in done.stderr, done.stderr
