"""The inbox's read in the background while its master does not answer (``service/sidecar/inbox.py``),
against a stand-in for the delivery whose answers the test gives: no Redis.

A claim takes the background read's answer only while it is the latest the session has: once a read
of its own answered (a claim with nothing known reads the inbox itself), a background read sent
before it says older news, and taken at the next outage it put back schedules the inbox had since
dropped and dropped those it had since gained (review65).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import cast

import pytest
import redis
from redis.exceptions import TryAgainError

from service.delivery.progress import ScheduleInfo
from service.delivery.protocol import Delivery
from service.delivery.reach import Reach
from service.sidecar import inbox
from service.sidecar.inbox import Inbox

KNOWN = {"a": ScheduleInfo("a", ("w",), 1, False, 30_000, 3, 1)}


class _Answers:
    """A delivery whose ``schedules_for`` runs the next of ``answers`` (in the read's thread)."""

    def __init__(self) -> None:
        self.answers: list[Callable[[], list[str]]] = []

    def schedules_for(self, worker_id: str) -> list[str]:
        return self.answers.pop(0)()


def _unserved() -> list[str]:
    raise TryAgainError("the inbox's slot is not served")  # one of a walk's ``catches``


def _held(sent: threading.Event, until: threading.Event, answer: list[str]) -> Callable[[], list[str]]:
    """An answer given only once ``until`` is set, ``sent`` set as it is asked: a read under way."""

    def answered() -> list[str]:
        sent.set()
        until.wait(10)
        return answer

    return answered


async def _settled(reads: Inbox) -> None:
    """Until the loop has taken the background read's end (its thread returned)."""
    for _ in range(500):
        asking = reads._asking
        if asking is None or asking.done():
            return
        await asyncio.sleep(0.01)


def test_a_background_read_older_than_an_answer_since_is_never_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """A background read under way as a read of the claims' own answers: the next outage's walk
    goes on from the known, and its next answer is a read sent then, not the older one."""
    monkeypatch.setattr(inbox, "RETRY_S", 0.0)
    delivery, reads, walk = _Answers(), Inbox(), Reach(redis.Redis())
    sent = cast(Delivery, delivery)
    asked, release = threading.Event(), threading.Event()
    old = _held(asked, release, ["old"])
    delivery.answers = [_unserved, old, lambda: ["a", "new"], _unserved, lambda: ["newer"]]

    async def claims() -> list[list[str] | None]:
        seen = [await reads.read(sent, "w", walk, KNOWN)]  # fails: the known walked
        seen.append(await reads.read(sent, "w", walk, KNOWN))  # the background read sent, held
        await asyncio.to_thread(asked.wait, 10)
        seen.append(await reads.read(sent, "w", walk, {}))  # nothing known: read here, answered
        release.set()
        await _settled(reads)
        seen.append(await reads.read(sent, "w", walk, KNOWN))  # the master down again
        seen.append(await reads.read(sent, "w", walk, KNOWN))  # a read sent now
        await _settled(reads)
        seen.append(await reads.read(sent, "w", walk, KNOWN))
        return seen

    assert asyncio.run(claims()) == [None, None, ["a", "new"], None, None, ["newer"]]


def test_a_claims_own_read_that_fails_leaves_the_background_read_to_be_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A claim with nothing known reads the inbox itself while a background read is under way; where
    its read fails (raised: nothing to walk), the background read is the latest news still, and the
    next claim that walks the known takes its answer rather than asking again ``RETRY_S`` later."""
    monkeypatch.setattr(inbox, "RETRY_S", 0.0)
    delivery, reads, walk = _Answers(), Inbox(), Reach(redis.Redis())
    sent = cast(Delivery, delivery)
    asked, release = threading.Event(), threading.Event()
    delivery.answers = [_unserved, _held(asked, release, ["a", "b"]), _unserved]

    async def claims() -> list[list[str] | None]:
        seen = [await reads.read(sent, "w", walk, KNOWN)]  # fails: the known walked
        seen.append(await reads.read(sent, "w", walk, KNOWN))  # the background read sent, held
        await asyncio.to_thread(asked.wait, 10)
        with pytest.raises(TryAgainError):
            await reads.read(sent, "w", walk, {})  # nothing known: read here, and it fails
        release.set()
        await _settled(reads)
        seen.append(await reads.read(sent, "w", walk, KNOWN))
        return seen

    assert asyncio.run(claims()) == [None, None, ["a", "b"]]
    assert reads.failing is None
    assert delivery.answers == []  # nothing asked again
