"""The early stop handler (``early_stop.arm``) in this process: a stop signal before the run makes both
stop signals ignored from then on, so a second one lands in an exit already under way; and one that
meets an exit the command decided (``early_stop.deciding``) changes nothing but that."""

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
    with early_stop.deciding(OSError):
        pass  # bound, nothing raised
    with pytest.raises(early_stop.StoppedBeforeRunError):
        _stopped_while_handling(OSError("retried"))
