"""The stop relay (``service/sidecar/stop_relay.py``) hands the run SIGTERM and SIGINT only (the
interpreter's wakeup fd carries a byte for every signal with a Python handler: a profiler's SIGPROF,
an operator's SIGUSR1 for a dump), and leaves a caller's process as it found it: its own wakeup fd,
a loop that no longer watches the relay's closed fds, a handler Python did not install given back as
the default. Kills mutants that survived round 46's tests (helper mutants10, docs/experiments.md)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Iterator

import pytest

from service.sidecar import stop_relay
from tests.service.interrupt import handlers_kept

GUARD_S = 30.0  # a relay that never hands the stop on fails the test by then, not hangs it


@pytest.fixture(autouse=True)
def handlers() -> Iterator[None]:
    """This process's handlers of the signals sent here, put back whatever a test did to them."""
    with handlers_kept((signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)):
        yield


def test_another_signal_with_a_python_handler_is_no_stop() -> None:
    """SIGUSR1 then SIGTERM, both written to the wakeup fd before the loop reads it: one stop."""
    heard: list[str] = []
    usr1: list[int] = []

    async def run() -> None:
        told = asyncio.Event()

        def on_signal() -> None:
            heard.append("stop")
            told.set()

        with stop_relay.relayed(asyncio.get_running_loop(), on_signal, deaf=False):
            signal.signal(signal.SIGUSR1, lambda signum, frame: usr1.append(signum))
            os.kill(os.getpid(), signal.SIGUSR1)
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(told.wait(), GUARD_S)
            for _ in range(3):  # any byte left is read by now
                await asyncio.sleep(0)

    asyncio.run(run())
    assert (heard, usr1) == (["stop"], [signal.SIGUSR1])


def test_a_wakeup_fd_found_set_is_given_back() -> None:
    """A caller's own wakeup fd (an embedding loop's) is the interpreter's again once the run is over."""
    receive, send = socket.socketpair()
    with receive, send:
        send.setblocking(False)
        found = signal.set_wakeup_fd(send.fileno())
        try:
            asyncio.run(_stopped_once())
            assert signal.set_wakeup_fd(found) == send.fileno()
        finally:
            signal.set_wakeup_fd(found)


def test_the_loop_watches_a_new_socket_on_the_relay_s_fd_after_the_run() -> None:
    """The relay's socket pair closed, its fd numbers are the next opened ones: the loop must have
    forgotten its reader of them, or a reader added for the new socket is never woken."""

    async def run() -> bytes:
        await _stopped_once()
        receive, send = socket.socketpair()
        with receive, send:
            receive.setblocking(False)
            loop = asyncio.get_running_loop()
            woken: asyncio.Future[bytes] = loop.create_future()

            def read() -> None:
                if not woken.done():
                    woken.set_result(receive.recv(1))

            loop.add_reader(receive.fileno(), read)
            try:
                send.send(b"x")
                return await asyncio.wait_for(woken, GUARD_S / 3)
            finally:
                loop.remove_reader(receive.fileno())

    assert asyncio.run(run()) == b"x"


def test_a_handler_python_did_not_install_is_given_back_as_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``getsignal`` says None for a handler installed outside Python (an embedding program's): the
    most that can be restored of it is the default, never ignoring the signal in a caller's process."""
    getsignal = signal.getsignal
    monkeypatch.setattr(signal, "getsignal", lambda sig: None if sig == signal.SIGTERM else getsignal(sig))
    asyncio.run(_stopped_once())
    monkeypatch.undo()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


async def _stopped_once() -> None:
    """Relay the stop signals (``deaf`` false: a caller's process) and hear one SIGINT."""
    told = asyncio.Event()
    with stop_relay.relayed(asyncio.get_running_loop(), told.set, deaf=False):
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.wait_for(told.wait(), GUARD_S)
