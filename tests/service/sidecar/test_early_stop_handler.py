"""The early stop handler (``early_stop.arm``) in this process: a stop signal before the run makes both
stop signals ignored from then on, so a second one lands in an exit already under way; one that meets
an exit the command decided (``early_stop.deciding``) changes nothing but that; and a block left
decides nothing more."""

from __future__ import annotations

import signal
from collections.abc import Iterator

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
        early_stop.arm()  # forgets a stop the test held
        for sig, handler in kept.items():
            signal.signal(sig, handler)


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
