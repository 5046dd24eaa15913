"""The node clients (a cluster master's own client, ``RedisCluster.get_redis_connection``) under the
generated ``--cluster`` ACL users, on every master of a real Redis Cluster.

The loop test (``test_redis_acl_loop.py``) runs the service and the sidecars as those users, but its
keeper never has an overrunning request to keep, and its walks meet no unserved slot: so the calls
that go on a master's own client, or to a node by name, ran under an ACL nowhere. The step keeper's
keep is a pipeline of EVAL on each master's own client (``planning_keep.py``), its marks EVALSHA on
the client's path, and it asks nodes for their slots (``CLUSTER SLOTS``: ``coverage.named_elsewhere``,
``unserved_slots``, and the map read again after a failover, ``Unanswered.remapped``); a sidecar's
complete-and-claim is a pipeline on its schedule's master's own client (``Delivery._pipelined``) and
its walks ask a node which slots it knows unserved. Each is run here on every master, and no node's
``ACL LOG`` holds a refusal. A user without the keep's command is told so at every tick, by name, as an
error: the entries are not kept, and not taken for kept.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Iterator
from types import SimpleNamespace
from typing import cast

import pytest
import redis
import typer
from redis.cluster import ClusterNode, RedisCluster

from service.context import Context
from service.delivery import Delivery, UnknownScheduleError, keys
from service.delivery.acl import SERVICE, SIDECAR
from service.delivery.coverage import named_elsewhere, unserved_slots
from service.pipeline.step_keeper import Entry, InFlight, Kept, StepKeeper
from service.redis_conn import connect
from service.settings import Settings
from tests.cluster import LocalCluster
from tests.deploy.acl_loop import PASSWORDS, apply_lines, generated_lines
from tests.service.learning.keeper_held import SHORT_MS, left_ms

pytestmark = pytest.mark.slow
NO_KEEP = "rollout-nokeep"  # the service user's grants but EVAL, which the keep's pipeline sends


@pytest.fixture(scope="module")
def cluster(cli: typer.Typer) -> Iterator[tuple[LocalCluster, list[redis.Redis]]]:
    """A 3-master cluster of this module's own, with the ``--cluster`` users on every node, and one
    more: the service user's rules without ``+eval``."""
    lines = generated_lines(cli, "--cluster")
    service_line = next(line for line in lines if f" {SERVICE.default_user} " in line)
    no_keep = shlex.split(service_line.replace(f" {SERVICE.default_user} ", f" {NO_KEEP} "))
    no_keep = [rule for rule in no_keep if rule != "+eval"]
    with LocalCluster() as local:
        admins = [apply_lines(node.port, [*lines, shlex.join(no_keep)]) for node in local.nodes]
        yield local, admins
        for admin in admins:
            admin.close()


def _as(local: LocalCluster, user: str, password: str) -> Delivery:
    """The service's client (``connect``), logged in as ``user``."""
    url = f"redis://{user}:{password}@127.0.0.1:{local.nodes[0].port}/0"
    return Delivery(connect(Settings(redis_url=url, redis_cluster=True)))


def _refusals(admins: list[redis.Redis]) -> list[tuple[str, str]]:
    """Every node's ``ACL LOG`` (user, what was refused), emptied after."""
    found = [(str(e["username"]), str(e["object"])) for admin in admins for e in admin.acl_log()]
    for admin in admins:
        admin.acl_log_reset()
    return found


def _on_each_master(client: RedisCluster, per_master: int) -> tuple[list[Kept], list[Kept]]:
    """``per_master`` steps' entries on each master (so each master's keep is one pipeline on its own
    client) and a mark on each."""
    steps: dict[int, list[Kept]] = {}
    marks: dict[int, Kept] = {}
    for n in range(10_000):
        port = client.get_node_from_key(keys.step_planning(n)).port  # type: ignore[no-untyped-call]
        if len(steps.setdefault(port, [])) < per_master:
            steps[port].append(Entry(n, "r"))
        at = client.get_node_from_key(keys.schedule_keys(f"s{n}").meta).port  # type: ignore[no-untyped-call]
        marks.setdefault(at, InFlight(f"s{n}", "r"))
    assert len(steps) == len(marks) == 3
    return [each for kept in steps.values() for each in kept], list(marks.values())


def _held(delivery: Delivery, keeper: StepKeeper, kept: list[Kept], writer: Delivery | None = None) -> None:
    """Each of ``kept`` written for ``SHORT_MS`` (by ``writer``, else ``delivery``) and held by
    ``delivery``'s context: due at the next tick."""
    ctx = cast(Context, SimpleNamespace(delivery=delivery))
    for each in kept:
        if isinstance(each, Entry):
            (writer or delivery).enter_planning(each.step, each.member, SHORT_MS)
        else:
            (writer or delivery).mark_planning(each.schedule_id, each.request_id, SHORT_MS)
        keeper.hold(ctx, each, life_s=0.0)


