"""The step keeper's tick asks a stalled master once (SIGSTOPped: it accepts and does not answer), on a
real 3-master Redis Cluster that serves the other masters' slots (``cluster-require-full-coverage
no``) and on a single Redis; the calls are counted, not timed.

Each live request's step planning entry and in-flight mark due is kept by a call of its own; a stalled
master costs each call its socket timeout three times over (the service's client retries twice). Before,
every entry and mark on that master paid it in turn: 4 entries and 4 marks on it made a tick 28 s long at
the service's 1 s timeout, past the 15 s between ticks, and the live masters' keys waited behind them."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import islice
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from service.delivery import Delivery, keys
from service.delivery.errors import REDIS_FAILED
from service.embedded import EmbeddedServer
from service.pipeline.step_keeper import Entry, StepKeeper
from service.redis_conn import RedisClient, connect
from service.settings import Settings
from tests.cluster import SLOTS, LocalCluster, serve_everywhere, serve_the_rest, unserve
from tests.scripts_sent import count_scripts, toward
from tests.service.learning.keeper_held import SHORT_MS, held_short, left_ms

pytestmark = pytest.mark.slow
TIMEOUT_S = 0.25  # the service's client at a short timeout: each call on the stalled master ~0.9 s
STALLED = range(2 * SLOTS // 3 + 1, SLOTS)  # the last master's share (``valkey-cli --cluster create``)
LIVE = (range(0, SLOTS // 3), range(SLOTS // 3 + 1, 2 * SLOTS // 3))  # the other two's


@pytest.fixture(scope="module")
def clusters() -> Iterator[list[LocalCluster]]:
    """This module's own cluster (its tests stall a master), in a list: ``cluster`` puts a fresh one
    in its place where a test left it otherwise than formed."""
    held = [_partly_served()]
    try:
        yield held
    finally:
        held[0].stop()


@pytest.fixture
def cluster(clusters: list[LocalCluster]) -> Iterator[LocalCluster]:
    """The module's cluster, every test's as it was formed: a test that leaves a slot mapped otherwise
    (not moved back) errs at its teardown, and the next test gets a fresh cluster. Shared as it was
    left, a slot the moved-slot test could not move back was a later test's failure too: it counted
    5 steps on its stalled masters for 4 (keeper58)."""
    yield clusters[0]
    if not clusters[0].as_formed():
        clusters[0].stop()
        clusters[0] = _partly_served()
        pytest.fail("the test left a slot mapped otherwise than formed, or a node not answering")


def _partly_served() -> LocalCluster:
    """A started cluster that serves its other slots while one has no master (``serve_the_rest``)."""
    local = LocalCluster().start()
    serve_the_rest(local)
    return local


@contextmanager
def _stalled(server: EmbeddedServer, cluster: LocalCluster | None = None) -> Iterator[None]:
    """``server`` SIGSTOPped meanwhile; then resumed, and the cluster healthy again before the next test."""
    server.signal(signal.SIGSTOP)
    try:
        yield
    finally:
        server.signal(signal.SIGCONT)
        if cluster is not None:
            cluster._wait_ok(30.0)


def _service_delivery(url: str, cluster: bool) -> Delivery:
    return Delivery(connect(Settings(redis_url=url, redis_cluster=cluster, redis_timeout_s=TIMEOUT_S)))


def _steps(share: range, count: int) -> list[int]:
    """The first ``count`` steps whose planning key's slot is in ``share``, the search stopped there.
    It hashed all 100,000 candidates (~0.09 CPU-s a search), and the stalled-master test searches
    six times between writing its first keys, for ``SHORT_MS``, and the tick that must find them:
    at load 25-30 on 2 cores that took 14-20 s, and the live masters' keys had lapsed before the tick
    (8 of 9 runs, flaky62)."""
    found = (step for step in range(100_000) if key_slot(keys.step_planning(step).encode()) in share)
    return list(islice(found, count))


def _schedules(share: range, count: int) -> list[str]:
    """The first ``count`` schedule ids whose keys' slot (their in-flight mark's) is in ``share``, the
    search stopped there (``_steps``)."""
    ids = (f"s{n}" for n in range(100_000))
    found = (sid for sid in ids if key_slot(keys.schedule_keys(sid).meta.encode()) in share)
    return list(islice(found, count))


def _owner(cluster: LocalCluster, client: RedisClient, share: range) -> EmbeddedServer:
    """The master that serves ``share``."""
    assert isinstance(client, RedisCluster)
    port = client.get_node_from_key(keys.step_planning(_steps(share, 1)[0])).port  # type: ignore[no-untyped-call]
    return next(node for node in cluster.nodes if node.port == port)


def test_a_keeper_tick_asks_a_stalled_master_once(cluster: LocalCluster, driven_keeper: StepKeeper) -> None:
    """Three entries and three marks on the stalled master, one of each on every other: the tick asks
    the stalled master once (its first call's timeout is that master's outage for the rest of the
    tick) and keeps every live master's entry and mark. Before: seven calls to it (the one pipeline
    of every step, then each entry and each mark on its own)."""
    delivery = _service_delivery(cluster.url, cluster=True)
    held = held_short(delivery, driven_keeper, _steps(STALLED, 3), _schedules(STALLED, 3))
    served = [
        *held_short(delivery, driven_keeper, _steps(LIVE[0], 1), _schedules(LIVE[0], 1)),
        *held_short(delivery, driven_keeper, _steps(LIVE[1], 1), _schedules(LIVE[1], 1)),
    ]
    sent = count_scripts(delivery.client)
    try:
        with _stalled(_owner(cluster, delivery.client, STALLED), cluster):
            driven_keeper.tick()
    finally:
        for each in held + served:
            driven_keeper.let_go(each)
    assert toward(sent, STALLED) == 1
    assert min(left_ms(delivery.client, each) for each in served) > SHORT_MS


def test_a_step_redis_refuses_leaves_its_masters_next_step_asked(cluster: LocalCluster) -> None:
    """A step whose key Redis refuses (of the wrong type) is that step's failure, not its master's: the
    next step on the same master, in the same pipeline, is kept (only a master that did not answer is
    passed over). Before, the cluster's one pipeline raised the refusal out of ``keep_planning``."""
    delivery = _service_delivery(cluster.url, cluster=True)
    refused, kept = _steps(STALLED, 2)
    delivery.client.set(keys.step_planning(refused), "not a zset")
    delivery.enter_planning(kept, "r", SHORT_MS)
    sent = count_scripts(delivery.client)
    try:
        failed = delivery.keep_planning({refused: ["r"], kept: ["r"]}, 60_000)
        left = left_ms(delivery.client, Entry(kept, "r"))
    finally:
        delivery.client.delete(keys.step_planning(refused), keys.step_planning(kept))
    assert isinstance(failed[refused], redis.ResponseError)
    assert (list(failed), len(sent), left > SHORT_MS) == ([refused], 1, True)  # one pipeline: one master


