"""The sidecar ignores SIGTERM and SIGINT once its run has returned only where the command owns the
process (the ``rollout-scheduler`` console script, ``service.cli.main``): a caller that runs the
command in its own process (a test's ``CliRunner``, a program that embeds the app) goes on hearing
Ctrl-C and SIGTERM afterwards, where it had been left deaf to both (a pytest run that could not be
interrupted, an xdist worker that a SIGTERM no longer stopped). The teardown a second signal broke
in a real sidecar is covered across processes by ``test_exit_signal_after_run``."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from service import cli
from service.commands import sidecar as sidecar_command
from service.sidecar import early_stop, launch, runner
from service.sidecar.launch import SidecarOptions
from service.sidecar.session_settings import SessionStats
from tests.service.interrupt import handlers_kept

ARGS = ["sidecar", "--worker-id", "w", "--redis-url", "redis://r", "--engine-url", "http://e"]
STOP = (signal.SIGTERM, signal.SIGINT)


@pytest.fixture
def returning_run(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A push run that returns at once, as one stopped by SIGTERM does; the handlers this process
    had are put back afterwards whatever the command did to them."""
    monkeypatch.setattr(launch, "run_push", lambda _: SessionStats())
    with handlers_kept(STOP):
        yield


@pytest.mark.usefixtures("returning_run")
def test_a_caller_running_the_command_in_its_own_process_still_hears_the_stop_signals() -> None:
    before = {sig: signal.getsignal(sig) for sig in STOP}
    app = typer.Typer()
    app.add_typer(typer.Typer(), name="bench")
    sidecar_command.register(app, typer.Typer())
    result = CliRunner().invoke(app, ARGS)
    assert result.exit_code == 0, result.output
    assert {sig: signal.getsignal(sig) for sig in STOP} == before


@pytest.mark.usefixtures("returning_run")
def test_the_console_script_ignores_the_stop_signals_once_the_run_has_returned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "argv", ["rollout-scheduler", *ARGS])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 0
    assert [signal.getsignal(sig) for sig in STOP] == [signal.SIG_IGN, signal.SIG_IGN]


@pytest.fixture
def returning_loop(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A push run whose loop starts, installs its handlers and returns at once, as one stopped by
    SIGTERM does; the handlers this process had are put back afterwards."""

    async def returns(self: runner.Sidecar, stop: object) -> SessionStats:
        return self.session.stats

    monkeypatch.setattr(runner.Sidecar, "run", returns)
    with handlers_kept(STOP):
        yield


@pytest.mark.usefixtures("returning_loop")
def test_a_push_run_that_returned_in_the_console_script_s_process_ignores_the_stop_signals_as_its_loop_closes(
    redis_url: str,
) -> None:
    """Its loop's close put the defaults back, and a SIGTERM before the command went deaf (the health
    server's stop, the loop's teardown) killed the process by the signal (-15)."""
    early_stop.arm()  # what the console script's entry does first
    launch.run_push(SidecarOptions(worker_id="w", redis_url=redis_url, engine_url="http://127.0.0.1:1"))
    assert [signal.getsignal(sig) for sig in STOP] == [signal.SIG_IGN, signal.SIG_IGN]


@pytest.mark.usefixtures("returning_loop")
def test_a_push_run_in_a_caller_s_own_process_leaves_the_stop_signals_heard(redis_url: str) -> None:
    launch.run_push(SidecarOptions(worker_id="w", redis_url=redis_url, engine_url="http://127.0.0.1:1"))
    assert signal.SIG_IGN not in [signal.getsignal(sig) for sig in STOP]


@pytest.mark.usefixtures("returning_loop")
def test_a_push_run_that_returned_never_puts_the_stop_signals_back_at_their_defaults(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the run's start to the process's end, no SIGTERM or SIGINT may meet its default: the
    loop's ``remove_signal_handler`` set it for a moment before the next line ignored it, and a
    stream of SIGTERMs a millisecond apart met it in a CI run (-15, no counters line). Every
    disposition the run sets is recorded; none is the default."""
    real = signal.signal
    set_after_start: list[object] = []

    def recording(sig: int, handler: Any) -> Any:
        if sig in STOP:
            set_after_start.append(handler)
        return real(sig, handler)

    early_stop.arm()
    monkeypatch.setattr(signal, "signal", recording)
    launch.run_push(SidecarOptions(worker_id="w", redis_url=redis_url, engine_url="http://127.0.0.1:1"))
    assert set_after_start  # the loop's handlers, then the ignoring
    assert signal.SIG_DFL not in set_after_start
    assert signal.default_int_handler not in set_after_start
