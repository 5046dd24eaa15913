"""The step keeper's tick on a real 3-master Redis Cluster with a slot range no master serves
(``cluster-require-full-coverage no``): the node that first says a slot is not served is asked which
slots no master serves (``CLUSTER SLOTS``, once a tick), and the tick's other entries and marks of
those slots fail with that refusal, unasked (``unanswered.py``); the served ones are kept. Counted, not
timed.

Before, each entry and mark of such a slot was a call of its own at every tick, 0.26 s each
(redis-py's fixed wait on "Hash slot not served"), and the served keys behind them waited as long."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from service.delivery import Delivery, coverage, keys, unanswered
from service.delivery.retries import short_retry
from service.delivery.unanswered import Unanswered
from service.pipeline.step_keeper import Entry, StepKeeper
from service.redis_conn import connect
from service.settings import Settings
from tests.cluster import SLOTS, LocalCluster, serve_ranges, serve_the_rest, unserve_range
from tests.scripts_sent import count_scripts, toward
from tests.service.learning.keeper_held import SHORT_MS, held_short, left_ms

pytestmark = pytest.mark.slow
DROPPED = range(2 * SLOTS // 3 + 500, 2 * SLOTS // 3 + 700)  # of the last master's share
LIVE = (range(0, SLOTS // 3 - 1), range(SLOTS // 3 + 1, 2 * SLOTS // 3 - 1))  # the other two's
OWNERS = range(2 * SLOTS // 3 + 1, DROPPED.start)  # the last master's slots it still serves


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A cluster of this module's own: its tests take a slot range away."""
    with LocalCluster() as local:
        serve_the_rest(local)
        yield local


def _steps(share: range, count: int) -> list[int]:
    """``count`` steps whose planning key's slots are distinct and in ``share``."""
    found: dict[int, int] = {}
    for step in range(100_000):
        found.setdefault(key_slot(keys.step_planning(step).encode()), step)
        if sum(1 for slot in found if slot in share) == count:
            break
    return [step for slot, step in found.items() if slot in share]


def _schedules(share: range, count: int) -> list[str]:
    """``count`` schedule ids whose keys' slots (their in-flight marks') are distinct and in ``share``."""
    found: dict[int, str] = {}
    for n in range(100_000):
        found.setdefault(key_slot(keys.schedule_keys(f"s{n}").meta.encode()), f"s{n}")
        if sum(1 for slot in found if slot in share) == count:
            break
    return [sid for slot, sid in found.items() if slot in share]


def _tick_while_dropped(
    cluster: LocalCluster, keeper: StepKeeper, steps: int, marks: int
) -> tuple[int, float, int]:
    """A keeper tick over ``steps`` entries and ``marks`` marks of ``DROPPED``'s slots and one of each
    on every other master and, in the same pass, on its master's served slots (``OWNERS``: the node's
    word is on the slots it lists, not on every key sent to it: mutants14's U9), while no master serves
    ``DROPPED``: (the calls to ``DROPPED``, the least time the served ones have left after it, how
    many times a node was asked which slots no master serves)."""
    cluster.flushall()
    delivery = Delivery(connect(Settings(redis_url=cluster.url, redis_cluster=True)))  # the service's
    own = _steps(OWNERS, 1), _schedules(OWNERS, 1)  # in the range's pass (one context), after it
    held = held_short(delivery, keeper, _steps(DROPPED, steps) + own[0], _schedules(DROPPED, marks) + own[1])
    served = [held[steps], held[-1]]
    for share in LIVE:
        served += held_short(delivery, keeper, _steps(share, 1), _schedules(share, 1))
    with redis.Redis(port=cluster.nodes[0].port) as admin:
        owner = next(int(m[1]) for lo, hi, m, *_ in admin.cluster("SLOTS") if lo <= DROPPED.start <= hi)
    sent = count_scripts(delivery.client)
    asked: list[object] = []

    def counted(*args: Any) -> frozenset[int] | None:
        asked.append(args)
        return coverage.unserved_slots(*args)

    unserve_range(cluster, DROPPED)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(unanswered, "unserved_slots", counted)
            keeper.tick()
    finally:
        serve_ranges(cluster, {DROPPED: owner})
        for each in held + served:
            keeper.let_go(each)
    return toward(sent, DROPPED), min(left_ms(delivery.client, each) for each in served), len(asked)


def test_a_keeper_tick_asks_one_pipeline_of_an_unserved_range_and_no_mark(
    cluster: LocalCluster, driven_keeper: StepKeeper
) -> None:
    """Three entries and three marks of the range: its master's pipeline says the slots are not
    served, the node is asked which others are, and no entry nor mark of the range is sent again.
    Before: the pipeline, each of its steps again alone, and each mark (7 calls, 0.26 s each)."""
    calls, served_left, asked = _tick_while_dropped(cluster, driven_keeper, steps=3, marks=3)
    assert calls == 1
    assert served_left > SHORT_MS
    assert asked == 1  # once a tick, though each of the pipeline's three answers said so (mutants14's U7)


