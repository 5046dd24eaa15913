"""The tests' 3-master cluster (``tests.cluster.LocalCluster``) is formed as ``valkey-cli --cluster create``
forms it, whether its nodes were started for it or ahead of it (``spares``, taken by the next test of a
module), and is handed over at the node timeout the tests know: the short one its nodes joined at is gone.
Nodes are started ahead only where the next test is of the same module, and the next cluster takes them
(mutants61's CL1 and CL6: neither was seen, both cost only time, ~1.5 s a cluster or spares left running).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import redis

from tests import cluster
from tests.cluster import NODE_TIMEOUT_MS, SLOTS, LocalCluster, slot_ranges

_AHEAD: list[int] = []  # the ports of the nodes the first cluster of the module started ahead


def test_the_slots_are_split_as_valkey_cli_splits_them() -> None:
    assert slot_ranges(3) == [(0, 5460), (5461, 10922), (10923, 16383)]
    for masters in range(1, 7):
        ranges = slot_ranges(masters)
        assert [slot for low, high in ranges for slot in range(low, high + 1)] == list(range(SLOTS))


def _wanted(this: str, following: str | None, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether ``tests.cluster``'s hook wants spares for a test of module ``this`` followed by one of
    ``following`` (None: the last test); the hook's own setting is put back after the test."""
    monkeypatch.setattr(cluster, "_spares_wanted", cluster._spares_wanted)
    item = cast(Any, SimpleNamespace(path=Path(this)))
    nextitem = None if following is None else cast(Any, SimpleNamespace(path=Path(following)))
    protocol = cluster.pytest_runtest_protocol(item, nextitem)
    next(protocol)
    wanted = cluster._spares_wanted
    with contextlib.suppress(StopIteration):
        next(protocol)
    return wanted


def test_nodes_are_started_ahead_only_for_a_next_test_of_the_same_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _wanted("tests/a.py", "tests/a.py", monkeypatch)
    assert not _wanted("tests/a.py", "tests/b.py", monkeypatch)  # another module may form no cluster
    assert not _wanted("tests/a.py", None, monkeypatch)


@pytest.mark.parametrize("start", ["first of the module", "from the nodes started ahead"])
def test_a_cluster_is_handed_over_formed_with_each_master_s_share_and_epoch_at_the_usual_node_timeout(
    start: str,
) -> None:
    """Two in a row: the second takes the nodes the first started ahead, as a module's next test does."""
    with LocalCluster() as local:
        ports = [node.port for node in local.nodes]
        if start == "first of the module":
            _AHEAD[:] = [node.port for node in cluster._spares]
        elif _AHEAD:  # the nodes started ahead, taken (each cluster from fresh nodes took ~1.5 s more)
            assert ports == _AHEAD
        shares = [(low, high, ports[index]) for index, (low, high) in enumerate(slot_ranges(3))]
        for epoch, port in enumerate(ports, 1):
            with redis.Redis(port=port, decode_responses=True) as client:
                info = client.cluster("info")
                assert (info["cluster_state"], int(info["cluster_known_nodes"])) == ("ok", 3)
                assert int(info["cluster_my_epoch"]) == epoch
                timeout_ms = client.config_get("cluster-node-timeout")["cluster-node-timeout"]
                assert int(timeout_ms) == NODE_TIMEOUT_MS
        assert local.formed == shares
