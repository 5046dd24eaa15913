"""A reaper pass with nothing to reap and nothing to announce again is one command, on one server and
on a real 3-master cluster: one script on the indexes' slot reads what is due and what the announcing
index lists (``DeliveryIndexes.walk_for_reaping``). Passes run every second on every replica;
reannounce65 had made an idle pass two scripts (the due read, then the announcing index's read), and
this held it to one again (ops66). Counted on the client (``tests.cluster.commands_sent``)."""

from __future__ import annotations

from redis.cluster import RedisCluster

from service.delivery import Delivery
from service.delivery.reaper import Reaper
from tests.cluster import commands_sent
from tests.service.delivery.conftest import schedule


def _idle_pass(delivery: Delivery) -> list[str]:
    """The commands of a pass after the first: the schedule published, reaped once (its lapse entry
    ahead), its announcing entry younger than ``REANNOUNCE_AFTER_MS``."""
    delivery.publish(schedule("s", {"a": 2, "b": 1}))
    reaper = Reaper(delivery)
    reaper._pass()  # reaps the new schedule, records when it can next lapse
    sent = commands_sent(delivery.client)
    reaper._pass()
    assert reaper.passes == 2
    return sent


def test_an_idle_pass_is_one_command_on_one_server(delivery: Delivery) -> None:
    assert _idle_pass(delivery) == ["EVALSHA"]


def test_an_idle_pass_is_one_command_on_a_cluster(cluster_client: RedisCluster) -> None:
    assert _idle_pass(Delivery(cluster_client)) == ["EVALSHA"]
