"""A publish while the Redis Cluster master holding one worker's inbox is down (its process killed:
connection refused), the schedule's master and the active index's answering (a real cluster,
``cluster-require-full-coverage no``).

The announce was one pipeline for every index: the dead master's connection failed it whole, so the
stored schedule reached no inbox and not the reapers' index, the other workers' sidecars never
learned it, and only a client's retry once that master was back announced it (announce64,
docs/experiments.md). Now each node's indexes are sent apart (``DeliveryIndexes._announce``): the
publish still raises that node's error (a 503, the retry repairs the missed inbox), the rest
announced.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from service.delivery import Delivery, keys
from service.delivery.errors import IndexNodeDown
from tests.cluster import LocalCluster, inbox_layout, partly_served
from tests.service.delivery.conftest import schedule

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A cluster of the test's own: it kills a master."""
    with partly_served() as local:
        yield local


def test_the_other_workers_and_the_reapers_are_announced_a_schedule_while_one_inbox_master_is_down(
    cluster: LocalCluster,
) -> None:
    """The publish raises the dead node's error, its schedule stored; the worker whose inbox
    answers finds it there and claims, the active index holds it; once the master is back, the
    retry (the same publish) announces it to the worker that missed it. Before: no inbox held it."""
    sid, lost, told, down = inbox_layout(cluster)
    delivery = Delivery(cluster.client())
    node = next(n for n in cluster.nodes if n.port == down)
    node.kill()
    published = schedule(sid, {lost: 1, told: 1})
    with pytest.raises(IndexNodeDown) as raised:
        delivery.publish(published)
    assert raised.value.node.endswith(f":{down}")
    assert delivery.schedules_for(told) == [sid]
    assert delivery.client.zscore(keys.active_index(), sid) is not None
    assert [lease.item.key for lease in delivery.claim(sid, told, 1)] == [f"{told}-0#0"]
    node.start()
    cluster._wait_ok(30)
    delivery = Delivery(cluster.client())
    delivery.publish(published)
    assert delivery.schedules_for(lost) == [sid]
