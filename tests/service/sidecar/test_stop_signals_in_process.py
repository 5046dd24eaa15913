"""The sidecar ignores SIGTERM and SIGINT once its exit is decided (its run returned or raised, a flag
was refused) only where the command owns the process (the ``rollout-scheduler`` console script,
``service.cli.main``): a caller that runs the command in its own process (a test's ``CliRunner``, a
program that embeds the app) goes on hearing Ctrl-C and SIGTERM afterwards, where it had been left
deaf to both (a pytest run that could not be interrupted, an xdist worker that a SIGTERM no longer
stopped). After a run that raised (a loop's death, 70; a refusal, 2) the console script's process
kept the early handlers or the loop's defaults, and a SIGTERM in its exit ended it 0 or -15 in place
of its status. The exits a signal broke in a real sidecar are covered across processes by
``test_exit_signal_after_run``. Each test runs with SIGINT heard and with it ignored as the process
found it (``_sigint_as_started``)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from service import cli
from service.ports import free_port
from service.redis_conn import RedisRefusedError, RedisTooOldError
from service.sidecar import early_stop, launch, runner
from service.sidecar.launch import CannotListenError, SidecarOptions
from service.sidecar.session_settings import SessionStats
from service.sidecar.supervision import EXIT_LOOP_DIED, LoopDiedError
from tests.service.interrupt import handlers_kept
from tests.service.sidecar.command_run import ARGS, STOP, caller_app


@pytest.fixture(autouse=True, params=["SIGINT heard", "SIGINT ignored from the start"])
def _sigint_as_started(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test twice: in a process that hears SIGINT, and in one started with it ignored (a
    background job of a non-interactive shell, ``cmd &``, ``nohup``, a CI runner's step), where
    Python installs no KeyboardInterrupt handler and SIGINT is ``SIG_IGN`` from the start: a command
    run in-process gives back what it found, ``SIG_IGN`` too. Set here before the test's own fixtures
    record the handlers, the process's put back after.

    sidecar48 saw ``test_a_push_run_in_a_caller_s_own_process_leaves_the_stop_signals_heard`` fail
    once, SIGINT ``SIG_IGN`` after the run: that run's pytest had been started with SIGINT ignored,
    and the run rightly gave back what it found; the test now sets the signals heard before the run
    it checks (review48a). A whole pytest of this file in a child started with SIGINT ignored showed
    it (test_stop_signals_inherited), ~5 CPU-s a suite run for ~4 of pytest's start; the disposition
    a test meets is the same set here (ci59b)."""
    if request.param == "SIGINT heard":
        yield
        return
    with handlers_kept((signal.SIGINT,)):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        yield


def _run_push(redis_url: str) -> None:
    """A push run of worker ``w`` on ``redis_url`` (its engine never asked: the loop is the fixture's)."""
    launch.run_push(SidecarOptions(worker_id="w", redis_url=redis_url, engine_url="http://127.0.0.1:1"))


