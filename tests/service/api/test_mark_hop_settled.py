"""What the app's stop waits for of a ``POST /schedule``'s mark hop (``service/api/mark_hop.py``),
all in one registry (``mark_hop.TAKE_BACKS``, a ``service/api/settling.py`` ``Settling``).

The handler cancelled while its hop's thread still wrote the mark leaves the take-back to that
thread. It ran it itself, on the shared pool's thread, which no settle waited for: the stop could
close the Redis pool under it, and on a stalled Redis it held the exit through its retries (the
shared pool's threads are no daemons). Now it hands the take-back to a daemon in the registry, and
the write under way is in the registry too. Each test checks what a settle counts, never how long
anything took.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from service.api import mark_hop
from service.api.settling import Settling
from service.pipeline.in_flight import Mark
from tests.service.api.replicas import WAIT_S


@dataclass(frozen=True)
class _HeldMark(Mark):
    """A mark whose take-back waits for ``answered`` (a stalled Redis), naming the thread it ran on."""

    answered: threading.Event = field(default_factory=threading.Event)
    taken_on: list[threading.Thread] = field(default_factory=list)

    def release(self) -> None:
        """Record the thread, then wait for Redis to answer."""
        self.taken_on.append(threading.current_thread())
        self.answered.wait(WAIT_S)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Settling:
    """A registry of this test's own: leftovers of earlier tests are not counted."""
    settling = Settling("in-flight mark take-backs")
    monkeypatch.setattr(mark_hop, "TAKE_BACKS", settling)
    return settling


def _hop_writing(mark: Mark) -> tuple[mark_hop._Hop, threading.Thread, threading.Event]:
    """A hop whose thread is writing ``mark`` (held until the returned event is set)."""
    hop, writing, write = mark_hop._Hop(), threading.Event(), threading.Event()

    def take() -> Mark:
        writing.set()
        write.wait(WAIT_S)
        return mark

    thread = threading.Thread(target=hop.run, args=(take,), name="shared-pool-thread")
    thread.start()
    assert writing.wait(WAIT_S)
    return hop, thread, write


def test_a_mark_written_after_the_give_up_is_taken_back_on_a_daemon_the_stop_settles(
    registry: Settling,
) -> None:
    """Given up during the write, the hop's thread hands the take-back on and is free: the take-back
    runs on a daemon, and a settle cuts it while its Redis does not answer."""
    mark = _HeldMark(None, "s", "")
    hop, thread, write = _hop_writing(mark)
    assert hop.give_up() is None  # still being written: the thread takes it back
    write.set()
    thread.join(WAIT_S)
    cut = registry.settle(0.0, left_s=0.0)
    mark.answered.set()
    [taker] = mark.taken_on
    assert (thread.is_alive(), taker.name, taker.daemon, cut) == (False, "mark-given-up", True, 1)


def test_a_mark_still_being_written_as_the_stop_settles_is_counted_on_the_pool(registry: Settling) -> None:
    """The handler cancelled, its hop's write still on a stalled Redis as the stop settles: it is
    cut, so the app leaves its pool open to it, and nothing is cut once it ended."""
    mark = _HeldMark(None, "s", "")
    hop, thread, write = _hop_writing(mark)
    hop.give_up()
    cut = registry.settle(0.0, left_s=0.0)
    write.set()
    mark.answered.set()
    thread.join(WAIT_S)
    assert (cut, registry.settle(WAIT_S)) == (1, 0)