def test_a_healthy_clusters_keeper_pass_sends_one_pipeline_per_master(cluster: LocalCluster) -> None:
    """Three steps on each master, every master up: one call per master, with that master's steps, and
    every entry kept. A call per step (cluster50) made it nine round trips."""
    delivery = _service_delivery(cluster.url, cluster=True)
    shares = (*LIVE, STALLED)
    steps = [step for share in shares for step in _steps(share, 3)]
    for step in steps:
        delivery.enter_planning(step, "r", SHORT_MS)
    sent = count_scripts(delivery.client)
    try:
        failed = delivery.keep_planning({step: ["r"] for step in steps}, 60_000)
        left = [left_ms(delivery.client, Entry(step, "r")) for step in steps]
    finally:
        delivery.client.delete(*(keys.step_planning(step) for step in steps))
    assert failed == {}
    assert [toward(sent, share) for share in shares] == [1, 1, 1]
    assert len(sent) == 3
    assert min(left) > SHORT_MS


def test_a_keeper_tick_on_a_stalled_single_redis_sends_no_mark_after_its_entries_failed(
    driven_keeper: StepKeeper,
) -> None:
    """A single Redis is every key's master: the entries' one pipeline timed out, so the tick sends
    none of the marks (each had cost its own timeouts); all four stay held, tried at the next tick.
    Before: the pipeline and a call per mark."""
    with EmbeddedServer() as server:
        delivery = _service_delivery(server.url, cluster=False)
        held = held_short(delivery, driven_keeper, [7], ["a", "b", "c"])
        marked = {key_slot(keys.schedule_keys(sid).meta.encode()) for sid in ("a", "b", "c")}
        sent = count_scripts(delivery.client)
        try:
            with _stalled(server):
                driven_keeper.tick()
            still = driven_keeper.held()
        finally:
            for each in held:
                driven_keeper.let_go(each)
    assert (len(sent), toward(sent, marked), still) == (1, 0, 4)


