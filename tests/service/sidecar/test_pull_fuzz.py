"""Whatever a worker process sends the pull API that it must refuse (``pull_mutations``), the answer is
the one docs/sidecar.md gives it, never a 5xx, and nothing moves: not a key, value or expiry in Redis,
not a counter of the sidecar, not the lease the worker holds, which its corrected report then ends.

The app is served over ASGI without its lifespan, so no heartbeat runs between two looks at Redis: a
difference is the request's. Hypothesis's examples are synchronous; the app's loop runs in a thread
of its own (``LoopThread``), as one worker process's calls reach one sidecar.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from hypothesis import given, settings

from service.delivery.protocol import Delivery
from service.sidecar.pull_api import create_pull_app
from service.sidecar.session import WorkerSession
from tests.service.api.badinput import redis_snapshot
from tests.service.fuzz_runs import runs
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.pull_mutations import Refusal, refusals
from tests.service.sidecar.pullclient import asgi_client, report_body, session_of

OUTCOMES = ("stale", "unknown_schedule")  # a lease not held: the answer's outcome, not an error field


class LoopThread:
    """The pull API of ``session`` on an event loop in its own thread, called synchronously."""

    def __init__(self, session: WorkerSession) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.client = asgi_client(create_pull_app(session))

    def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request, answered."""
        request = self.client.request(method, path, **kwargs)
        return asyncio.run_coroutine_threadsafe(request, self.loop).result(timeout=60)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.client.aclose(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@dataclasses.dataclass
class Worker:
    """A worker holding one lease of a published schedule through the pull API."""

    api: LoopThread
    session: WorkerSession
    lease: dict[str, Any]
    delivery: Delivery

    def held(self) -> list[str]:
        """The keys of the leases the sidecar holds for the worker (read in place: a request is a
        sign of the worker's life, and ``GET /leases`` clears the list of those lost)."""
        return [h.lease.item.key for h in self.session.holdings.all()]


@pytest.fixture
def worker(redis_client: redis.Redis, redis_url: str) -> Iterator[Worker]:
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "fz", {"w0": [item("a", 0, 10), item("b", 0, 10)]}, lease_ttl_ms=600_000)
    session = session_of(redis_url, slots=1)  # one slot: a /next that got through would find it full
    api = LoopThread(session)
    lease = api.send("GET", "/next").json()
    yield Worker(api, session, lease, delivery)
    api.close()


def _refused_changing_nothing(worker: Worker, store: redis.Redis, refusal: Refusal) -> None:
    before = (redis_snapshot(store), dataclasses.asdict(worker.session.stats), worker.held())
    response = worker.api.send(refusal.method, refusal.path, content=refusal.content, headers=refusal.headers)
    assert response.status_code == refusal.status, (refusal, response.status_code, response.text[:300])
    answer = response.json()
    if refusal.says in OUTCOMES:
        assert answer["outcome"] == refusal.says, answer
        assert answer["error"], answer
    else:
        assert answer["error"].startswith(refusal.says), (refusal.says, answer["error"][:300])
    after = (redis_snapshot(store), dataclasses.asdict(worker.session.stats), worker.held())
    assert after == before, refusal


def _still_reportable(worker: Worker) -> None:
    """The lease survived every refusal: its corrected report is accepted, once."""
    done = worker.api.send("POST", "/done", json=report_body("done", worker.lease))
    assert (done.status_code, done.json()) == (200, {"outcome": "accepted"})
    assert [r.key for r in worker.delivery.read_results("fz")] == [worker.lease["key"]]


@pytest.mark.parametrize("examples", runs(80, 500))
def test_requests_the_pull_api_must_refuse_are_answered_as_documented_and_change_nothing(
    worker: Worker, redis_client: redis.Redis, examples: settings
) -> None:
    @examples
    @given(refusals(worker.lease))
    def answered(refusal: Refusal) -> None:
        _refused_changing_nothing(worker, redis_client, refusal)

    answered()
    _still_reportable(worker)
