"""How long a master found silent is passed over by its client's calls of their own (``remap.silence_s``):
until the report whose try found it comes back for its next try, so that retry does not wait on it again.

A report's try on a stalled master waits one socket timeout for each of the client's attempts
(``retries.short_retry``: the call and its retries), and the sidecar's retry pauses up to
``OutageRetry``'s longest pause before the next try: a memory shorter than both (one socket timeout, or
the 0.1 s share window) had every retry of one report ask the stalled masters again (cluster55).
A client without a socket timeout keeps only the share window: its stalled call never comes back.
Real clients of a real 3-master cluster; no time is measured."""

from __future__ import annotations

import pytest
from redis.cluster import RedisCluster

from service.delivery import remap
from service.delivery.retries import short_retry
from service.redis_conn import connect
from service.settings import Settings
from service.sidecar.outage_retry import LONGEST_PAUSE_S
from tests.cluster import LocalCluster


@pytest.mark.parametrize("timeout_s", [0.25, 1.0, 5.0])
def test_a_silence_is_remembered_past_the_reports_next_try(
    redis_cluster: LocalCluster, timeout_s: float
) -> None:
    client = connect(Settings(redis_url=redis_cluster.url, redis_cluster=True, redis_timeout_s=timeout_s))
    try:
        assert isinstance(client, RedisCluster)
        attempts = short_retry().get_retries() + 1
        assert remap.silence_s(client) >= attempts * timeout_s + LONGEST_PAUSE_S
    finally:
        client.close()


def test_a_client_without_a_socket_timeout_remembers_a_silence_for_the_share_window(
    redis_cluster: LocalCluster,
) -> None:
    client = RedisCluster.from_url(redis_cluster.url)
    try:
        assert remap.silence_s(client) == remap.RECENT_S
    finally:
        client.close()