def test_the_service_user_keeps_entries_and_marks_on_every_masters_own_client(
    cluster: tuple[LocalCluster, list[redis.Redis]],
    driven_keeper: StepKeeper,
) -> None:
    local, admins = cluster
    delivery = _as(local, SERVICE.default_user, PASSWORDS[SERVICE.password_env])
    client = delivery.client
    assert isinstance(client, RedisCluster)
    entries, marks = _on_each_master(client, per_master=2)
    _held(delivery, driven_keeper, [*entries, *marks])
    driven_keeper.tick()
    for each in [*entries, *marks]:
        driven_keeper.let_go(each)
    masters: list[ClusterNode] = client.get_primaries()  # type: ignore[no-untyped-call]
    unserved = [unserved_slots(client, node) for node in masters]
    owner = client.nodes_manager.get_node_from_slot(0)
    moved = [named_elsewhere(client, 0, node) for node in masters]  # None: none answered
    client.nodes_manager.initialize(last_failed_node_name=masters[0].name)  # ``Unanswered.remapped``'s
    try:
        assert min(left_ms(client, each) for each in [*entries, *marks]) > SHORT_MS
        assert unserved == [frozenset()] * 3  # None: a node did not answer its ``CLUSTER SLOTS``
        assert moved == [node.name != owner.name for node in masters]  # each asked another master
        assert _refusals(admins) == []
    finally:
        client.close()


def test_the_sidecar_user_claims_on_every_masters_own_client_and_asks_each_node(
    cluster: tuple[LocalCluster, list[redis.Redis]],
) -> None:
    local, admins = cluster
    url = f"redis://{SIDECAR.default_user}:{PASSWORDS[SIDECAR.password_env]}@127.0.0.1:{local.nodes[0].port}"
    delivery = Delivery.from_url(url, cluster=True)  # the sidecar's client
    client = delivery.client
    assert isinstance(client, RedisCluster)
    _, marks = _on_each_master(client, per_master=1)
    answered: list[str] = []
    for each in marks:  # one schedule on each master: its pipeline on that master's own client
        assert isinstance(each, InFlight)
        try:
            delivery.complete_and_claim(each.schedule_id, "w0", [], 1)
            answered.append("claimed")
        except UnknownScheduleError:  # the claim script ran and found no such schedule
            answered.append("unknown")
    masters: list[ClusterNode] = client.get_primaries()  # type: ignore[no-untyped-call]
    unserved = [unserved_slots(client, node) for node in masters]
    try:
        assert len(answered) == 3
        assert unserved == [frozenset()] * 3
        assert _refusals(admins) == []
    finally:
        client.close()


def test_a_user_without_the_keeps_command_is_told_so_as_an_error_at_every_tick(
    cluster: tuple[LocalCluster, list[redis.Redis]],
    caplog: pytest.LogCaptureFixture,
    driven_keeper: StepKeeper,
) -> None:
    """The entries written by the service user (its requests), the keeper's client logged in as a
    user whose grants lack EVAL (an ACL applied again from an older definition, while requests ran).
    No tick heals that, only an operator's change to the ACL: an error at each tick, not the warning
    of an outage that passes (review52c)."""
    local, admins = cluster
    delivery = _as(local, NO_KEEP, PASSWORDS[SERVICE.password_env])
    writer = _as(local, SERVICE.default_user, PASSWORDS[SERVICE.password_env])
    client = delivery.client
    assert isinstance(client, RedisCluster)
    entries, _ = _on_each_master(client, per_master=2)
    _held(delivery, driven_keeper, entries, writer)
    with caplog.at_level(logging.WARNING, logger="service.pipeline"):
        driven_keeper.tick()
        driven_keeper.tick()
    still_held = driven_keeper.held()
    for each in entries:
        driven_keeper.let_go(each)
    told = f"6 steps' planning entries not extended: NoPermissionError: User {NO_KEEP} has no permissions"
    try:
        assert [
            (r.levelname, r.getMessage()) for r in caplog.records if "not extended" in r.getMessage()
        ] == [("ERROR", f"{told} to run the 'eval' command")] * 2
        assert still_held == len(entries)  # tried again at the next tick, not taken for kept
        assert max(left_ms(client, each) for each in entries) <= SHORT_MS
        assert {refused for _, refused in _refusals(admins)} == {"eval"}
    finally:
        client.close()
        writer.client.close()