@pytest.mark.parametrize("per_master", [1, 2])
def test_a_cluster_said_down_costs_a_keeper_pass_one_call(cluster: LocalCluster, per_master: int) -> None:
    """Full coverage required (the default) and one slot unserved: every node refuses every key, "The
    cluster is down" (0.26 s a call: redis-py's fixed wait). One step's refusal speaks for every
    step: one call, every step failed with it. Before: the one pipeline, then a call per step. With
    two steps a master, the first master's pipeline is that call: its answers, not a raise, say the
    cluster is down, and the other masters' pipelines are not sent (mutants14's KP2, KP5)."""
    delivery = _service_delivery(cluster.url, cluster=True)
    steps = [step for share in (*LIVE, STALLED) for step in _steps(share, per_master)]
    for node in cluster.nodes:
        with redis.Redis(port=node.port) as admin:
            admin.config_set("cluster-require-full-coverage", "yes")
    taken = unserve(cluster, _schedules(STALLED, 1)[0])
    try:
        _until_refused(delivery.client, keys.step_planning(steps[0]))
        sent = count_scripts(delivery.client)
        failed = delivery.keep_planning({step: ["r"] for step in steps}, 60_000)
    finally:
        serve_the_rest(cluster)
        serve_everywhere(cluster, *taken)
    assert (sorted(failed), len(sent)) == (sorted(steps), 1)


def _until_refused(client: RedisClient, key: str, within_s: float = 20.0) -> None:
    """Until the nodes refuse ``key`` (they hear of the unserved slot)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            client.get(key)
        except REDIS_FAILED:
            return
        time.sleep(0.05)
    raise AssertionError(f"{key} still served after {within_s} s")


def test_a_step_whose_slot_moved_under_the_clients_map_is_sent_again_and_kept(cluster: LocalCluster) -> None:
    """Two steps on one master in the client's map, one of whose slots moved to another master since:
    the master's pipeline gets MOVED for it (sent without redirections, so that a timeout is not sent
    again), and the step is sent again alone on the client's path, which follows it: both kept."""
    delivery = _service_delivery(cluster.url, cluster=True)
    stays, moves = _steps(STALLED, 2)
    delivery.enter_planning(stays, "r", SHORT_MS)
    delivery.keep_planning({stays: ["r"], moves: ["r"]}, 60_000)  # the client's map read, as it is now
    slot = key_slot(keys.step_planning(moves).encode())
    owner, taker = _owner(cluster, delivery.client, STALLED), _owner(cluster, delivery.client, LIVE[0])
    _slot_to(cluster, slot, taker)  # an empty slot: its key written after, on its new master
    try:
        with redis.Redis(port=taker.port) as new_master:
            new_master.zadd(keys.step_planning(moves), {"r": 1})
            new_master.pexpire(keys.step_planning(moves), SHORT_MS)
        sent = count_scripts(delivery.client)
        failed = delivery.keep_planning({stays: ["r"], moves: ["r"]}, 60_000)
        left = [left_ms(delivery.client, Entry(step, "r")) for step in (stays, moves)]
    finally:
        delivery.client.delete(keys.step_planning(stays), keys.step_planning(moves))
        _slot_to(cluster, slot, owner)
    assert failed == {}
    assert min(left) > SHORT_MS
    assert len(sent) == 2  # the master's pipeline, then the moved step alone


def _slot_to(cluster: LocalCluster, slot: int, master: EmbeddedServer) -> None:
    """``slot`` (holding no key) served by ``master`` from now on, as every node hears it: ``master``'s
    config epoch made the cluster's greatest first (``_epoch_above_all``), then the slot bound on it,
    on the old owner, then on the rest (Valkey's order to end a reshard). Its claim then outranks,
    everywhere, any heartbeat the old owner sent before it heard of the move. Bound before the bump, a
    heartbeat of the old owner that reached ``master`` between the two (its epoch then the greater)
    bound the slot back there: ``master`` claimed it no more, every other node mapped it to ``master``
    for good, and the wait below ran out (keeper58: 7 of 417 runs of this test at load 6-14; none of
    520 with the epoch bumped first)."""
    with redis.Redis(port=master.port) as client:
        node_id = str(client.execute_command("CLUSTER", "MYID"), "utf-8")
        source = next(int(m[1]) for lo, hi, m, *_ in client.cluster("SLOTS") if lo <= slot <= hi)
    _epoch_above_all(cluster, master)
    rest = [node.port for node in cluster.nodes if node.port not in (master.port, source)]
    for port in (master.port, source, *rest):
        with redis.Redis(port=port) as client:
            client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", node_id)
    _until_every_node_maps(cluster, slot, master.port)
    cluster._wait_ok(30.0)


