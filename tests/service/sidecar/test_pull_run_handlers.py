"""A pull run leaves SIGTERM and SIGINT as it found them in a caller's own process, and ignored in the
console script's: never the no-op handlers it stops its server by.

``launch._pull_server`` installs a handler of its own for both signals (a stop before uvicorn's are in
stops the server as it starts), and uvicorn puts that one back as it ends, so a pull run in a
caller's own process (a test's ``CliRunner``, a program that embeds it) left both signals doing
nothing: a Ctrl-C or SIGTERM to that process was lost for good, where docs/sidecar.md says such a
caller keeps its handlers (push mode's ``stop_relay`` gives them back). In the console script's
process a stop signal after the run is ignored (its exit is decided), as push mode leaves it
(helper review47c).
"""

from __future__ import annotations

import os
import signal
import threading
import time

from service.ports import free_port
from service.sidecar import early_stop, launch
from service.sidecar.launch import SidecarOptions
from tests.service.interrupt import handlers_kept

STOP = (signal.SIGTERM, signal.SIGINT)


def _own_handler(signum: int, frame: object) -> None:
    """A caller's handler of its own."""
    del signum, frame


def _stop_once_serving(found: object, ended: threading.Event) -> threading.Thread:
    """SIGTERM to this process once the run has put its own handler in (``found`` no longer is), and
    none once the run has ``ended`` without it: sent then, it would land in a later test of the
    worker, whose SIGTERM may be the default that ends the process (sigint62)."""

    def stop() -> None:
        deadline = time.monotonic() + 60.0
        while (
            signal.getsignal(signal.SIGTERM) in (found, early_stop._stopped) and time.monotonic() < deadline
        ):
            if ended.wait(0.01):
                return
        if not ended.is_set():
            os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=stop, daemon=True)
    thread.start()
    return thread


def _pull_run(redis_url: str) -> None:
    options = SidecarOptions(
        worker_id="w", redis_url=redis_url, pull_api_port=free_port(), drain_timeout_s=0.1
    )
    ended = threading.Event()
    thread = _stop_once_serving(signal.getsignal(signal.SIGTERM), ended)
    try:
        launch.run_pull(options)
    finally:
        ended.set()
        thread.join(timeout=10.0)


def test_a_pull_run_in_a_caller_s_own_process_gives_its_handlers_back(redis_url: str) -> None:
    with handlers_kept(STOP):
        signal.signal(signal.SIGTERM, _own_handler)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _pull_run(redis_url)
        after = [signal.getsignal(sig) for sig in STOP]
    assert after == [_own_handler, signal.default_int_handler]


def test_a_pull_run_in_the_console_script_s_process_leaves_the_stop_signals_ignored(redis_url: str) -> None:
    with handlers_kept(STOP):
        early_stop.arm()  # the console script's entry does so first
        _pull_run(redis_url)
        after = [signal.getsignal(sig) for sig in STOP]
    assert after == [signal.SIG_IGN, signal.SIG_IGN]
