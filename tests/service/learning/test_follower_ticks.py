"""What a follower's tick answers and when its first listing of the store comes, on a stand-in for the
model service (``Follower`` calls only its ``follow`` and ``reload``): ``follow_once`` says what that
tick folded, 0 for a tick that failed whatever the last one folded; the first tick lists the store
whatever the clock reads; ``stop`` says whether the tick in flight ended.

Found by mutation testing (mutants14, docs/experiments.md): each was removable with every follower
test passing."""

from __future__ import annotations

import threading
from typing import cast

from service.learning.follower import Follower
from service.learning.models import ModelService

BOUND_S = 30.0  # a bound for a thread on a loaded host, not a speed


class _Models:
    """``ModelService``'s side the follower calls: each follow answers the next of ``folds`` (or raises
    it), each reload is counted."""

    def __init__(self, *folds: int | Exception) -> None:
        self.folds = list(folds)
        self.reloads = 0
        self.followed = False
        self.following = threading.Event()
        self.threads: list[threading.Thread] = []
        self.go_on = threading.Event()
        self.go_on.set()

    def follow(self) -> int:
        self.threads.append(threading.current_thread())
        self.following.set()
        assert self.go_on.wait(BOUND_S)
        fold = self.folds.pop(0)
        if isinstance(fold, Exception):
            raise fold
        return fold

    def reload(self) -> bool:
        self.reloads += 1
        return False


def _follower(models: _Models, clock: float = 100.0, every_s: float = 60.0) -> Follower:
    return Follower(cast(ModelService, models), every_s=every_s, clock=lambda: clock)


def test_a_tick_says_what_it_folded_and_a_failed_one_says_nothing_was() -> None:
    follower = _follower(_Models(7, ConnectionError("down"), 0))
    assert follower.follow_once() == 7
    assert follower.follow_once() == 0  # not the 7 the tick before folded
    assert follower.follow_once() == 0


def test_the_first_tick_lists_the_store_whatever_the_clock_reads() -> None:
    models = _Models(0)
    _follower(models, clock=0.0).follow_once()
    assert models.reloads == 1


def test_stop_says_whether_the_tick_in_flight_ended() -> None:
    models = _Models(3)
    models.go_on.clear()
    follower = _follower(models, every_s=0.01).start()
    assert models.followed  # requests leave the reload to it
    assert models.following.wait(BOUND_S)
    assert follower.stop(timeout_s=0.0) is False  # its tick still in flight
    models.go_on.set()
    models.threads[0].join(BOUND_S)
    assert not models.threads[0].is_alive()  # halted: no tick after the one in flight
    assert models.folds == []
