"""A SIGTERM or SIGINT that reaches ``rollout-scheduler serve`` while it refuses its settings leaves the
refusal's status 2 and its line: the stop changes nothing in an exit already decided.

The console script installs serve's handlers (exit 0 by ``SystemExit``) on its first line (exit51), so
a stop during a refusal's exit raised ``SystemExit(0)`` over it: the process that refused its settings
exited 0 (systemd: the unit stopped in order; a pod's container: ``Completed``), its line unprinted
when the signal met the print. The sidecar's refusals keep theirs (``early_stop.deciding``); serve's now
do too (review51b, docs/experiments.md).

The child refuses ``--redis-cluster`` with no URL, or a flag serve does not have, and stands still
where it is about to print the refusal, until the test has signalled it and then written a line to its
stdin: no sleep of the test's decides the outcome.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.service.api.serve_child import MAIN, serve_child

# ``rollout-scheduler serve --redis-cluster`` as the console script runs it, held at its refusal's line
CHILD = (
    """
import sys, typer

echo = typer.echo

def echo_when_told(message=None, *args, **kwargs):
    if "serve: " in str(message):
        print("refusing", flush=True)
        sys.stdin.readline()  # the test's signal has been sent
    echo(message, *args, **kwargs)

typer.echo = echo_when_told
"""
    + MAIN
)


REFUSALS = [
    (("--redis-cluster",), "serve: --redis-cluster needs --redis-url"),  # serve's own check
    (("--bogus",), "serve: No such option: --bogus"),  # the command line's parse (``cli_app._report``)
]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda sig: sig.name)
@pytest.mark.parametrize(("flags", "line"), REFUSALS, ids=["settings", "parse"])
def test_serve_stopped_while_it_refuses_exits_2_with_its_line(
    sig: signal.Signals, flags: tuple[str, ...], line: str, tmp_path: Path
) -> None:
    child = serve_child(CHILD, ["serve", *flags], tmp_path)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "refusing\n"
        child.send_signal(sig)
        _, err = child.communicate("go on\n", timeout=120)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 2, err[-2000:]
    assert line in err
    assert "Traceback" not in err