def test_a_keeper_tick_asks_one_mark_of_an_unserved_range(
    cluster: LocalCluster, driven_keeper: StepKeeper
) -> None:
    """Three marks of the range and no entry: the first mark's call fails (the client's own error,
    the node's refusal under it), the node is asked, the other two are not sent. Before: 3 calls."""
    calls, served_left, asked = _tick_while_dropped(cluster, driven_keeper, steps=0, marks=3)
    assert calls == 1
    assert served_left > SHORT_MS
    assert asked == 1


def test_a_keeper_tick_keeps_the_keys_the_asked_node_wrongly_thinks_unserved(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch, driven_keeper: StepKeeper
) -> None:
    """The node asked which slots are unserved answers from its own view, which can lag (it has not
    heard yet that another master serves a slot again): the other masters' keys are still sent, and
    kept. Before, a tick that asked such a node let them lapse under their live requests."""
    real = coverage.unserved_slots

    def stale(client: RedisCluster, node: ClusterNode) -> frozenset[int] | None:
        return (real(client, node) or frozenset()) | {slot for share in LIVE for slot in share}

    monkeypatch.setattr("service.delivery.unanswered.unserved_slots", stale)
    cluster.flushall()
    delivery = Delivery(connect(Settings(redis_url=cluster.url, redis_cluster=True)))
    steps = _steps(DROPPED, 3) + [step for share in LIVE for step in _steps(share, 1)]
    marks = _schedules(DROPPED, 3) + [sid for share in LIVE for sid in _schedules(share, 1)]
    held = held_short(delivery, driven_keeper, steps, marks)  # one context: one tick's pass over them all
    served = [held[3], held[4], held[8], held[9]]
    with redis.Redis(port=cluster.nodes[0].port) as admin:
        owner = next(int(m[1]) for lo, hi, m, *_ in admin.cluster("SLOTS") if lo <= DROPPED.start <= hi)
    unserve_range(cluster, DROPPED)
    try:
        driven_keeper.tick()
    finally:
        serve_ranges(cluster, {DROPPED: owner})
        for each in held:
            driven_keeper.let_go(each)
    assert min(left_ms(delivery.client, each) for each in served) > SHORT_MS


def test_a_range_served_again_is_kept_at_the_next_tick(
    cluster: LocalCluster, driven_keeper: StepKeeper
) -> None:
    """What a tick learned unserved is forgotten with the tick: once the range is served again, the
    next tick keeps its entries and marks, none failed on the last tick's word."""
    cluster.flushall()
    delivery = Delivery(connect(Settings(redis_url=cluster.url, redis_cluster=True)))
    held = held_short(delivery, driven_keeper, _steps(DROPPED, 3), _schedules(DROPPED, 3))
    with redis.Redis(port=cluster.nodes[0].port) as admin:
        owner = next(int(m[1]) for lo, hi, m, *_ in admin.cluster("SLOTS") if lo <= DROPPED.start <= hi)
    unserve_range(cluster, DROPPED)
    try:
        driven_keeper.tick()  # none kept: the range unserved
    finally:
        serve_ranges(cluster, {DROPPED: owner})
    try:
        driven_keeper.tick()  # still due: kept now
        assert min(left_ms(delivery.client, each) for each in held) > SHORT_MS
    finally:
        for each in held:
            driven_keeper.let_go(each)


def test_steps_whose_slot_the_clients_map_has_no_master_for_are_each_asked_alone(
    cluster: LocalCluster,
) -> None:
    """A client built with ``require_full_coverage=False`` while ``DROPPED`` is unserved has no master
    for its slots in its map (``Unanswered.master``: None). Each such step is sent alone on the
    client's path (one call each, which asks the cluster's map as it is then) and fails with its own
    slot's error; the served steps are kept. Grouped under one made-up master instead (mutants14's
    KP14, U5), the group's pipeline had no node to go to: no step of it was asked, and every one
    failed with the first one's error."""
    cluster.flushall()
    with redis.Redis(port=cluster.nodes[0].port) as admin:
        owner = next(int(m[1]) for lo, hi, m, *_ in admin.cluster("SLOTS") if lo <= DROPPED.start <= hi)
    delivery = Delivery(connect(Settings(redis_url=cluster.url, redis_cluster=True)))  # the service's
    dropped, served = _steps(DROPPED, 2), [step for share in LIVE for step in _steps(share, 1)]
    for step in served:
        delivery.enter_planning(step, "r", SHORT_MS)
    unserve_range(cluster, DROPPED)
    short = RedisCluster(
        startup_nodes=cluster.startup_nodes, require_full_coverage=False, retry=short_retry()
    )
    try:
        unmapped = [Unanswered(short).master(keys.step_planning(step)) for step in dropped]
        sent = count_scripts(short)
        failed = Delivery(short).keep_planning({step: ["r"] for step in dropped + served}, 60_000)
    finally:
        short.close()
        serve_ranges(cluster, {DROPPED: owner})
    slots = [key_slot(keys.step_planning(step).encode()) for step in dropped]
    assert unmapped == [None, None]
    assert sorted(failed) == sorted(dropped)
    assert [f'"{slot}"' in str(failed[step]) for step, slot in zip(dropped, slots, strict=True)] == [
        True,
        True,
    ]
    assert [toward(sent, {slot}) for slot in slots] == [1, 1]
    assert min(left_ms(delivery.client, Entry(step, "r")) for step in served) > SHORT_MS
