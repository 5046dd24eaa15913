"""The early stop handler (``early_stop.arm``) in this process: a stop signal before the run makes both
stop signals ignored from then on, so a second one lands in an exit already under way; one that meets
an exit the command decided (``early_stop.deciding``) changes nothing but that; and a block left
decides nothing more."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from service.sidecar import early_stop


@pytest.fixture
def armed() -> Iterator[None]:
    """The early handlers in, this process's own given back after the test."""
    kept = {sig: signal.getsignal(sig) for sig in early_stop.STOP_SIGNALS}
    early_stop.arm()
    try:
        yield
    finally:
        _run_handlers_in()
        early_stop.arm()  # not armed: forgets a stop the test held
        for sig, handler in kept.items():
            signal.signal(sig, handler)


def _run_handlers_in() -> None:
    """What a command's run does once it starts: its own handlers replace the early ones."""
    for sig in early_stop.STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def _ignored() -> bool:
    return all(signal.getsignal(sig) is signal.SIG_IGN for sig in early_stop.STOP_SIGNALS)


@pytest.mark.usefixtures("armed")
def test_a_stop_before_the_run_leaves_both_stop_signals_ignored() -> None:
    with pytest.raises(early_stop.StoppedBeforeRunError) as stopped:
        signal.raise_signal(signal.SIGTERM)
    assert stopped.value.signal_name == "SIGTERM"
    assert _ignored()


def _taken_port_stopped_on_its_way_out() -> None:
    """A refusal that decides the exit, a stop signal landing in its ``finally``."""
    with early_stop.deciding(OSError):
        try:
            raise OSError("taken")
        finally:
            signal.raise_signal(signal.SIGINT)


@pytest.mark.usefixtures("armed")
def test_a_stop_that_meets_a_deciding_exit_leaves_that_exit_and_both_signals_ignored() -> None:
    with pytest.raises(OSError, match="taken"):
        _taken_port_stopped_on_its_way_out()
    assert _ignored()


def _stopped_while_handling(error: OSError) -> None:
    """A stop signal landing while ``error`` is handled, outside any ``deciding`` block."""
    try:
        raise error
    except OSError:
        signal.raise_signal(signal.SIGTERM)


@pytest.mark.usefixtures("armed")
def test_once_a_deciding_block_is_left_its_kinds_decide_nothing_more() -> None:
    """A stop that meets such an error afterwards, handled and retried, is held for the run
    (``early_stop.held``), as for any error that decides nothing: not taken as the exit's."""
    with early_stop.deciding(OSError):
        pass  # bound, nothing raised
    _stopped_while_handling(OSError("retried"))
    assert early_stop.held()
    assert early_stop.armed()  # not deaf: the run's own handlers hear the next one


@pytest.mark.usefixtures("armed")
def test_a_stop_held_before_a_command_armed_again_is_not_that_commands() -> None:
    """A stop held by an earlier command in this process (a test's run of one) is forgotten as the
    next command arms: its run does not stop at once for a signal it never got."""
    _stopped_while_handling(OSError("retried"))
    assert early_stop.held()
    _run_handlers_in()  # that command's run began
    early_stop.arm()
    assert not early_stop.held()


@pytest.mark.usefixtures("armed")
def test_a_stop_held_while_still_armed_is_kept_when_the_command_arms_again() -> None:
    """The console script arms before the command line's imports and the command arms again: a stop
    held in between is that command's, kept for its run to stop at once (chaos12's soak)."""
    _stopped_while_handling(OSError("retried"))
    early_stop.arm()
    assert early_stop.held()


WAIT_S = 30.0  # a bound against never: the pause a stop must cut


@pytest.mark.usefixtures("armed")
def test_a_stop_landing_in_a_starts_pause_stops_the_start_at_once() -> None:
    """The cluster's wait sleeps in the ``except`` of the try that failed: a stop then is not held
    through the sleep (a wait that may not end) but stops the start there."""
    timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        raise ConnectionError("no node answers")
    except ConnectionError:
        timer.start()
        with pytest.raises(early_stop.StoppedBeforeRunError):
            early_stop.pause(WAIT_S)
    finally:
        timer.cancel()
    assert _ignored()


def _refused_with_a_stop_in_its_except() -> None:
    """A refusal that decides the exit, a stop signal landing while it is handled."""
    with early_stop.deciding(OSError):
        try:
            raise OSError("taken")
        except OSError:
            signal.raise_signal(signal.SIGTERM)
            raise


@pytest.mark.usefixtures("armed")
def test_a_stop_while_a_deciding_error_is_handled_leaves_that_exit_and_both_signals_ignored() -> None:
    """The refusal is being handled (its ``except``, inside ``deciding``) as the stop lands: it is
    the exit, and the stop is not held for a run that will not come."""
    with pytest.raises(OSError, match="taken"):
        _refused_with_a_stop_in_its_except()
    assert (_ignored(), early_stop.held()) == (True, False)


def test_a_stop_held_where_the_early_handlers_are_gone_does_not_stop_a_pause() -> None:
    """Not armed (the handlers of a process that is not the console script's, or of a run that
    began): a held stop is the run's to act on, and a pause sleeps as asked."""
    kept = {sig: signal.getsignal(sig) for sig in early_stop.STOP_SIGNALS}
    early_stop.arm()
    try:
        _stopped_while_handling(OSError("retried"))
        assert early_stop.held()
        for sig, handler in kept.items():
            signal.signal(sig, handler)
        early_stop.pause(0.0)
    finally:
        early_stop.arm()  # forgets the held stop
        for sig, handler in kept.items():
            signal.signal(sig, handler)


def test_a_pause_with_no_stop_held_sleeps_as_long_as_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait between the cluster's tries is its sleep, not a spin of tries."""
    slept: list[float] = []
    monkeypatch.setattr(early_stop, "time", SimpleNamespace(sleep=slept.append))
    early_stop.pause(2.5)
    assert slept == [2.5]


@pytest.mark.usefixtures("armed")
def test_a_stop_held_before_a_pause_stops_the_start_there_and_leaves_both_signals_ignored() -> None:
    """Held while the failed try's error was handled, the stop is raised as the pause begins, and a
    second signal then lands in an exit already under way."""
    _stopped_while_handling(OSError("no node answers"))
    with pytest.raises(early_stop.StoppedBeforeRunError):
        early_stop.pause(WAIT_S)
    assert _ignored()
