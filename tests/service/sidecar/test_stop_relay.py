"""Push mode's stop relay (``service/sidecar/stop_relay.py``): a stop signal reaches the run through
its event loop, even one caught by another thread while the loop sleeps with nothing to wake it; and
however the run ends, returned or raised, the signals are then what the command asks, never their
defaults: ignored in the console script's process, as found in a caller's own."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Iterator

import pytest

from service.sidecar import stop_relay
from tests.service.interrupt import handlers_kept

STOP = (signal.SIGTERM, signal.SIGINT)
GUARD_S = 30.0  # a relay that never hands the signal on fails the test by then, not hangs it


@pytest.fixture(autouse=True)
def stop_handlers() -> Iterator[None]:
    """This process's SIGTERM and SIGINT handlers, put back whatever a test did to them."""
    with handlers_kept(STOP):
        yield


async def _told_of(sig: signal.Signals) -> list[str]:
    """Relay the stop signals, send ``sig`` to this process and return what the run was told."""
    heard: list[str] = []
    told = asyncio.Event()

    def on_signal() -> None:
        heard.append("stop")
        told.set()

    with stop_relay.relayed(asyncio.get_running_loop(), on_signal, deaf=False):
        os.kill(os.getpid(), sig)
        await asyncio.wait_for(told.wait(), GUARD_S)
    return heard


@pytest.mark.parametrize("sig", STOP, ids=lambda sig: sig.name)
def test_a_stop_signal_reaches_the_run_through_the_loop_once(sig: signal.Signals) -> None:
    assert asyncio.run(_told_of(sig)) == ["stop"]


@pytest.mark.parametrize("sig", STOP, ids=lambda sig: sig.name)
def test_a_signal_another_thread_catches_wakes_a_loop_that_has_nothing_to_wait_for(
    sig: signal.Signals,
) -> None:
    """A process's signal may be delivered to any of its threads (the health server's, an executor's):
    the interpreter runs Python handlers in the main thread only, at its next instruction, so a loop
    asleep in its selector with no timer would not run one; the wakeup fd is what wakes it."""

    async def woken() -> bool:
        loop = asyncio.get_running_loop()
        told: asyncio.Future[bool] = loop.create_future()  # no timer anywhere: only an fd wakes it
        caught = threading.Event()

        def on_signal() -> None:
            if not told.done():
                told.set_result(True)

        def sender() -> None:
            signal.pthread_kill(threading.get_ident(), sig)  # to this thread, not the main one
            if not caught.wait(GUARD_S):
                loop.call_soon_threadsafe(told.cancel)

        with stop_relay.relayed(loop, on_signal, deaf=False):
            thread = threading.Thread(target=sender)
            thread.start()
            try:
                return await told
            finally:
                caught.set()
                thread.join()

    assert asyncio.run(woken())


@pytest.mark.parametrize("deaf", [True, False], ids=["console", "caller"])
@pytest.mark.parametrize("ends", ["returned", "raised"])
def test_however_the_run_ends_the_signals_are_left_ignored_or_as_found_never_at_their_defaults(
    deaf: bool, ends: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = {sig: signal.getsignal(sig) for sig in STOP}
    real = signal.signal
    set_for_stop: list[object] = []

    def recording(sig: int, handler: object) -> object:
        if sig in STOP:
            set_for_stop.append(handler)
        return real(sig, handler)  # type: ignore[arg-type]

    async def run() -> None:
        with stop_relay.relayed(asyncio.get_running_loop(), lambda: None, deaf=deaf):
            if ends == "raised":
                raise ZeroDivisionError  # a loop's death, a refusal

    monkeypatch.setattr(signal, "signal", recording)
    with pytest.raises(ZeroDivisionError) if ends == "raised" else contextlib.nullcontext():
        asyncio.run(run())  # its close included
    monkeypatch.undo()
    expected = dict.fromkeys(STOP, signal.SIG_IGN) if deaf else found
    assert {sig: signal.getsignal(sig) for sig in STOP} == expected
    if deaf:
        assert signal.SIG_DFL not in set_for_stop
        assert signal.default_int_handler not in set_for_stop


def test_the_wakeup_fd_is_given_back_as_found_once_the_run_is_over() -> None:
    """The interpreter keeps one wakeup fd; the relay's socket pair is closed once the run is over."""
    found = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(found)
    assert asyncio.run(_told_of(signal.SIGTERM)) == ["stop"]
    assert signal.set_wakeup_fd(found) == found
