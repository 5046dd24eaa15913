"""Where Python cannot read SIGINT's handler (``signal.getsignal`` says None: one set outside Python,
as an embedding program may), ``remembered_sigint`` leaves Python's own Ctrl-C handler behind it, so
a Ctrl-C after the block still raises KeyboardInterrupt: the default action (``SIG_DFL``) would end
the process with no ``finally`` run (mutation testing, helper mutants63)."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from service.interrupts import remembered_sigint
from tests.service.interrupt import handlers_kept


@pytest.fixture(autouse=True)
def sigint_kept() -> Iterator[None]:
    with handlers_kept([signal.SIGINT]):
        yield


def test_a_block_entered_with_an_unreadable_handler_leaves_python_s_ctrl_c_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # whatever was there: the block must not keep it
    monkeypatch.setattr(signal, "getsignal", lambda _signum: None)  # what service.interrupts reads
    with remembered_sigint():
        pass
    monkeypatch.undo()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
