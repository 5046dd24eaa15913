"""A ``serve`` stopped while it still imports the app ends 0 however late a second stop signal comes:
one in the interpreter's finalization, past every ``atexit`` hook, is ignored.

Why. Stopped before it enables the exit guard (``exit_guard.enable``), ``serve`` never reached the
guard's decision, whose ``_keep_the_status`` ignores the stop signals from there on (exit54). Its
exit, status 0 decided by the first signal, still ran the interpreter's finalization with Python's
handlers: CPython puts each handled signal's default action back there (``_PySignal_Fini``), and a
supervisor's second SIGTERM or a second Ctrl-C landing then killed it by the signal, -15 or -2 (143
or 130 to a shell, a crash's status), where nothing was left to stop (the embedded server starts after
the guard's enabling). The console script's entry now ignores them at its last ``atexit`` hook
(``service.cli.main``), as a refusal's exit does (``exit_decided``).

The child stands still as the app's module begins to import, and says so: the test stops it then; the
second is sent by an object ``__main__`` holds as the interpreter clears it, after every hook, which
then says it lived and what handled the signal (None: Python no more), as
``finalizing_child.py`` does for a ``serve`` whose guard is enabled.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.service.api.held_in_imports import STAND_STILL, held_in_imports

WAIT_S = 120.0  # a bound against never, for a loaded host
ALIVE = "alive after the second stop signal, its handler then"
CHILD = (
    """
import os, signal, sys

class Second:
    def __init__(self, signum):
        self.signum, self.pid = signum, os.getpid()
        self.kill, self.write, self.getsignal = os.kill, os.write, signal.getsignal

    def __del__(self):
        handler = self.getsignal(self.signum)
        self.kill(self.pid, self.signum)
        self.write(1, f"ALIVE {handler!r}\\n".encode())

held = [Second(signal.Signals[sys.argv.pop()])]  # cleared with __main__, in the finalization
""".replace("ALIVE", ALIVE)
    + STAND_STILL
)


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT], ids=lambda sig: sig.name)
def test_a_second_signal_in_the_finalization_of_a_serve_stopped_in_its_imports_leaves_0(
    second: signal.Signals, tmp_path: Path
) -> None:
    child = held_in_imports(CHILD, ["serve", "--port", "0", second.name], tmp_path)
    try:
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=WAIT_S)
    finally:
        child.kill()
        child.wait()
    # the second landed where Python handles the signal no more (its handler gone), and the child lived
    assert (child.returncode, out.splitlines()) == (0, [f"{ALIVE} None"]), err[-2000:]
    assert "Traceback" not in err, err[-2000:]
