"""``serve``'s uvicorn server (``service.serving.CountingServer``) counts a stop signal it heard
once, whichever way its run ends: the next one ``exit_cleanly`` hears is the second, logged, not
taken for uvicorn's replay of the first.

uvicorn raised the signals it heard again only where its run returned. A run whose startup failed
after it heard one (``sys.exit(3)``) raised instead, and the replay awaited was never cleared: the
user's next Ctrl-C, during the exit's waits, raised ``SystemExit(0)`` there (the embedded server's
stop cut), unlogged and uncounted (review53d). The child runs a real uvicorn server whose app's
startup raises the signal at itself, then fails; no sleep decides the outcome.

Nor is a signal that comes as the run ends lost: uvicorn put ``serve``'s handler back and then raised
what it had heard again, and a signal between the two was taken for that replay (the exit's start),
counted by no one, so that a user's third Ctrl-C forced nothing (review54). The server raises nothing
again now; the second child sends its signal as the handler is put back, every time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from service.cli import SECOND_SIGNAL_LOG, UNSIGNALLED_EXIT_LOG

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


AS_PUT_BACK = """
import logging, signal
import uvicorn
from service import cli
from service.serving import CountingServer

async def app(scope, receive, send):
    await receive()  # lifespan.startup
    signal.raise_signal(signal.SIGTERM)  # the first: heard by uvicorn's handler
    await send({"type": "lifespan.startup.complete"})
    await receive()  # lifespan.shutdown
    await send({"type": "lifespan.shutdown.complete"})

def putting_back(set_handler):
    def set_and_signal(signum, handler):
        found = set_handler(signum, handler)
        if handler is cli.exit_cleanly and signum == signal.SIGTERM:
            signal.raise_signal(signal.SIGINT)  # the user's second, as serve's handler is back
        return found
    return set_and_signal

logging.basicConfig(level=logging.WARNING)
for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, cli.exit_cleanly)
signal.signal = putting_back(signal.signal)
server = CountingServer(uvicorn.Config(app, port=0, lifespan="on", log_config=None))
try:
    server.run()
except SystemExit as ended:
    print("run raised", ended.code, flush=True)
else:
    print("run returned", flush=True)
print("heard", cli._heard, flush=True)
"""


def test_a_signal_as_the_run_ends_is_counted_the_second() -> None:
    """uvicorn heard the first; the second comes as ``serve``'s handler is put back: it is the second
    heard (logged), and the run returns, its exit begun by the first."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", AS_PUT_BACK], capture_output=True, text=True, timeout=WAIT_S, env=env, cwd=ROOT
    )
    assert done.stdout.splitlines() == ["run returned", "heard 2"], done.stdout + done.stderr
    assert SECOND_SIGNAL_LOG in done.stderr, done.stderr


FAILED_AS_PUT_BACK = AS_PUT_BACK.replace(
    'await send({"type": "lifespan.startup.complete"})',
    'await send({"type": "lifespan.startup.failed", "message": "planted"})',
).replace("signal.raise_signal(signal.SIGTERM)  # the first: heard by uvicorn's handler", "")


def test_a_signal_as_a_failed_startup_unwinds_the_run_leaves_its_status_3() -> None:
    """The app's startup failed (uvicorn's ``SystemExit(3)``), no signal heard; one comes as ``serve``'s
    handler is put back: the exit has begun, so it is logged, and the run still ends 3, not 0."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", FAILED_AS_PUT_BACK],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        env=env,
        cwd=ROOT,
    )
    assert done.stdout.splitlines() == ["run raised 3", "heard 1"], done.stdout + done.stderr
    assert UNSIGNALLED_EXIT_LOG in done.stderr, done.stderr
