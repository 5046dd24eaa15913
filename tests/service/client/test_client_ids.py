"""A schedule id the service would refuse is refused by the client before it sends anything
(``ValueError`` naming ``schedule_id``), never read as another path: an id with ``#``, ``?`` or ``/``
was sent as is, and ``step#1`` was ``GET /schedule/step``, step's progress, results or cancel,
silently (``/`` stays a separator even percent-encoded: the server decodes the path to route it)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
import redis

from service.client import SchedulerAPIError, SchedulerClient
from service.settings import Settings
from tests.service.api_helpers import LiveServer, batch_body

CALLS: dict[str, Callable[[SchedulerClient, str], object]] = {
    "progress": lambda client, sid: client.progress(sid, outage_s=0),
    "results": lambda client, sid: client.results(sid, outage_s=0),
    "cancel": lambda client, sid: client.cancel(sid, outage_s=0),
    "wait": lambda client, sid: client.wait(sid, timeout_s=5, outage_s=0),
}


@pytest.fixture(scope="module")
def service(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One service for the module's tests: what they check is the client's, which refuses an id before
    it sends anything; a service started per test cost each its app and server (apici58)."""
    settings = Settings(redis_url=redis_url, model_dir=str(tmp_path_factory.mktemp("models")))
    with LiveServer(settings) as server:
        yield server


@pytest.fixture
def trainer(service: LiveServer, redis_client: redis.Redis) -> Iterator[SchedulerClient]:
    """A trainer's client of the module's service, on a Redis flushed for the test (``redis_client``)."""
    with SchedulerClient(service.url) as client:
        yield client


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("suffix", ["#1", "?after=0-0", "/results", "%2F", " ", "/../../models"])
def test_an_id_with_a_url_delimiter_is_refused_not_read_as_another_schedule(
    trainer: SchedulerClient, name: str, suffix: str
) -> None:
    trainer.schedule(batch_body(prompts=1, n=1, schedule_id="step"))
    words = f"{suffix[0]!r} (character 4) is not allowed: an id holds only ASCII letters, digits and _ . : -"
    with pytest.raises(ValueError, match=f"^schedule_id='step{re.escape(suffix)}': {re.escape(words)}$"):
        CALLS[name](trainer, f"step{suffix}")
    assert trainer.progress("step").cancelled == 0  # the cancel reached no other schedule


def test_an_id_the_service_takes_is_sent_as_is(trainer: SchedulerClient) -> None:
    trainer.schedule(batch_body(prompts=1, n=1, schedule_id="run-1:step_2.0"))
    assert trainer.progress("run-1:step_2.0").total == 1
    with pytest.raises(SchedulerAPIError) as unknown:
        trainer.progress("run-1:step_3.0", outage_s=0)
    assert unknown.value.status == 404
