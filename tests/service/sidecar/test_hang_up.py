"""After the sidecar hangs up Redis at its shutdown (``service/sidecar/hang_up.py``) no call waits on it.

The hang-up used to close the connections and nothing more: the calls waiting then failed at once, but
a call made after it opened a new connection, which a stalled server (SIGSTOPped here: connections
accepted, nothing answered) never answers, and its thread held the process's exit one socket timeout
past the drain's promise. On a cluster even the calls waiting at the hang-up asked the nodes for the
slot map again, on new connections, for two socket timeouts. Each later call is now refused unsent.

The client's socket timeout is set long here (``SOCKET_TIMEOUT_S``) and each call is bounded by half
of it: a refused call takes no time at all, one that waits takes the whole timeout, at any load.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from service.delivery.hangable import hangable, hangable_cluster
from service.delivery.outcomes import CompletionOutcome
from service.delivery.protocol import Delivery
from service.delivery.stored import REPLY_DECODING
from service.embedded import EmbeddedServer
from service.ports import free_port
from service.sidecar.hang_up import HungUpError, hang_up
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.cluster import one_node_cluster
from tests.service.finished import RESULT
from tests.service.sidecar.procs import item, publish

SOCKET_TIMEOUT_S = 30.0  # what a call on a stalled server waits for; a refused one, nothing
BOUND_S = SOCKET_TIMEOUT_S / 2


@pytest.fixture(params=["plain", "cluster"])
def stalled(request: pytest.FixtureRequest) -> Iterator[tuple[EmbeddedServer, Delivery]]:
    """A server (a plain one, or a cluster of one node) and a ``Delivery`` on it whose socket timeout
    is ``SOCKET_TIMEOUT_S``; the test SIGSTOPs the server, which is resumed and stopped after it."""
    if request.param == "plain":
        server = EmbeddedServer().start()
        client: Any = hangable(server.url, socket_timeout=SOCKET_TIMEOUT_S, **REPLY_DECODING)
    else:
        port = free_port()
        server = one_node_cluster(port)
        url = f"redis://127.0.0.1:{port}"
        client = hangable_cluster(url, socket_timeout=SOCKET_TIMEOUT_S, **REPLY_DECODING)
    try:
        yield server, Delivery(client)
    finally:
        server.signal(signal.SIGCONT)
        server.stop()


def _took(call: Callable[[], object]) -> tuple[float, BaseException | None]:
    """Seconds ``call`` took in a thread of its own (as the sidecar's calls run), and what it raised;
    ``BOUND_S`` twice over when it is still waiting then (the thread is left to its socket timeout)."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as error:
            raised.append(error)

    began = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(2 * BOUND_S)
    took = time.monotonic() - began
    return took, raised[0] if raised else None


def test_each_call_after_the_hang_up_is_refused_unsent_while_redis_is_stalled(
    stalled: tuple[EmbeddedServer, Delivery],
) -> None:
    """A command on a pooled connection, a pipeline built before the hang-up (the takeover's presence
    read) and a script call each fail at once, where each waited out the socket timeout: refused
    (``HungUpError``), on a cluster too (its client is left open, its nodes' connections refuse)."""
    server, delivery = stalled
    delivery.schedules_for("w0")  # a connection in the pool
    pipe = delivery.client.pipeline(transaction=False)
    pipe.get("presence")
    server.signal(signal.SIGSTOP)
    hang_up(delivery)
    calls: dict[str, Callable[[], object]] = {
        "command": lambda: delivery.schedules_for("w0"),
        "pipeline": pipe.execute,
        "script": lambda: delivery.reap("s"),
    }
    for what, call in calls.items():
        took, raised = _took(call)
        assert took < BOUND_S, f"{what} waited {took:.1f}s on the stalled server"
        assert isinstance(raised, HungUpError), f"{what}: {raised!r}"


def test_a_call_waiting_on_the_stalled_server_at_the_hang_up_ends_with_it(
    stalled: tuple[EmbeddedServer, Delivery],
) -> None:
    """The call the hang-up was made for: it fails now, not at its socket timeout. On a cluster it
    did not: the client took the dropped connection for a moved slot map and asked the node for it
    again on new connections, two socket timeouts."""
    server, delivery = stalled
    delivery.schedules_for("w0")
    server.signal(signal.SIGSTOP)
    began = time.monotonic()
    outcome: list[tuple[float, BaseException | None]] = []
    waiting = threading.Thread(target=lambda: outcome.append(_took(lambda: delivery.schedules_for("w0"))))
    waiting.start()
    time.sleep(0.3)  # sent, and waiting (or, on a loaded host, not sent yet: refused then)
    hang_up(delivery)
    waiting.join(2 * BOUND_S)
    assert outcome, f"still waiting {time.monotonic() - began:.1f}s after the call"
    took, raised = outcome[0]
    assert took < BOUND_S, f"waited {took:.1f}s on the stalled server"
    # Where the cluster client's retry meets the refusal decides its error: a RedisError, or (on a
    # loaded host, the refusal met while it routes again) its RedisClusterException, no RedisError.
    assert isinstance(raised, (redis.RedisError, redis.RedisClusterException)), repr(raised)


def test_a_report_after_the_hang_up_is_not_sent_nor_retried_as_an_outage(redis_url: str) -> None:
    """Redis answers, yet a completion made after the hang-up is refused at once: not sent (the item
    stays leased, left to lapse), and not retried through the session's outage window (60 s), which
    retries what a dropped connection fails with."""
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "late", {"w0": [item("a", 0, 10)]}, lease_ttl_ms=30_000)
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(1), SessionSettings("w0"))

    async def completed_after_the_hang_up() -> CompletionOutcome:
        (held,) = await session.claim(1)
        hang_up(session.delivery)
        return await session.complete(held, RESULT)

    began = time.monotonic()
    with pytest.raises(HungUpError):
        asyncio.run(completed_after_the_hang_up())
    assert time.monotonic() - began < session.settings.retry_for_s / 2
    assert delivery.progress("late").running == 1  # not completed: its lease lapses, and it is requeued


def test_hanging_up_one_client_leaves_another_of_the_same_process_answering(redis_url: str) -> None:
    """Each client refuses by a connection class of its own: a pull sidecar's sessions, or a test's
    clients, do not hang up together."""
    hung, other = Delivery.from_url(redis_url), Delivery.from_url(redis_url)
    other.schedules_for("w0")
    hang_up(hung)
    with pytest.raises(HungUpError):
        hung.schedules_for("w0")
    assert isinstance(other.schedules_for("w0"), list)


def test_a_client_that_cannot_refuse_is_not_hung_up_as_if_it_could(redis_url: str) -> None:
    """A client built without ``hangable``'s connection class would only be closed, and a later call
    would wait on a stalled server: ``hang_up`` names its class instead of passing in silence."""
    plain = Delivery(redis.Redis.from_url(redis_url, **REPLY_DECODING))
    with pytest.raises(TypeError, match=r"connection_class=redis\.connection\.Connection"):
        hang_up(plain)