def _epoch_above_all(cluster: LocalCluster, master: EmbeddedServer, within_s: float = 30.0) -> None:
    """Until ``master``'s config epoch is above every other node's own. ``BUMPEPOCH`` takes one above
    the greatest ``master`` has heard of, or answers ``STILL`` where its own is that greatest: one
    that has not yet heard of another node's last bump (the move there) is asked again once the
    heartbeats told it."""
    deadline = time.monotonic() + within_s
    while True:
        with redis.Redis(port=master.port) as client:
            client.execute_command("CLUSTER", "BUMPEPOCH")
        others = [_config_epoch(node) for node in cluster.nodes if node.port != master.port]
        if _config_epoch(master) > max(others):
            return
        assert time.monotonic() < deadline, f"{master.port}'s config epoch not above {others}"
        time.sleep(0.05)


def _config_epoch(node: EmbeddedServer) -> int:
    """``node``'s own config epoch: whose claim on a slot wins, the greater's."""
    with redis.Redis(port=node.port, decode_responses=True) as client:
        return int(client.cluster("INFO")["cluster_my_epoch"])


def _until_every_node_maps(cluster: LocalCluster, slot: int, port: int, within_s: float = 30.0) -> None:
    """Until every node maps ``slot`` to the master at ``port``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        owners = set()
        for node in cluster.nodes:
            with redis.Redis(port=node.port) as client:
                spans = client.cluster("SLOTS")
            owners |= {int(m[1]) for lo, hi, m, *_ in spans if lo <= slot <= hi}
        if owners == {port}:
            return
        time.sleep(0.05)
    raise AssertionError(f"slot {slot} not mapped to {port} by every node after {within_s} s")


def test_a_stalled_masters_pipeline_is_sent_to_it_once(cluster: LocalCluster) -> None:
    """Three steps on the stalled master: their pipeline goes to it once, on its own connection (one
    socket timeout: 0.25 s a tick at a 0.25 s timeout, 1.0 s at the service's 1 s). Before, the
    cluster pipeline (``send_cluster_commands``) retried it as the client's retries allow, each try
    a connection taken again and a timeout waited out again: 0.89 s, 3.15 s."""
    delivery = _service_delivery(cluster.url, cluster=True)
    steps = _steps(STALLED, 3)
    client = delivery.client
    assert isinstance(client, RedisCluster)
    stalled = client.get_node_from_key(keys.step_planning(steps[0]))  # type: ignore[no-untyped-call]
    pool = client.get_redis_connection(stalled).connection_pool
    taken: list[object] = []
    take = pool.get_connection

    def counted(*args: object, **options: object) -> object:
        taken.append(args)
        return take(*args, **options)

    pool.get_connection = counted  # type: ignore[method-assign,assignment]
    with _stalled(_owner(cluster, client, STALLED), cluster):
        failed = delivery.keep_planning({step: ["r"] for step in steps}, 60_000)
    assert sorted(failed) == sorted(steps)
    assert all(isinstance(error, redis.TimeoutError) for error in failed.values())
    assert len(taken) == 1


@pytest.mark.parametrize("which", [(0, 1), (0, 2), (1, 2)], ids=lambda which: f"masters {which}")
def test_two_stalled_masters_are_each_asked_once_in_a_pass(
    cluster: LocalCluster, which: tuple[int, int]
) -> None:
    """Two of the three masters stalled (``which``, as the client lists them), steps on all three:
    each stalled master hands out one connection in the pass (its pipeline, or the failover check's
    ``CLUSTER SLOTS``, not both), whichever its place in the failover check's order (the live master
    between them, it is asked first in one check and last in the other). Before, the check after the
    first one's timeout asked the second (another timeout), whose own pipeline then timed out, and
    whose check asked the first again: 1.27 s a pass at a 0.25 s timeout, against one timeout each
    (docs51)."""
    delivery = _service_delivery(cluster.url, cluster=True)
    client = delivery.client
    assert isinstance(client, RedisCluster)
    primaries = client.get_primaries()  # type: ignore[no-untyped-call]
    shares = (*LIVE, STALLED)
    owners = {_owner(cluster, client, share).port: share for share in shares}
    stalled = [primaries[index] for index in which]
    steps = [step for share in shares for step in _steps(share, 2)]
    taken: dict[int, int] = {node.port: 0 for node in stalled}
    for node in stalled:
        pool = client.get_redis_connection(node).connection_pool
        take = pool.get_connection

        def counted(*args: object, _take: Any = take, _port: int = node.port, **options: object) -> object:
            taken[_port] += 1
            return _take(*args, **options)

        pool.get_connection = counted  # type: ignore[method-assign,assignment]
    servers = [next(each for each in cluster.nodes if each.port == node.port) for node in stalled]
    assert set(owners) == {node.port for node in primaries}
    with _stalled(servers[0], cluster), _stalled(servers[1]):
        failed = delivery.keep_planning({step: ["r"] for step in steps}, 60_000)
    assert len(failed) == 4  # the stalled masters' two steps each
    assert taken == {node.port: 1 for node in stalled}