def _dispositions_set(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The console script's early handlers armed, as its entry does first; then each disposition set
    for SIGTERM or SIGINT from here on, recorded in the list returned as it is set."""
    real = signal.signal
    set_after_start: list[object] = []

    def recording(sig: int, handler: Any) -> Any:
        if sig in STOP:
            set_after_start.append(handler)
        return real(sig, handler)

    early_stop.arm()
    monkeypatch.setattr(signal, "signal", recording)
    return set_after_start


@pytest.fixture
def returning_run(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A push run that returns at once, as one stopped by SIGTERM does; the handlers this process
    had are put back afterwards whatever the command did to them."""
    monkeypatch.setattr(launch, "run_push", lambda *_: SessionStats())
    with handlers_kept(STOP):
        yield


@pytest.mark.usefixtures("returning_run")
def test_a_caller_running_the_command_in_its_own_process_still_hears_the_stop_signals() -> None:
    before = {sig: signal.getsignal(sig) for sig in STOP}
    result = CliRunner().invoke(caller_app(), ARGS)
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
    _run_push(redis_url)
    assert [signal.getsignal(sig) for sig in STOP] == [signal.SIG_IGN, signal.SIG_IGN]


def _heard() -> None:
    """Python's own handlers for both stop signals, as in a process started with neither ignored: a
    test run started with SIGINT ignored (a background job, ``nohup``) has it ``SIG_IGN`` from the
    start, which a caller's run rightly gives back (``_sigint_as_started``)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.mark.usefixtures("returning_loop")
def test_a_push_run_in_a_caller_s_own_process_leaves_the_stop_signals_heard(redis_url: str) -> None:
    _heard()  # the fixture puts back what the process had
    _run_push(redis_url)
    assert signal.SIG_IGN not in [signal.getsignal(sig) for sig in STOP]


@pytest.mark.usefixtures("returning_loop")
def test_a_push_run_that_returned_never_puts_the_stop_signals_back_at_their_defaults(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the run's start to the process's end, no SIGTERM or SIGINT may meet its default: the
    loop's ``remove_signal_handler`` set it for a moment before the next line ignored it, and a
    stream of SIGTERMs a millisecond apart met it in a CI run (-15, no counters line). Every
    disposition the run sets is recorded; none is the default."""
    set_after_start = _dispositions_set(monkeypatch)
    _run_push(redis_url)
    assert set_after_start  # the loop's handlers, then the ignoring
    assert signal.SIG_DFL not in set_after_start
    assert signal.default_int_handler not in set_after_start


# a run that raised, and the status the command exits with for it
RAISED: dict[str, tuple[BaseException, int]] = {
    "loop-died": (LoopDiedError("heartbeat loop", ZeroDivisionError("division by zero")), EXIT_LOOP_DIED),
    "refused": (RedisRefusedError("Redis at r refused our credentials"), 2),
    "too-old": (RedisTooOldError("Redis at r is 6.0, older than 7.0"), 2),
    "port-taken": (CannotListenError(98, "Address already in use"), 2),
}


def _raising(error: BaseException) -> Any:
    """A run (either mode's) that raises ``error``."""

    def run(_: SidecarOptions, __: SessionStats | None = None) -> SessionStats:
        raise error

    return run


def _console_script_exit() -> tuple[object, list[object]]:
    """Run the console script's entry on ``sys.argv``: its exit status, and the stop signals'
    handlers it left (this process's own put back after)."""
    with handlers_kept(STOP):
        try:
            cli.main()
        except SystemExit as exited:
            return exited.code, [signal.getsignal(sig) for sig in STOP]
    pytest.fail("the command returned without an exit status")


@pytest.mark.parametrize("mode", ["push", "pull"])
@pytest.mark.parametrize("name", RAISED)
def test_the_console_script_ignores_the_stop_signals_once_the_run_has_raised(
    name: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    error, status = RAISED[name]
    monkeypatch.setattr(launch, f"run_{mode}", _raising(error))
    # a free port, not a fixed one: a pytest of this file run beside the suite's (an xdist worker of
    # its own) answered "already in use" (exit 2) on 8011 under load
    argv = [*ARGS[:-2], "--pull-api", str(free_port())] if mode == "pull" else ARGS  # no --engine-url
    monkeypatch.setattr(sys, "argv", ["rollout-scheduler", *argv])
    exited, after = _console_script_exit()
    assert exited == status
    assert after == [signal.SIG_IGN, signal.SIG_IGN]


def test_the_console_script_ignores_the_stop_signals_once_a_flag_was_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "argv", ["rollout-scheduler", *ARGS, "--idle-poll", "0"])
    exited, after = _console_script_exit()
    assert exited == 2
    assert after == [signal.SIG_IGN, signal.SIG_IGN]


@pytest.mark.parametrize("name", RAISED)
def test_a_caller_running_the_command_keeps_its_handlers_after_a_run_that_raised(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    error, status = RAISED[name]
    monkeypatch.setattr(launch, "run_push", _raising(error))
    with handlers_kept(STOP):
        before = {sig: signal.getsignal(sig) for sig in STOP}
        result = CliRunner().invoke(caller_app(), ARGS)
        after = {sig: signal.getsignal(sig) for sig in STOP}
    assert result.exit_code == status, result.output
    assert after == before


@pytest.fixture
def raising_loop(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[None]:
    """A push run whose loop starts, installs its handlers and raises the parameter's error at once,
    as a loop's death or a Redis found too old does; this process's handlers put back afterwards."""
    error = RAISED[request.param][0]

    async def raises(self: runner.Sidecar, stop: object) -> SessionStats:
        raise error

    monkeypatch.setattr(runner.Sidecar, "run", raises)
    with handlers_kept(STOP):
        yield


@pytest.mark.parametrize("raising_loop", ["loop-died", "too-old"], indirect=True)
@pytest.mark.usefixtures("raising_loop")
def test_a_push_run_that_raised_never_puts_the_stop_signals_back_at_their_defaults(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its loop's close put the defaults back (the command went deaf only after a run that returned),
    and a SIGTERM in the exit that followed ended the process -15, not 70 or 2."""
    set_after_start = _dispositions_set(monkeypatch)
    with pytest.raises((LoopDiedError, RedisTooOldError)):
        _run_push(redis_url)
    assert set_after_start  # the relay's handlers, then the ignoring
    assert signal.SIG_DFL not in set_after_start
    assert signal.default_int_handler not in set_after_start
    assert [signal.getsignal(sig) for sig in STOP] == [signal.SIG_IGN, signal.SIG_IGN]
