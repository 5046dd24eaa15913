"""A walk (``reach.Reach``, one that ``learns``) whose ask of another master about a stalled one meets a
second stalled master passes that master's schedules over for the rest of the walk, unasked, on a real
3-master Redis Cluster with two masters stalled (SIGSTOPped: they accept and do not answer).

Why. The ask (``remap.Remap``: one ``CLUSTER SLOTS`` on another master's client) waited out that
master's socket timeout; its schedules' own calls, sent after it, each waited the same again, a
second stall in the walk for a master already known silent. A master silent to the ask is one of
the walk's failed nodes, as after one of its calls' failure (``Reach._silenced``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from service.delivery import keys
from service.delivery.reach import Reach
from tests.service.delivery.stalled_pair import two_stalled_masters

pytestmark = pytest.mark.slow


@pytest.fixture
def two_stalled() -> Iterator[tuple[RedisCluster, list[str]]]:
    """Two masters stalled, and a schedule on each (``stalled_pair``)."""
    with two_stalled_masters() as stalled:
        yield stalled


def test_a_master_silent_to_the_walks_ask_has_its_schedules_passed_over(
    two_stalled: tuple[RedisCluster, list[str]],
) -> None:
    client, (first, other) = two_stalled
    metas = [keys.schedule_keys(sid).meta for sid in (first, other)]
    stalled = [client.get_node_from_key(meta).name for meta in metas]  # type: ignore[no-untyped-call]
    live = [node.name for node in client.get_primaries() if node.name not in stalled]  # type: ignore[no-untyped-call]
    for name in [stalled[1], *live]:  # the ask's order: the other stalled master first, then the live
        client.nodes_manager.move_node_to_end_of_cached_nodes(name)
    reach = Reach(client, learns=True)
    assert not reach.passed_over(other)
    with pytest.raises(redis.TimeoutError):  # its call times out; the ask meets the other one silent
        reach.sent(first, lambda: client.get(metas[0]))
    assert reach.passed_over(other)  # not asked: recorded missing with the ask's error
    assert isinstance(reach.missing[other], redis.TimeoutError)
