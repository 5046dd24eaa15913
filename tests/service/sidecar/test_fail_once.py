"""A failure report whose answer was lost, sent again, ends its lease once: ``failed``, never ``lost``,
and its item spends one attempt.

The server is SIGSTOPped while the report is on the wire: the client's socket times out (no answer),
and the server, resumed, runs the command it had buffered: the failure landed, its answer lost. Redis
kept no record of which token's failure it took (``P:tried`` names workers), and a landed failure
and a lapse left the same item record, so the sidecar counted such a lease ``lost`` (push at once;
pull when the heartbeat found it gone, and the worker's retried ``/fail`` was told ``stale``).
``release.lua`` now records the token (``P:failed``) and answers a repeat DUPLICATE: push keeps the
report and sends it again at the next heartbeat (``resends.py``), pull keeps the lease held for the
worker's retry and the heartbeat that finds it gone first sends it again, and either counts
``failed`` once.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import httpx
import pytest
import redis

from service.delivery.hangable import hangable
from service.delivery.keys import schedule_keys
from service.delivery.protocol import Delivery
from service.delivery.scripts import script_source
from service.delivery.stored import REPLY_DECODING
from service.embedded import EmbeddedServer
from service.sidecar.holdings import Holdings
from service.sidecar.pull_state import PullState
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.lease_ends import ends_of
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pullclient import report_body, serve, until

SOCKET_TIMEOUT_S = 2.0  # what a call on the stopped server waits before its answer counts as lost


def _session(server: EmbeddedServer) -> WorkerSession:
    """One worker ``w0`` whose retry window is over at the first lost answer. Its failure script is
    loaded up front, as a long-lived sidecar's is: the EVALSHA the stopped server buffers would
    otherwise be answered NOSCRIPT on resume, and nothing would land."""
    client = hangable(server.url, socket_timeout=SOCKET_TIMEOUT_S, **REPLY_DECODING)
    client.script_load(script_source("release"))
    return WorkerSession(Delivery(client), Holdings(1), SessionSettings("w0", retry_for_s=0.0))


def _record(server: EmbeddedServer) -> str:
    """The item's record in ``P:st``: ``state|token|attempts|...``."""
    client = redis.Redis.from_url(server.url, decode_responses=True)
    return str(client.hget(schedule_keys("s").st, "a#0") or "")


def _landed(server: EmbeddedServer) -> bool:
    """Whether the resumed server ran the failure it had buffered: the item is queued again."""
    return _record(server).startswith("q|")


def _attempts_spent(server: EmbeddedServer) -> tuple[int, int]:
    """(attempts the item spent, its queued count): the record's third field, and progress."""
    return int(_record(server).split("|")[2]), Delivery.from_url(server.url).progress("s").queued


def test_a_push_failure_report_whose_answer_was_lost_counts_failed_once_at_the_next_heartbeat(
    server: EmbeddedServer,
) -> None:
    """Before: ``lost`` at once, the report dropped (``{'lost': 1}``)."""
    publish(Delivery.from_url(server.url), "s", {"w0": [item("a", 0, 10)]}, 600_000)
    session = _session(server)

    async def run() -> list[Any]:
        (held,) = await session.claim(1)
        server.signal(signal.SIGSTOP)
        with pytest.raises(redis.RedisError):
            await session.fail(held, "engine refused it")
        server.signal(signal.SIGCONT)
        await until(lambda: _landed(server), "the resumed server ran the buffered failure")
        unanswered = [ends_of(session.stats), len(session.holdings), len(session.resends)]
        await session.heartbeat()  # nothing held: the kept report is sent again, answered DUPLICATE
        return [unanswered, ends_of(session.stats), len(session.resends)]

    assert asyncio.run(run()) == [[{}, 0, 1], {"failed": 1}, 0]
    assert session.stats.claimed == 1
    assert _attempts_spent(server) == (1, 1)


@pytest.mark.parametrize("first", ["retry", "beat"])
def test_a_pull_fail_whose_answer_was_lost_counts_failed_once_whichever_resend_comes_first(
    server: EmbeddedServer, first: str
) -> None:
    """The worker's ``/fail`` is answered 503 (Redis silent); Redis back, its retry or the next beat
    sends it again and is answered DUPLICATE: ``failed``, and the other is told ``duplicate`` and
    counts nothing. Before: the beat found the lease gone (``lost``), or the retry was refused
    (``stale``), and then the beat counted it ``lost`` too."""
    publish(Delivery.from_url(server.url), "s", {"w0": [item("a", 0, 10)]}, 600_000)
    session = _session(server)

    async def script(worker: httpx.AsyncClient, state: PullState) -> list[Any]:
        lease = (await worker.get("/next")).json()
        server.signal(signal.SIGSTOP)
        unanswered = (await worker.post("/fail", json=report_body("fail", lease))).status_code
        server.signal(signal.SIGCONT)
        await until(lambda: _landed(server), "the resumed server ran the buffered failure")
        if first == "beat":
            await state.beat()
        retried = (await worker.post("/fail", json=report_body("fail", lease))).json()
        await state.beat()
        leases = (await worker.get("/leases")).json()
        return [unanswered, retried["outcome"], leases["held"], len(session.holdings)]

    assert serve(session, script) == [503, "duplicate", [], 0]
    assert (session.stats.claimed, ends_of(session.stats)) == (1, {"failed": 1})
    assert _attempts_spent(server) == (1, 1)
