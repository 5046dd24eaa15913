"""A sidecar stopped before its takeover has judged the presence key it found (a SIGTERM before the
takeover began, or during its wait on that key) writes no presence key and names no twin: the key
may be a dead process's still within its time-to-live, and only the wait would have told.

Found by chaos13's soak (docs/experiments.md, review50c): a sidecar SIGTERMed 1 s after its spawn
logged ``another live sidecar (instance ...) runs as worker h100-0`` about a predecessor that had
exited 0 less than a presence TTL before. Its takeover, stopped, went straight on to the presence
loop, whose first write (``SET ... GET``) found that key and called it a twin. Real valkey."""

from __future__ import annotations

import asyncio
import logging
import threading

import httpx
import pytest
import redis

from service.delivery.keys import sidecar_presence
from service.delivery.protocol import Delivery
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, WorkerSession
from service.sidecar.takeover import Takeover

GONE = "exited-instance"  # a predecessor that has exited, its key not lapsed yet
BOUND_S = 30.0  # a bound against never, for a loaded host: the stopped takeover ends in milliseconds


def _stopped_takeover(redis_url: str, stop_in_the_wait: bool) -> tuple[Takeover, bool]:
    """Run a takeover stopped before it began, or once it has read the key (its wait); whether
    its run returned within the bound (it is cancelled past it)."""
    takeover = Takeover(WorkerSession(Delivery.from_url(redis_url), Holdings(8), SessionSettings("w0")))
    read = threading.Event()
    present = takeover._present

    def reading() -> tuple[str | None, int]:
        try:
            return present()
        finally:
            read.set()

    takeover._present = reading  # type: ignore[method-assign]

    async def main() -> bool:
        stop = asyncio.Event()
        if not stop_in_the_wait:
            stop.set()
        task = asyncio.create_task(takeover.run(stop))
        while stop_in_the_wait and not read.is_set():
            await asyncio.sleep(0.01)
        stop.set()
        done, _ = await asyncio.wait({task}, timeout=BOUND_S)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return bool(done)

    return takeover, asyncio.run(main())


@pytest.mark.parametrize("stop_in_the_wait", [False, True], ids=["before", "in-the-wait"])
def test_a_takeover_stopped_before_it_judged_the_key_writes_none_and_names_no_twin(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture, stop_in_the_wait: bool
) -> None:
    redis_client.set(sidecar_presence("w0"), GONE, px=60_000)
    with caplog.at_level(logging.ERROR, logger="service.sidecar"):
        takeover, returned = _stopped_takeover(redis_url, stop_in_the_wait)
    assert not [r.getMessage() for r in caplog.records if "another live sidecar" in r.getMessage()]
    assert redis_client.get(sidecar_presence("w0")) == GONE
    assert takeover.done.is_set()  # claims are not held: the stop claims nothing anyway
    assert returned  # no presence loop: a stopped sidecar keeps no key fresh


def test_a_sidecar_stopped_before_its_first_claim_deletes_the_presence_key_it_wrote(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Its engine not ready yet, the sidecar has taken over and keeps its key, but has claimed
    nothing. Its graceful exit left that key for a presence TTL: it deleted the key only once a
    claim had reached Redis (``redis_up``), so the next process of this worker id waited on a
    dead one's key. Stopped in its wait, that process named it a twin, as in chaos13's soak."""

    def engine(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503)  # loading its weights: not ready

    session = WorkerSession(Delivery.from_url(redis_url), Holdings(8), SessionSettings("w0"))
    http = httpx.AsyncClient(transport=httpx.MockTransport(engine), base_url="http://engine")
    client = EngineClient(EngineOptions("http://engine", probe_timeout_s=0.2), http)
    settings = RunnerSettings(idle_poll_s=0.02, engine_wait_s=0.05, drain_timeout_s=5)
    sidecar = Sidecar(session, client, settings)
    key = sidecar_presence("w0")

    async def main() -> None:
        stop = asyncio.Event()
        running = asyncio.create_task(sidecar.run(stop))
        while await asyncio.to_thread(redis_client.get, key) != sidecar.takeover.instance:
            await asyncio.sleep(0.02)
        stop.set()
        await asyncio.wait_for(running, BOUND_S)
        await http.aclose()

    asyncio.run(main())
    assert session.stats.claimed == 0
    assert redis_client.get(key) is None
