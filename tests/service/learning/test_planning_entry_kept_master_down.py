"""Live requests' step planning entries are kept on a real 3-master Redis Cluster with one master down
(its process killed, the others serving: ``cluster-require-full-coverage no``).

The keeper sends every step's keep in one non-transactional pipeline (``Delivery.keep_planning``). A
cluster's pipeline that met the dead master raised and had sent nothing to the live ones: every
step's entries lapsed under their live requests for as long as one master was down, and a retrain
asked meanwhile fitted those steps without the parts still planning."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import cast

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from service.context import Context
from service.delivery import Delivery, keys
from service.pipeline.step_keeper import Entry, StepKeeper
from service.redis_conn import RedisClient, connect
from service.settings import Settings
from tests.cluster import LocalCluster, serve_the_rest
from tests.scripts_sent import count_scripts, toward

pytestmark = pytest.mark.slow
SHORT_MS, LONG_MS = 10_000, 600_000


@pytest.fixture(scope="module")
def one_master_down() -> Iterator[tuple[LocalCluster, int]]:
    """A cluster of this module's own, its last master killed; (the cluster, the dead master's port)."""
    with LocalCluster() as cluster:
        serve_the_rest(cluster)
        dead = cluster.nodes[-1]
        dead.kill()
        yield cluster, dead.port


def _steps(client: RedisClient) -> dict[int, int]:
    """A step whose planning key is on each master: port -> step."""
    steps: dict[int, int] = {}
    assert isinstance(client, RedisCluster)
    for step in range(1_000):
        steps.setdefault(client.get_node_from_key(keys.step_planning(step)).port, step)  # type: ignore[no-untyped-call]
    assert len(steps) == 3
    return steps


def _left_ms(client: RedisClient, step: int, member: str) -> float:
    seconds, micros = client.time()
    return float(client.zscore(keys.step_planning(step), member) or 0) - (seconds * 1000 + micros // 1000)


def test_keep_planning_keeps_the_live_masters_steps_and_names_the_dead_ones(
    one_master_down: tuple[LocalCluster, int],
) -> None:
    cluster, dead = one_master_down
    delivery = Delivery(connect(Settings(redis_url=cluster.url, redis_cluster=True)))  # the service's
    steps = _steps(delivery.client)
    live = [step for port, step in steps.items() if port != dead]
    for step in live:
        delivery.enter_planning(step, f"part {step}", SHORT_MS)
    failed = delivery.keep_planning({step: [f"part {step}"] for step in steps.values()}, LONG_MS)
    assert list(failed) == [steps[dead]]
    assert all(_left_ms(delivery.client, step, f"part {step}") > SHORT_MS for step in live)


def test_a_step_redis_refuses_sent_step_by_step_leaves_the_steps_after_it_kept(
    one_master_down: tuple[LocalCluster, int],
) -> None:
    """One master down and another at its ``maxmemory`` (OOM refuses the keep's ZADD): the third
    master's step, sent after the refused one, is kept all the same. Before, the OOM was raised out of
    the step-by-step resend, and the steps after it were lost for that tick."""
    cluster, dead = one_master_down
    delivery = Delivery(connect(Settings(redis_url=cluster.url, redis_cluster=True)))  # the service's
    steps = _steps(delivery.client)
    full, served = (step for port, step in steps.items() if port != dead)
    full_port = next(port for port, step in steps.items() if step == full)
    for step in (full, served):
        delivery.enter_planning(step, f"part {step}", SHORT_MS)
    members = {step: [f"part {step}"] for step in (steps[dead], full, served)}
    with redis.Redis(port=full_port) as node:
        node.config_set("maxmemory", 1)
        try:
            failed = delivery.keep_planning(members, LONG_MS)
        finally:
            node.config_set("maxmemory", 0)
    assert sorted(failed) == sorted([steps[dead], full])
    assert isinstance(failed[full], redis.exceptions.OutOfMemoryError)
    assert _left_ms(delivery.client, served, f"part {served}") > SHORT_MS


def test_the_keeper_extends_the_live_masters_entries_while_one_master_is_down(
    one_master_down: tuple[LocalCluster, int],
    driven_keeper: StepKeeper,
) -> None:
    cluster, dead = one_master_down
    delivery = Delivery(connect(Settings(redis_url=cluster.url, redis_cluster=True)))  # the service's
    ctx = cast(Context, SimpleNamespace(delivery=delivery))
    steps = _steps(delivery.client)
    for step in steps.values():
        if step != steps[dead]:
            delivery.enter_planning(step, f"request {step}", SHORT_MS)
        driven_keeper.hold(ctx, Entry(step, f"request {step}"), life_s=0.0)  # due at the first tick
    time.sleep(0.01)
    driven_keeper.tick()
    for step in steps.values():
        driven_keeper.let_go(Entry(step, f"request {step}"))
    left = [
        _left_ms(delivery.client, step, f"request {step}") for port, step in steps.items() if port != dead
    ]
    assert min(left) > SHORT_MS  # pushed to the keeper's margin past now


def test_a_dead_masters_steps_are_asked_again_once_on_the_clients_path(
    one_master_down: tuple[LocalCluster, int],
) -> None:
    """Two steps on the dead master (connection refused) and one on each live one: the dead master's
    pipeline fails, its first step is sent again alone on the client's path (whose retries ask the
    cluster for its slots again: a failover's new master would answer it), and the second fails with
    that error, unasked. Before the pipeline went on the client's own node connection, no call there
    followed a failover but the pipeline's retries themselves (``send_cluster_commands``)."""
    cluster, dead = one_master_down
    delivery = Delivery(connect(Settings(redis_url=cluster.url, redis_cluster=True)))  # the service's
    client = delivery.client
    assert isinstance(client, RedisCluster)
    on_dead = [s for s in range(1_000) if client.get_node_from_key(keys.step_planning(s)).port == dead][:2]  # type: ignore[no-untyped-call]
    live = [step for port, step in _steps(client).items() if port != dead]
    for step in live:
        delivery.enter_planning(step, f"part {step}", SHORT_MS)
    sent = count_scripts(client)
    failed = delivery.keep_planning({step: [f"part {step}"] for step in [*on_dead, *live]}, LONG_MS)
    assert sorted(failed) == sorted(on_dead)
    assert all(isinstance(error, redis.ConnectionError) for error in failed.values())
    assert [toward(sent, {_slot(step)}) for step in on_dead] == [2, 1]  # the pipeline, then one alone
    assert all(_left_ms(client, step, f"part {step}") > SHORT_MS for step in live)


def test_a_dead_masters_lone_step_is_one_call_on_the_clients_path(
    one_master_down: tuple[LocalCluster, int],
) -> None:
    """One step on the dead master (connection refused): a group of one is sent alone on the client's
    path from the start (whose retries would find a failover's new master), one call; not first in a
    pipeline on the dead master's own connection and then alone again, two (mutants14's KP1)."""
    cluster, dead = one_master_down
    delivery = Delivery(connect(Settings(redis_url=cluster.url, redis_cluster=True)))  # the service's
    client = delivery.client
    on_dead = _steps(client)[dead]
    sent = count_scripts(client)
    failed = delivery.keep_planning({on_dead: ["part"]}, LONG_MS)
    assert list(failed) == [on_dead]
    assert isinstance(failed[on_dead], redis.ConnectionError)
    assert toward(sent, {_slot(on_dead)}) == 1


def _slot(step: int) -> int:
    return key_slot(keys.step_planning(step).encode())
