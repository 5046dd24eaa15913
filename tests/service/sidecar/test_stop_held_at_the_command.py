"""A stop signal held while the command line loads is still held when the command begins: the run
stops at once for it, as for one held later in the start.

The console script's entry (``service.cli.main``) arms the early handlers before it imports the
command line, and the ``sidecar`` command arms them again as its first line (``early_stop.arm``). A
SIGTERM that lands in those imports while a library handles an error (an optional dependency's
``except ImportError``: redis-py's hiredis probe is one) is held, not raised over it, and the run
was to stop for it once its handlers were in. But the command's ``arm`` cleared what was held, so
the stop was lost: the sidecar claimed and served on until a second signal, and under Kubernetes
until the grace period's SIGKILL, its leases left to lapse. chaos12's soak found one so: pid 26501,
SIGTERMed 0.9 s after its spawn at load ~15, logged ``engine ready, claiming`` 1.7 s later and was
still serving six minutes on, holding the health port its successors then failed to bind (exit 2).
"""

from __future__ import annotations

import pytest

from service import cli_app
from service.ports import free_port
from tests.service.sidecar.command_run import ARGS, after_a_dropped_error, stopped_by_the_runs_own_handlers


@pytest.mark.timeout(60)  # a stop lost would serve until this
@pytest.mark.parametrize("mode", ["push", "pull"])
def test_a_stop_held_while_the_command_line_loads_stops_the_run_once_its_handlers_are_in(
    mode: str, redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SIGTERM lands between the entry's ``arm`` and the command's (``cli_app.run`` is what
    the entry calls once the command line is imported), with an error handled and dropped."""
    monkeypatch.setattr(cli_app, "run", after_a_dropped_error(cli_app.run))
    tail = ARGS[5:] if mode == "push" else ["--pull-api", str(free_port())]
    stopped_by_the_runs_own_handlers(redis_url, tail, monkeypatch, capsys)
