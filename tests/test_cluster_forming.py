"""The tests' 3-master cluster (``tests.cluster.LocalCluster``) is formed as ``valkey-cli --cluster create``
forms it, whether its nodes were started for it or ahead of it (``spares``, taken by the next test of a
module), and is handed over at the node timeout the tests know: the short one its nodes joined at is gone.
"""

from __future__ import annotations

import pytest
import redis

from tests.cluster import NODE_TIMEOUT_MS, SLOTS, LocalCluster, slot_ranges


def test_the_slots_are_split_as_valkey_cli_splits_them() -> None:
    assert slot_ranges(3) == [(0, 5460), (5461, 10922), (10923, 16383)]
    for masters in range(1, 7):
        ranges = slot_ranges(masters)
        assert [slot for low, high in ranges for slot in range(low, high + 1)] == list(range(SLOTS))


@pytest.mark.parametrize("start", ["first of the module", "from the nodes started ahead"])
def test_a_cluster_is_handed_over_formed_with_each_master_s_share_and_epoch_at_the_usual_node_timeout(
    start: str,
) -> None:
    """Two in a row: the second takes the nodes the first started ahead, as a module's next test does."""
    del start
    with LocalCluster() as local:
        ports = [node.port for node in local.nodes]
        shares = [(low, high, ports[index]) for index, (low, high) in enumerate(slot_ranges(3))]
        for epoch, port in enumerate(ports, 1):
            with redis.Redis(port=port, decode_responses=True) as client:
                info = client.cluster("info")
                assert (info["cluster_state"], int(info["cluster_known_nodes"])) == ("ok", 3)
                assert int(info["cluster_my_epoch"]) == epoch
                timeout_ms = client.config_get("cluster-node-timeout")["cluster-node-timeout"]
                assert int(timeout_ms) == NODE_TIMEOUT_MS
        assert local.formed == shares
