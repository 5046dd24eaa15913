"""The ``sidecar`` command run in this test's own process, as its in-process stop and counters tests
run it: its arguments, the stop signals, a caller's own Typer app, a run planted to count then raise,
a SIGTERM planted on the run's way in or out, and the check that a planted stop ended the run by its own
handlers. The stop-signal, stop-in-a-refusal, stop-in-a-bug, stop-at-the-command and run-counters tests
share them, so a change to how the command is driven reaches them all, rather than through one test
module's private names."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import pytest
import typer

from service import cli
from service.commands import sidecar as sidecar_command
from service.sidecar.launch import SidecarOptions
from service.sidecar.session_settings import SessionStats
from tests.service.interrupt import handlers_kept
from tests.service.sidecar.lease_ends import ENDS

# push; its Redis and engine never reached where the run is planted
ARGS = ["sidecar", "--worker-id", "w", "--redis-url", "redis://r", "--engine-url", "http://e"]
PULL_ARGS = [*ARGS[:-2], "--pull-api"]  # pull: ``ARGS`` and a port
STOP = (signal.SIGTERM, signal.SIGINT)  # the stop signals the command hears or ignores


def caller_app() -> typer.Typer:
    """The command registered in a caller's own Typer app, as a program that embeds it does."""
    app = typer.Typer()
    app.add_typer(typer.Typer(), name="bench")
    sidecar_command.register(app, typer.Typer())
    return app


def counted_then_raising(error: BaseException) -> Any:
    """A run (either mode's) that counts three claims, two accepted and one released, then raises."""

    def run(_: SidecarOptions, stats: SessionStats) -> SessionStats:
        stats.claimed, stats.accepted, stats.released = 3, 2, 1
        raise error

    return run


def balanced(counters: dict[str, Any]) -> bool:
    """Whether every lease taken ended once in the counters (docs/sidecar.md)."""
    taken = counters["claimed"] + counters["stolen"] + counters["inherited"]
    return bool(taken == sum(counters[name] for name in ENDS))


def signalled_on_the_way_out(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, which raises, with a SIGTERM to this process from the ``finally`` it raises through."""

    def hooked(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    return hooked


def after_a_dropped_error(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, called after a SIGTERM to this process that landed while an error was handled and
    dropped (an ``except`` that goes on, as a library's fallback does)."""

    def hooked(*args: Any, **kwargs: Any) -> Any:
        try:
            raise KeyError("a library's fallback")
        except KeyError:
            os.kill(os.getpid(), signal.SIGTERM)
        return fn(*args, **kwargs)

    return hooked


def stopped_by_the_runs_own_handlers(
    redis_url: str, tail: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run the ``sidecar`` console script (``ARGS``' first three, then ``tail``) with a stop planted
    in its start: it exits 0 with an empty counters line, stopped by its run's own handlers (not the
    early ones' "before the run started")."""
    monkeypatch.setattr(sys, "argv", ["rollout-scheduler", *ARGS[:3], "--redis-url", redis_url, *tail])
    capsys.readouterr()
    with handlers_kept(STOP), pytest.raises(SystemExit) as exited:
        cli.main()
    out, err = capsys.readouterr()
    assert exited.value.code in (0, None)
    assert json.loads(out) == {"worker_id": "w", **asdict(SessionStats())}
    assert "before the run started" not in err  # the run's own stop: it had begun
